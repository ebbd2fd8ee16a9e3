//go:build race

package guestmem

import "testing"

// Race builds (CI) check that a front-end's memory is only touched inside
// Guard; the simulated guest's own memory (MapOwn) needs no Guard.
func TestCheckGuarded(t *testing.T) {
	fd := newMemfd(t, 1<<16)
	foreign, err := Map(fd, 0, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	own, err := MapOwn(fd, 0, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	panics := func(f func()) (p bool) {
		defer func() { p = recover() != nil }()
		f()
		return false
	}
	fv, ov := foreign.View(), own.View()
	sub, err := fv.Sub(4096, 8)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"Uint32":             func() { fv.Uint32(0) },
		"PutUint64 in a Sub": func() { sub.PutUint64(0, 1) },
		"CopyOut":            func() { fv.CopyOut(make([]byte, 4), 100) },
		"Bytes":              func() { fv.Bytes() },
		"LoadUint16Acquire":  func() { fv.LoadUint16Acquire(2) },
		"AddUint64":          func() { fv.AddUint64(8, 1) },
	} {
		if !panics(f) {
			t.Errorf("%s outside Guard did not panic", name)
		}
		if err := Guard(func() error { f(); return nil }); err != nil {
			t.Errorf("%s inside Guard: %v", name, err)
		}
	}
	if panics(func() { ov.PutUint32(0, 1); ov.Bytes() }) {
		t.Error("an own mapping's access outside Guard panicked")
	}
	if err := foreign.Unmap(); err != nil {
		t.Fatal(err)
	}
	// The address range is free again: a later own mapping there is fine.
	again, err := MapOwn(fd, 0, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if panics(func() { again.View().Uint32(0) }) {
		t.Error("an unmapped foreign range is still checked")
	}
}
