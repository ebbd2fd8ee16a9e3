package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestParseLimits(t *testing.T) {
	l, err := parseLimits(json.RawMessage(`{"max_qp": 8, "max_mr_size": 4096}`))
	if err != nil || l.MaxQP != 8 || l.MaxMRSize != 4096 || l.MaxCQ != 0 {
		t.Fatalf("%+v %v", l, err)
	}
	if _, err := parseLimits(json.RawMessage(`{"max_qps": 8}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown field: %v", err)
	}
	if _, err := parseLimits(nil); err != nil {
		t.Fatal(err)
	}
	// Every field of abi.Limits has a JSON name: set all of them and check
	// that none stays zero.
	var all map[string]any
	b, _ := json.Marshal(limitsJSON{})
	json.Unmarshal(b, &all)
	for k := range all {
		all[k] = 1
	}
	b, _ = json.Marshal(all)
	l, err = parseLimits(b)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("abi.Limits.%s has no JSON field in limitsJSON", v.Type().Field(i).Name)
		}
	}
}

func TestFactoryClassifiesBadLimits(t *testing.T) {
	_, err := StellarDevice(context.Background(), DeviceSpec{Name: "x", Limits: json.RawMessage(`{"max_sge": 4000000000}`)}, nil)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("out-of-range limits: %v", err)
	}
	inst, err := StellarDevice(context.Background(), DeviceSpec{Name: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Device.Close(); err != nil {
		t.Fatal(err)
	}
}
