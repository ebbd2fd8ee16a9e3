package guestmem

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func memfd(t *testing.T, size uint64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("fixed-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	return fd
}

func TestReserveAndMapFixed(t *testing.T) {
	ps := PageSize()
	r, err := ReserveAddressSpace(4 * ps)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unmap()
	if r.Addr() == 0 || r.Addr()%ps != 0 {
		t.Fatalf("Addr = %#x", r.Addr())
	}
	fd := memfd(t, 2*ps)
	if _, err := unix.Pwrite(fd, []byte("hello"), int64(ps)+3); err != nil {
		t.Fatal(err)
	}
	// Map file page 1 at reservation page 2.
	if err := r.MapFileFixed(2*ps, ps, fd, ps, true); err != nil {
		t.Fatal(err)
	}
	v, err := r.View().Sub(2*ps, ps)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(v.Bytes()[3:8]); got != "hello" {
		t.Fatalf("read %q through the fixed mapping", got)
	}
	v.CopyIn(0, []byte("xy"))
	buf := make([]byte, 2)
	if _, err := unix.Pread(fd, buf, int64(ps)); err != nil || string(buf) != "xy" {
		t.Fatalf("file sees %q, %v", buf, err)
	}
	if err := r.ReleaseFixed(2*ps, ps); err != nil {
		t.Fatal(err)
	}
	// The page is gone from the reservation: remapping page 0 of the file
	// there shows its (zero) contents, not the old page.
	if err := r.MapFileFixed(2*ps, ps, fd, 0, false); err != nil {
		t.Fatal(err)
	}
	if v.Uint16(0) != 0 {
		t.Fatal("old page still visible")
	}

	for _, tc := range []struct {
		name         string
		off, n, fOff uint64
	}{
		{"unaligned offset", 1, ps, 0},
		{"unaligned length", 0, ps + 1, 0},
		{"unaligned file offset", 0, ps, 7},
		{"past end", 3 * ps, 2 * ps, 0},
		{"wraps", ^uint64(0) &^ (ps - 1), 2 * ps, 0},
		{"empty", 0, 0, 0},
	} {
		if err := r.MapFileFixed(tc.off, tc.n, fd, tc.fOff, true); err == nil {
			t.Errorf("%s: MapFileFixed succeeded", tc.name)
		}
	}
	if err := r.ReleaseFixed(ps, 4*ps); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("ReleaseFixed past end: %v", err)
	}
}

func TestWindow(t *testing.T) {
	ps := PageSize()
	fd := memfd(t, 4*ps)
	m, err := MapOwn(fd, 0, 4*ps)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	w, err := m.Window(2*ps+8, ps)
	if err != nil {
		t.Fatal(err)
	}
	if w.Size() != ps || w.Addr() != m.Addr()+2*ps+8 {
		t.Fatalf("window size %#x addr %#x (mapping %#x)", w.Size(), w.Addr(), m.Addr())
	}
	w.View().PutUint32(0, 0xdeadbeef)
	if m.View().Uint32(2*ps+8) != 0xdeadbeef {
		t.Fatal("window does not alias the mapping")
	}
	// A window never unmaps the memory it shares, whichever end it is at.
	tail, err := m.Window(3*ps, ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := tail.Unmap(); err == nil {
		t.Error("unmapping a window reported success")
	}
	if err := w.Unmap(); err == nil {
		t.Error("unmapping a window reported success")
	}
	if m.View().Uint32(2*ps+8) != 0xdeadbeef {
		t.Fatal("mapping damaged by unmapping its windows")
	}
	if _, err := m.Window(0, 4*ps); err == nil {
		t.Error("whole-mapping window allowed")
	}
	if _, err := m.Window(3*ps, 2*ps); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("window past end: %v", err)
	}
}
