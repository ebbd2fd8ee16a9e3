package emtt

import (
	"reflect"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
)

// Region's layout is what its doc comment says: 256 bytes (a size class
// whose objects start on a 64-byte boundary), everything a one-piece
// translation reads in its first cache line, the first segment's guest
// address and pin data path in the second.
func TestRegionLayout(t *testing.T) {
	rt := reflect.TypeFor[Region]()
	if rt.Size() != 256 {
		t.Fatalf("Region is %d bytes, want 256", rt.Size())
	}
	off := func(typ reflect.Type, name string) uintptr {
		f, ok := typ.FieldByName(name)
		if !ok {
			t.Fatalf("%v has no field %s", typ, name)
		}
		return f.Offset
	}
	line := func(lo, n uintptr) uintptr {
		if lo/64 != (lo+n-1)/64 {
			t.Errorf("[%d, +%d) straddles two lines", lo, n)
		}
		return lo / 64
	}
	st := reflect.TypeFor[segment]()
	one := off(rt, "one")
	for _, f := range []struct {
		name string
		at   uintptr
		n    uintptr
		want uintptr
	}{
		{"Key", off(rt, "Key"), 4, 0},
		{"PD", off(rt, "PD"), 4, 0},
		{"Access", off(rt, "Access"), 4, 0},
		{"Type", off(rt, "Type"), 1, 0},
		{"valid", off(rt, "valid"), 1, 0},
		{"multi", off(rt, "multi"), 1, 0},
		{"pinned", off(rt, "pinned"), 1, 0},
		{"IOVA", off(rt, "IOVA"), 8, 0},
		{"Length", off(rt, "Length"), 8, 0},
		{"one.view", one + off(st, "view"), 24, 0},
		{"one.off", one + off(st, "off"), 8, 0},
		{"one.gpa", one + off(st, "gpa"), 8, 1},
		{"one.pins (but its area)", one + off(st, "pins"), 56, 1},
	} {
		if got := line(f.at, f.n); got != f.want {
			t.Errorf("%s at byte %d is on line %d, want %d", f.name, f.at, got, f.want)
		}
	}
	// The allocator keeps its promise: regions start on a line.
	m, err := guestmem.MapAnonymous(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	mem, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: 0, Size: 1 << 20, UserAddr: 1 << 40, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	tab := New(16, nil)
	for i := range 8 {
		r, err := tab.Insert(mem, Spec{PD: 1, IOVA: uint64(i) << 12, Length: 4096, Spans: []Span{{GPA: 0, Len: 4096}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := reflect.ValueOf(r).Pointer(); p%64 != 0 {
			t.Errorf("region %d at %#x, not on a 64-byte boundary", i, p)
		}
	}
}

// A table's first keys share a cache line, and nothing else of the table
// need be read to look them up: a translation through one of a device's
// first four keys reads one line of its table.
func TestTableLayout(t *testing.T) {
	if f, _ := reflect.TypeFor[Table]().FieldByName("low"); f.Offset != 0 {
		t.Errorf("low at byte %d of the table, want first", f.Offset)
	}
	for i := range 8 {
		low := reflect.ValueOf(New(16, nil)).Elem().FieldByName("low")
		if a, b := low.Index(1).UnsafeAddr(), low.Index(4).UnsafeAddr(); a/64 != b/64 {
			t.Errorf("table %d: the slots of keys 1 and 4 at %#x and %#x, on different lines", i, a, b)
		}
	}
}
