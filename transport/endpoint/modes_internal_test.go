package endpoint

import "testing"

// BothModes runs f with the loop blocking in its read (the default) and
// polling from a thread of its own: every test of the loop holds in
// both.
func BothModes(t *testing.T, f func(t *testing.T, o Options)) {
	for _, m := range []struct {
		name string
		o    Options
	}{{"blocking", Options{}}, {"polling", Options{Poll: &Polling{}}}} {
		t.Run(m.name, func(t *testing.T) { f(t, m.o) })
	}
}
