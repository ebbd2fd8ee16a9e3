package twolevel

import (
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
)

// Page geometry of the MTT, the IOMMU and the ATC: 4 KiB pages, 4 levels
// of 512-entry tables, 48-bit guest physical addresses.
const (
	PageShift = 12
	PageSize  = 1 << PageShift
	Levels    = 4
	levelBits = 9
	// AddrBits is the width of the guest physical addresses a domain
	// translates.
	AddrBits = PageShift + Levels*levelBits
)

// Page table entry bits. A leaf holds the host physical page; a table
// entry holds the index of the next table, which is what a physical
// address of that table would be in a slab of 4 KiB tables.
const (
	ptePresent  = 1 << 0 // readable
	pteWrite    = 1 << 1
	pteAddrMask = (1<<52 - 1) &^ (PageSize - 1)
)

// Errors of the IOMMU, wrapped with detail.
var (
	// ErrFault is an IOMMU fault: the guest physical page is not mapped
	// (or not writable for a write) in the device's domain.
	ErrFault = errors.New("twolevel: IOMMU fault")
	// ErrUnaligned refuses a mapping or an MR whose pieces are not on
	// 4 KiB page boundaries, which page-granular tables cannot express.
	ErrUnaligned = errors.New("twolevel: not on 4 KiB page boundaries")
)

type pageTable [1 << levelBits]uint64

// Domain is one device's IOMMU domain: a 4-level page table from guest
// physical to host physical pages.
type Domain struct {
	// tables[0] is the root. Tables are appended and never freed, so an
	// entry's table index stays valid.
	tables []pageTable
	pages  uint64 // leaf entries mapped
}

// NewDomain builds the domain of a device whose guest RAM is mem, mapping
// every region read-write at the host physical addresses host gives its
// mapping.
func NewDomain(mem *guestmem.Table, host *HostMemory) (*Domain, error) {
	regs := mem.Regions()
	want := 1
	for _, r := range regs {
		want += int(r.Size>>(PageShift+levelBits)) + 3
	}
	d := &Domain{tables: make([]pageTable, 1, want)}
	for _, r := range regs {
		// A region starts at byte 0 of its mapping (guestmem.Table).
		if err := d.Map(r.GuestPhys, host.Add(r.Mapping), r.Size, true); err != nil {
			return nil, fmt.Errorf("region %v: %w", r, err)
		}
	}
	return d, nil
}

// Map maps guest physical [gpa, gpa+n) to host physical [hpa, hpa+n),
// writable or read-only. gpa and hpa must be page aligned; a partial last
// page is mapped whole.
func (d *Domain) Map(gpa, hpa, n uint64, write bool) error {
	end := gpa + n
	switch {
	case gpa%PageSize != 0 || hpa%PageSize != 0:
		return fmt.Errorf("map %#x -> %#x: %w", gpa, hpa, ErrUnaligned)
	case end < gpa || end > 1<<AddrBits || hpa+n < hpa || hpa+n > pteAddrMask:
		return fmt.Errorf("map [%#x, +%#x) -> %#x: outside %d-bit addresses: %w", gpa, n, hpa, AddrBits, ErrFault)
	}
	flags := uint64(ptePresent)
	if write {
		flags |= pteWrite
	}
	for gpa < end {
		leaf := d.leaf(gpa)
		for i := (gpa >> PageShift) & (1<<levelBits - 1); i < 1<<levelBits && gpa < end; i++ {
			if d.tables[leaf][i]&ptePresent == 0 {
				d.pages++
			}
			d.tables[leaf][i] = hpa | flags
			gpa += PageSize
			hpa += PageSize
		}
	}
	return nil
}

// leaf returns the index of the last-level table for gpa, allocating the
// tables on the way.
func (d *Domain) leaf(gpa uint64) uint64 {
	t := uint64(0)
	for l := Levels - 1; l > 0; l-- {
		i := (gpa >> (PageShift + l*levelBits)) & (1<<levelBits - 1)
		e := d.tables[t][i]
		if e&ptePresent == 0 {
			d.tables = append(d.tables, pageTable{})
			e = uint64(len(d.tables)-1)<<PageShift | ptePresent | pteWrite
			d.tables[t][i] = e
		}
		t = e >> PageShift
	}
	return t
}

// Walk translates gpa to its host physical address by walking the four
// levels: each load's address depends on the entry the previous one read.
func (d *Domain) Walk(gpa uint64, write bool) (uint64, error) {
	pte, err := d.walk(gpa)
	if err == nil && write && pte&pteWrite == 0 {
		err = fmt.Errorf("write to read-only guest physical %#x: %w", gpa, ErrFault)
	}
	if err != nil {
		return 0, err
	}
	return pte&pteAddrMask | gpa&(PageSize-1), nil
}

// walk returns the leaf entry of gpa.
func (d *Domain) walk(gpa uint64) (uint64, error) {
	if gpa>>AddrBits != 0 {
		return 0, fmt.Errorf("guest physical %#x beyond %d bits: %w", gpa, AddrBits, ErrFault)
	}
	tabs := d.tables
	t := &tabs[0]
	for l := Levels - 1; l > 0; l-- {
		e := t[(gpa>>(PageShift+l*levelBits))&(1<<levelBits-1)]
		if e&ptePresent == 0 {
			return 0, fmt.Errorf("guest physical %#x not mapped (level %d): %w", gpa, l+1, ErrFault)
		}
		t = &tabs[e>>PageShift]
	}
	e := t[(gpa>>PageShift)&(1<<levelBits-1)]
	if e&ptePresent == 0 {
		return 0, fmt.Errorf("guest physical %#x not mapped: %w", gpa, ErrFault)
	}
	return e, nil
}

// Pages is the number of 4 KiB pages mapped; Tables the number of page
// tables (each 4 KiB) holding them.
func (d *Domain) Pages() uint64 { return d.pages }
func (d *Domain) Tables() int   { return len(d.tables) }
