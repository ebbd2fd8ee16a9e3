package guestmem

import (
	"errors"
	"fmt"
	"slices"
)

// Region places guest memory at a guest physical address. It mirrors the
// vhost-user memory region: the VMM maps the same bytes at UserAddr in its
// own address space, and the Mapping covers MmapOffset.. of the region's file.
type Region struct {
	GuestPhys  uint64
	Size       uint64
	UserAddr   uint64
	MmapOffset uint64
	Mapping    *Mapping
}

func (r Region) String() string {
	return fmt.Sprintf("gpa [%#x, +%#x) uva %#x off %#x", r.GuestPhys, r.Size, r.UserAddr, r.MmapOffset)
}

func (r Region) gpaEnd() uint64 { return r.GuestPhys + r.Size }
func (r Region) uvaEnd() uint64 { return r.UserAddr + r.Size }

// Table is an immutable set of non-overlapping regions sorted by guest
// physical address. The zero Table (or nil) holds no memory.
type Table struct {
	regions []Region
}

// Errors a Table reports, wrapped with detail.
var (
	ErrOverlap   = errors.New("region overlaps another")
	ErrBadRegion = errors.New("invalid region")
	ErrNoRegion  = errors.New("no such region")
)

// NewTable validates regions and builds a table from them. Regions must be
// non-empty, must not wrap the address space, must be backed by a mapping at
// least as large, and must not overlap each other in guest physical or user
// address space (either overlap would make translation ambiguous).
func NewTable(regions []Region) (*Table, error) {
	rs := slices.Clone(regions)
	for _, r := range rs {
		if err := r.validate(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(rs, func(a, b Region) int {
		switch {
		case a.GuestPhys < b.GuestPhys:
			return -1
		case a.GuestPhys > b.GuestPhys:
			return 1
		}
		return 0
	})
	for i := 1; i < len(rs); i++ {
		if rs[i].GuestPhys < rs[i-1].gpaEnd() {
			return nil, fmt.Errorf("%v and %v: guest physical %w", rs[i-1], rs[i], ErrOverlap)
		}
	}
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if rs[i].UserAddr < rs[j].uvaEnd() && rs[j].UserAddr < rs[i].uvaEnd() {
				return nil, fmt.Errorf("%v and %v: user address %w", rs[i], rs[j], ErrOverlap)
			}
		}
	}
	return &Table{regions: rs}, nil
}

func (r Region) validate() error {
	switch {
	case r.Size == 0:
		return fmt.Errorf("%v: empty: %w", r, ErrBadRegion)
	case r.GuestPhys+r.Size < r.GuestPhys || r.UserAddr+r.Size < r.UserAddr:
		return fmt.Errorf("%v: wraps the address space: %w", r, ErrBadRegion)
	case r.Mapping == nil || r.Mapping.Size() < r.Size:
		return fmt.Errorf("%v: not backed by a large enough mapping: %w", r, ErrBadRegion)
	}
	return nil
}

// Regions returns a copy of the table's regions in guest physical order.
func (t *Table) Regions() []Region {
	if t == nil {
		return nil
	}
	return slices.Clone(t.regions)
}

// Len is the number of regions.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.regions)
}

// Size is the total number of bytes the table maps.
func (t *Table) Size() uint64 {
	var n uint64
	if t != nil {
		for _, r := range t.regions {
			n += r.Size
		}
	}
	return n
}

// find returns the index of the region holding gpa, or -1.
func (t *Table) find(gpa uint64) int {
	if t == nil {
		return -1
	}
	i, _ := slices.BinarySearchFunc(t.regions, gpa, func(r Region, a uint64) int {
		switch {
		case r.gpaEnd() <= a:
			return -1
		case r.GuestPhys > a:
			return 1
		}
		return 0
	})
	if i < len(t.regions) && t.regions[i].GuestPhys <= gpa && gpa < t.regions[i].gpaEnd() {
		return i
	}
	return -1
}

// Lookup returns the region holding gpa.
func (t *Table) Lookup(gpa uint64) (Region, bool) {
	i := t.find(gpa)
	if i < 0 {
		return Region{}, false
	}
	return t.regions[i], true
}

// Translate returns a view of the n bytes of guest memory at gpa. The range
// must lie inside one region; gpa and n may be hostile. A zero-length range
// translates to an empty view wherever it points.
func (t *Table) Translate(gpa, n uint64) (View, error) {
	if n == 0 {
		return View{}, nil
	}
	i := t.find(gpa)
	if i < 0 {
		return View{}, fmt.Errorf("guest physical %#x: %w", gpa, ErrOutOfRange)
	}
	r := t.regions[i]
	v, err := r.Mapping.View().Sub(gpa-r.GuestPhys, n)
	if err != nil || gpa-r.GuestPhys+n > r.Size {
		return View{}, fmt.Errorf("guest physical [%#x, +%#x) crosses the end of region %v: %w", gpa, n, r, ErrOutOfRange)
	}
	return v, nil
}

// UserToGuest translates a VMM user address (as SET_VRING_ADDR carries it)
// into a guest physical address.
func (t *Table) UserToGuest(uva uint64) (uint64, error) {
	if t != nil {
		for _, r := range t.regions {
			if r.UserAddr <= uva && uva < r.uvaEnd() {
				return r.GuestPhys + (uva - r.UserAddr), nil
			}
		}
	}
	return 0, fmt.Errorf("user address %#x: %w", uva, ErrOutOfRange)
}

// With returns a new table holding t's regions and r.
func (t *Table) With(r Region) (*Table, error) {
	return NewTable(append(t.Regions(), r))
}

// Without returns a new table without the region that matches gpa, size and
// user address exactly, and the region removed (whose mapping the caller
// now owns).
func (t *Table) Without(gpa, size, uva uint64) (*Table, Region, error) {
	i := t.find(gpa)
	if i < 0 || t.regions[i].GuestPhys != gpa || t.regions[i].Size != size || t.regions[i].UserAddr != uva {
		return nil, Region{}, fmt.Errorf("gpa %#x size %#x uva %#x: %w", gpa, size, uva, ErrNoRegion)
	}
	rs := slices.Delete(t.Regions(), i, i+1)
	return &Table{regions: rs}, t.regions[i], nil
}
