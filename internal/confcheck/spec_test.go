package confcheck

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/api"
)

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits(json.RawMessage(`{"max_qp": 8, "max_mr_size": 4096}`))
	if err != nil || l.MaxQP != 8 || l.MaxMRSize != 4096 || l.MaxCQ != 0 {
		t.Fatalf("%+v %v", l, err)
	}
	// The one size among the limits takes a unit too.
	l, err = ParseLimits(json.RawMessage(`{"max_mr_size": "1G"}`))
	if err != nil || l.MaxMRSize != 1<<30 {
		t.Fatalf("max_mr_size 1G: %+v %v", l, err)
	}
	if _, err := ParseLimits(json.RawMessage(`{"max_mr_size": "1X"}`)); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "limits.max_mr_size") {
		t.Fatalf("max_mr_size 1X: %v", err)
	}
	if _, err := ParseLimits(json.RawMessage(`{"max_mr_size": "8P"}`)); err == nil {
		t.Fatal("max_mr_size 8P accepted")
	}
	if _, err := ParseLimits(json.RawMessage(`{"max_qps": 8}`)); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("unknown field: %v", err)
	}
	if _, err := ParseLimits(nil); err != nil {
		t.Fatal(err)
	}
	// Every field of abi.Limits has a JSON name: set all of them and check
	// that none stays zero.
	var all map[string]any
	b, _ := json.Marshal(api.Limits{})
	json.Unmarshal(b, &all)
	for k := range all {
		all[k] = 1
	}
	all["page_size_cap"] = 4096 // 4 KiB pages are required
	b, _ = json.Marshal(all)
	l, err = ParseLimits(b)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("abi.Limits.%s has no JSON field in api.Limits", v.Type().Field(i).Name)
		}
	}
}
