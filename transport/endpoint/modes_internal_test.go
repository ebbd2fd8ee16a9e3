package endpoint

import (
	"runtime"
	"testing"
)

// BothModes runs f with the loop blocking in its read (the default) and
// polling from a thread of its own: every test of the loop holds in
// both. Polling runs with at least two processors beside two polling
// loops, as vstellard grants a data-path thread (engine.Cores): with
// fewer, the spinning threads would hold every processor and starve the
// test's own goroutines.
func BothModes(t *testing.T, f func(t *testing.T, o Options)) {
	t.Run("blocking", func(t *testing.T) { f(t, Options{}) })
	t.Run("polling", func(t *testing.T) {
		pollingProcs(t)
		f(t, Options{Poll: &Polling{}})
	})
}

// pollingProcs raises GOMAXPROCS to 4 for the test if it is lower.
func pollingProcs(t *testing.T) {
	if p := runtime.GOMAXPROCS(0); p < 4 {
		runtime.GOMAXPROCS(4)
		t.Cleanup(func() { runtime.GOMAXPROCS(p) })
	}
}
