//go:build linux

package virtiopci

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
)

func TestDecodePagemap(t *testing.T) {
	for _, c := range []struct {
		e   uint64
		pfn uint64
		ok  bool
	}{
		{1<<63 | 0x12345, 0x12345, true},
		{1<<63 | 1<<62 | 1<<61 | 1<<56 | 1<<55 | 0x7, 0x7, true}, // flag bits 55-62 are not the PFN
		{1<<63 | (1<<55 - 1), 1<<55 - 1, true},
		{0x12345, 0, false}, // not present
		{1 << 63, 0, false}, // present, PFN hidden
	} {
		pfn, err := decodePagemap(c.e)
		if (err == nil) != c.ok || pfn != c.pfn {
			t.Errorf("entry %#x: pfn %#x, %v; want %#x ok=%v", c.e, pfn, err, c.pfn, c.ok)
		}
	}
	if _, err := decodePagemap(1 << 63); !errors.Is(err, errNoPFN) {
		t.Errorf("hidden PFN: %v", err)
	}
}

// TestPhysAddrsOfLockedMemory reads the real pagemap: locked pages are
// present, at distinct page-aligned physical addresses.
func TestPhysAddrsOfLockedMemory(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (pagemap hides frame numbers otherwise)")
		}
		t.Skip("needs root: pagemap hides frame numbers otherwise")
	}
	ps := guestmem.PageSize()
	m, err := guestmem.MapAnonymous(4 * ps)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	b, err := m.PageRange(0, 4*ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mlock(b); err != nil {
		t.Fatal(err)
	}
	defer unix.Munlock(b)
	pas, err := physAddrs(m.Addr(), 4, ps)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for i, pa := range pas {
		if pa == 0 || pa%ps != 0 || seen[pa] {
			t.Errorf("page %d at physical %#x (all: %#x)", i, pa, pas)
		}
		seen[pa] = true
	}
}
