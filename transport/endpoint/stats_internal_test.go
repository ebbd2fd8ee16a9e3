package endpoint

import (
	"reflect"
	"testing"

	"github.com/vstellar/vstellar/transport"
)

// TestAddStatsEveryField: addStats adds every counter transport.Stats
// has, so a counter added there cannot be left out of the totals.
func TestAddStatsEveryField(t *testing.T) {
	var a, b transport.Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		if va.Field(i).Kind() != reflect.Uint64 {
			t.Fatalf("field %s is %v: addStats handles uint64 counters", va.Type().Field(i).Name, va.Field(i).Kind())
		}
		va.Field(i).SetUint(uint64(1000 + i))
		vb.Field(i).SetUint(uint64(1 + i))
	}
	addStats(&a, b)
	for i := range va.NumField() {
		if got, want := va.Field(i).Uint(), uint64(1001+2*i); got != want {
			t.Errorf("%s: %d, want %d", va.Type().Field(i).Name, got, want)
		}
	}
}
