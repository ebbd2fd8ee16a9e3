//go:build linux

package virtiopci

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// /proc/self/pagemap has one 64-bit entry per virtual page
// (Documentation/admin-guide/mm/pagemap.rst): bit 63 present, bits 0-54
// the page frame number, which reads as 0 without CAP_SYS_ADMIN.
const (
	pagemapPresent = 1 << 63
	pagemapPFNMask = 1<<55 - 1
	pagemapEntry   = 8
)

// errNoPFN: the page is present but the kernel hid its frame number.
var errNoPFN = errors.New("virtiopci: pagemap hides page frame numbers (needs root)")

// decodePagemap turns one pagemap entry into a physical page frame number.
func decodePagemap(e uint64) (uint64, error) {
	if e&pagemapPresent == 0 {
		return 0, fmt.Errorf("virtiopci: page not present (entry %#x)", e)
	}
	pfn := e & pagemapPFNMask
	if pfn == 0 {
		return 0, errNoPFN
	}
	return pfn, nil
}

// physAddrs returns the physical address of each of the n pages of
// pageSize bytes at virtual address va, which must be resident (locked).
// Only the entry of each page's first small page is read: a huge page is
// physically contiguous.
func physAddrs(va uint64, n int, pageSize uint64) ([]uint64, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("virtiopci: %w", err)
	}
	defer f.Close()
	small := uint64(os.Getpagesize())
	pas := make([]uint64, n)
	var b [pagemapEntry]byte
	for i := range pas {
		v := va + uint64(i)*pageSize
		if _, err := f.ReadAt(b[:], int64(v/small*pagemapEntry)); err != nil {
			return nil, fmt.Errorf("virtiopci: pagemap at %#x: %w", v, err)
		}
		pfn, err := decodePagemap(binary.LittleEndian.Uint64(b[:]))
		if err != nil {
			return nil, fmt.Errorf("%w (virtual %#x)", err, v)
		}
		pas[i] = pfn * small
	}
	return pas, nil
}
