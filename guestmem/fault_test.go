package guestmem

import (
	"errors"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFaultAddr: touching memory whose file was truncated under the
// mapping is a fault FaultAddr recognises, with the address; other
// panics are not faults.
func TestFaultAddr(t *testing.T) {
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
	got := func() (r any) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { r = recover() }()
		v.CopyIn(4096, []byte{1})
		return nil
	}()
	addr, ok := FaultAddr(got)
	if !ok || !IsFault(got) || addr == 0 {
		t.Fatalf("fault %v: FaultAddr %#x %v", got, addr, ok)
	}
	for _, r := range []any{nil, "boom", errors.New("not a runtime error")} {
		if IsFault(r) {
			t.Errorf("%v taken for a fault", r)
		}
	}
	if n := ViewsLen([]View{v, v}); n != 2<<16 {
		t.Errorf("ViewsLen %d", n)
	}
}
