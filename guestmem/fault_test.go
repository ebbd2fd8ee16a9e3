package guestmem

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuardTurnsAFaultIntoAnError: touching memory whose file was
// truncated under the mapping is a fault Guard reports as a *FaultError
// with the address; other panics go on; the goroutine's fault setting is
// what it was before.
func TestGuardTurnsAFaultIntoAnError(t *testing.T) {
	fd := newMemfd(t, 1<<16)
	m, err := Map(fd, 0, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	if err := unix.Ftruncate(fd, 0); err != nil {
		t.Fatal(err)
	}
	v := m.View()
	err = Guard(func() error {
		v.CopyIn(4096, []byte{1})
		return errors.New("not reached")
	})
	fe, ok := errors.AsType[*FaultError](err)
	if !ok || fe.Addr == 0 {
		t.Fatalf("Guard = %v, want a *FaultError with an address", err)
	}
	want := errors.New("fn's own error")
	if err := Guard(func() error { return want }); err != want {
		t.Errorf("Guard = %v, want fn's error", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "bug" {
				t.Errorf("recovered %v, want the bug's panic", r)
			}
		}()
		Guard(func() error { panic("bug") })
	}()
	for _, r := range []any{nil, "boom", errors.New("not a runtime error")} {
		if IsFault(r) {
			t.Errorf("%v taken for a fault", r)
		}
	}
	if n := ViewsLen([]View{v, v}); n != 2<<16 {
		t.Errorf("ViewsLen %d", n)
	}
}
