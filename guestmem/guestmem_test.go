package guestmem

import (
	"errors"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func newMemfd(t *testing.T, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("guestmem-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	return fd
}

func TestMapHonoursOffsetAndSharesBytes(t *testing.T) {
	fd := newMemfd(t, 1<<20)
	whole, err := MapOwn(fd, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Unmap()
	// An offset that is not page-aligned still lands on the right byte.
	part, err := MapOwn(fd, 0x1234, 0x100)
	if err != nil {
		t.Fatal(err)
	}
	defer part.Unmap()
	whole.View().Bytes()[0x1234] = 0x5a
	if got := part.View().Bytes()[0]; got != 0x5a {
		t.Fatalf("byte at offset 0x1234 through the second mapping = %#x", got)
	}
	if part.View().Len() != 0x100 {
		t.Fatalf("view length %#x", part.View().Len())
	}
}

func TestMapRefusesWhatCannotBeBacked(t *testing.T) {
	fd := newMemfd(t, 1<<20)
	efd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	defer unix.Close(efd)
	for _, c := range []struct {
		name      string
		fd        int
		off, size uint64
	}{
		{"beyond the end", fd, 0, 2 << 20},
		{"offset beyond the end", fd, 1 << 20, 4096},
		{"wrapping", fd, ^uint64(0) - 10, 100},
		{"not a regular file", efd, 0, 4096},
		{"zero size", fd, 0, 0},
	} {
		if m, err := Map(c.fd, c.off, c.size); err == nil {
			m.Unmap()
			t.Errorf("%s: mapped", c.name)
		}
	}
}

func table(t *testing.T, rs ...Region) *Table {
	t.Helper()
	tb, err := NewTable(rs)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func anon(t *testing.T, size uint64) *Mapping {
	t.Helper()
	m, err := MapAnonymous(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	return m
}

func TestTableTranslate(t *testing.T) {
	lo, hi := anon(t, 0x10000), anon(t, 0x10000)
	tb := table(t,
		Region{GuestPhys: 4 << 30, Size: 0x10000, UserAddr: 0x7000_0001_0000, Mapping: hi},
		Region{GuestPhys: 0, Size: 0x10000, UserAddr: 0x7000_0000_0000, Mapping: lo},
	)
	lo.View().Bytes()[0x20] = 1
	hi.View().Bytes()[0x30] = 2
	for _, c := range []struct {
		gpa, n uint64
		ok     bool
		first  byte
	}{
		{0x20, 1, true, 1},
		{4<<30 + 0x30, 0x10, true, 2},
		{0xfff0, 0x10, true, 0},
		{0xfff0, 0x11, false, 0},         // runs off the region
		{0x10000, 1, false, 0},           // the hole
		{4<<30 + 0x10000, 1, false, 0},   // past the top
		{^uint64(0) - 4, 0x10, false, 0}, // wraps
		{0x5, ^uint64(0), false, 0},      // huge length
	} {
		v, err := tb.Translate(c.gpa, c.n)
		if (err == nil) != c.ok {
			t.Errorf("Translate(%#x, %#x): err %v, want ok=%v", c.gpa, c.n, err, c.ok)
			continue
		}
		if !c.ok {
			if !errors.Is(err, ErrOutOfRange) {
				t.Errorf("Translate(%#x, %#x): %v does not wrap ErrOutOfRange", c.gpa, c.n, err)
			}
			continue
		}
		if v.Len() != c.n || v.Bytes()[0] != c.first {
			t.Errorf("Translate(%#x, %#x): len %#x first %#x", c.gpa, c.n, v.Len(), v.Bytes()[0])
		}
	}
	if gpa, err := tb.UserToGuest(0x7000_0001_0040); err != nil || gpa != 4<<30+0x40 {
		t.Fatalf("UserToGuest = %#x, %v", gpa, err)
	}
	if _, err := tb.UserToGuest(0x7000_0002_0000); err == nil {
		t.Fatal("UserToGuest outside every region succeeded")
	}
}

func TestTableRejectsBadRegions(t *testing.T) {
	m := anon(t, 0x10000)
	small := anon(t, 0x1000)
	for _, c := range []struct {
		name string
		rs   []Region
	}{
		{"guest physical overlap", []Region{
			{GuestPhys: 0, Size: 0x10000, UserAddr: 0, Mapping: m},
			{GuestPhys: 0x8000, Size: 0x1000, UserAddr: 0x100000, Mapping: small}}},
		{"user address overlap", []Region{
			{GuestPhys: 0, Size: 0x10000, UserAddr: 0x100000, Mapping: m},
			{GuestPhys: 0x100000, Size: 0x1000, UserAddr: 0x10f000, Mapping: small}}},
		{"empty", []Region{{GuestPhys: 0, Size: 0, Mapping: m}}},
		{"wraps", []Region{{GuestPhys: ^uint64(0) - 0xfff, Size: 0x10000, Mapping: m}}},
		{"mapping too small", []Region{{GuestPhys: 0, Size: 0x10000, Mapping: small}}},
		{"no mapping", []Region{{GuestPhys: 0, Size: 0x1000}}},
	} {
		if _, err := NewTable(c.rs); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func TestTableWithWithout(t *testing.T) {
	a, b := anon(t, 0x1000), anon(t, 0x1000)
	t1 := table(t, Region{GuestPhys: 0, Size: 0x1000, UserAddr: 0x10000, Mapping: a})
	t2, err := t1.With(Region{GuestPhys: 0x2000, Size: 0x1000, UserAddr: 0x20000, Mapping: b})
	if err != nil {
		t.Fatal(err)
	}
	if t1.Len() != 1 || t2.Len() != 2 || t2.Size() != 0x2000 {
		t.Fatalf("lengths %d %d size %#x", t1.Len(), t2.Len(), t2.Size())
	}
	if _, err := t2.With(Region{GuestPhys: 0x2800, Size: 0x1000, UserAddr: 0x90000, Mapping: b}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("overlapping With: %v", err)
	}
	if _, _, err := t2.Without(0x2000, 0x1000, 0x99999); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("Without with the wrong user address: %v", err)
	}
	t3, gone, err := t2.Without(0x2000, 0x1000, 0x20000)
	if err != nil || gone.Mapping != b || t3.Len() != 1 {
		t.Fatalf("Without: %v %v len %d", err, gone, t3.Len())
	}
	if _, err := t3.Translate(0x2000, 1); err == nil {
		t.Fatal("removed region still translates")
	}
}

func TestViewSub(t *testing.T) {
	v := anon(t, 0x100).View()
	if _, err := v.Sub(0xff, 2); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Sub past the end: %v", err)
	}
	if _, err := v.Sub(^uint64(0), 2); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Sub wrapping: %v", err)
	}
	s, err := v.Sub(0x10, 0x20)
	if err != nil || s.Len() != 0x20 {
		t.Fatal(err)
	}
	// A sub-view cannot be grown back over its parent.
	if _, err := s.Sub(0, 0x21); err == nil {
		t.Fatal("sub-view grew")
	}
}

func TestOrdered16BitAccessorsKeepNeighbours(t *testing.T) {
	v := anon(t, 64).View()
	for off := uint64(0); off < 16; off += 2 {
		v.PutUint64(0, 0x1122334455667788)
		v.PutUint64(8, 0x99aabbccddeeff00)
		before := append([]byte(nil), v.Bytes()[:16]...)
		v.StoreUint16Release(off, 0xbeef)
		if got := v.LoadUint16Acquire(off); got != 0xbeef {
			t.Fatalf("offset %d: read back %#x", off, got)
		}
		for i := range uint64(16) {
			if i == off || i == off+1 {
				continue
			}
			if v.Bytes()[i] != before[i] {
				t.Fatalf("store at %d changed byte %d", off, i)
			}
		}
	}
}

func TestOrdered16BitStoresDoNotLoseUpdates(t *testing.T) {
	// Two writers on the two halves of one word: with a plain
	// read-modify-write one would overwrite the other's half.
	v := anon(t, 8).View()
	var wg sync.WaitGroup
	for _, off := range []uint64{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100000 {
				v.StoreUint16Release(off, uint16(i))
			}
		}()
	}
	wg.Wait()
	if a, b := v.LoadUint16Acquire(0), v.LoadUint16Acquire(2); a != 99999%65536 || b != 99999%65536 {
		t.Fatalf("halves %d %d, want %d", a, b, 99999%65536)
	}
}

func TestAtomics64(t *testing.T) {
	v := anon(t, 16).View()
	v.PutUint64(8, 10)
	if old := v.AddUint64(8, 5); old != 10 || v.Uint64(8) != 15 {
		t.Fatalf("AddUint64: old %d now %d", old, v.Uint64(8))
	}
	if old := v.CompareAndSwapUint64(8, 3, 7); old != 15 || v.Uint64(8) != 15 {
		t.Fatalf("failed CAS: old %d now %d", old, v.Uint64(8))
	}
	if old := v.CompareAndSwapUint64(8, 15, 7); old != 15 || v.Uint64(8) != 7 {
		t.Fatalf("CAS: old %d now %d", old, v.Uint64(8))
	}
	if !v.Aligned(8, 8) || v.Aligned(4, 8) {
		t.Fatal("Aligned")
	}
}
