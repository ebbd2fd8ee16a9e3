package emtt

import (
	"fmt"
	"sort"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// EntryShift is the size of a translation entry: 2 MiB of IOVA, the pin
// granule.
const EntryShift = pvdma.ChunkShift

// segment is a host-contiguous piece of a region: bytes [off, off+view.Len())
// of the region, at guest physical gpa, in the pin cache's area (whose
// data path pins holds; zero in a table without a cache). The view and
// offset come first, the pin data path after them (see Region's layout).
type segment struct {
	view guestmem.View
	off  uint64
	gpa  uint64
	pins pvdma.Pins
}

// Region is one registered memory region. It is immutable once published.
//
// A region's first segment lives in the region itself (one), and the
// fields a translation reads are laid out by cache line: a Region is 256
// bytes, a size class of Go's allocator whose objects start on a 64-byte
// boundary, so that a translation through a region of one host-contiguous
// piece (the usual case) reads one line of it (line 0: key, checks, range
// and the first segment's view and offset), and a pin reference one more
// (line 1: the first segment's guest address and pin data path). With a
// thousand devices the regions no longer fit the CPU's caches, and each
// line a translation need not wait for is a cache miss saved.
// TestRegionLayout keeps this true.
type Region struct {
	// line 0
	Key    Key
	PD     uint32
	Access abi.Access
	Type   MemType
	valid  bool
	multi  bool // several segments: segs (else one[:], read without segs)
	pinned bool // the segments point into a pin cache
	IOVA   uint64
	Length uint64
	one    [1]segment // its view and off end line 0; gpa and pins are line 1

	segs []segment // one[:] unless the region has several pieces

	// Spans are the guest physical ranges behind [IOVA, IOVA+Length), in
	// order; their lengths sum to Length.
	Spans []Span
	// entries maps each 2 MiB IOVA window, counted from IOVA>>EntryShift,
	// to the first segment in it, so a translation goes straight to the
	// host piece it needs; the first and last windows hold the region's
	// exact tails. A region of one segment needs none; one whose windows
	// would outnumber its segments four times (a few large pages repeated)
	// searches its few segments instead, so entries never cost more heap
	// than the segments the span budget already bounds.
	entries []uint32
	// hold keeps the region's chunks pinned in pvdma.ModeAtRegMR.
	hold pvdma.Hold
	_    [24]byte // to 256 bytes (TestRegionLayout)
}

// Valid reports whether the region's guest memory is still mapped.
func (r *Region) Valid() bool { return r.valid }

// Check verifies that a DMA of n bytes at iova, from protection domain pd,
// needing access, may use the region. need 0 means local read, which every
// region grants.
func (r *Region) Check(pd uint32, need abi.Access, iova, n uint64) error {
	switch {
	case !r.valid:
		return fmt.Errorf("key %#x: %w", uint32(r.Key), ErrInvalidated)
	case r.Type != MemGuestRAM:
		return fmt.Errorf("key %#x is %v: %w", uint32(r.Key), r.Type, ErrIOMemory)
	case r.PD != pd:
		return fmt.Errorf("key %#x: pd %d, want %d: %w", uint32(r.Key), r.PD, pd, ErrPD)
	case r.Access&need != need:
		return fmt.Errorf("key %#x: access %#x lacks %#x: %w", uint32(r.Key), uint32(r.Access), uint32(need&^r.Access), ErrAccess)
	}
	end := iova + n
	if iova < r.IOVA || end < iova || end > r.IOVA+r.Length {
		return fmt.Errorf("key %#x: [%#x, +%#x) outside [%#x, +%#x): %w", uint32(r.Key), iova, n, r.IOVA, r.Length, ErrRange)
	}
	return nil
}

// segmentAt returns the index of the segment holding region offset off.
func (r *Region) segmentAt(off uint64) int {
	switch {
	case !r.multi:
		return 0
	case r.entries != nil:
		w := (r.IOVA+off)>>EntryShift - r.IOVA>>EntryShift
		lo, hi := int(r.entries[w]), len(r.segs)
		if int(w)+1 < len(r.entries) {
			hi = int(r.entries[w+1]) + 1
		}
		return lo + sort.Search(hi-lo, func(i int) bool { s := r.segs[lo+i]; return s.off+s.view.Len() > off })
	}
	return sort.Search(len(r.segs), func(i int) bool { return r.segs[i].off+r.segs[i].view.Len() > off })
}

// appendViews appends views of the host memory behind [iova, iova+n) to
// dst and, with h, takes pin references on the chunks behind them (pinning
// any not pinned yet). The caller has checked the range with Check.
func (r *Region) appendViews(dst []guestmem.View, h *pvdma.Hold, iova, n uint64) ([]guestmem.View, error) {
	if n == 0 {
		return dst, nil
	}
	segs := r.one[:] // one piece: no need to wait for the segs header
	if r.multi {
		segs = r.segs
	}
	off := iova - r.IOVA
	for i := r.segmentAt(off); n > 0 && i < len(segs); i++ {
		s := &segs[i]
		in := off - s.off
		take := min(s.view.Len()-in, n)
		if h != nil && r.pinned {
			if err := s.pins.Acquire(h, s.gpa+in, take); err != nil {
				return dst, fmt.Errorf("key %#x: %w: %w", uint32(r.Key), ErrPin, err)
			}
		}
		v, _ := s.view.Sub(in, take) // in range by construction
		dst = append(dst, v)
		off += take
		n -= take
	}
	return dst, nil
}

// bind resolves the region's spans against mem (and the pin cache's areas
// for it) into host segments, merging spans that are contiguous in guest
// physical memory, and indexes them by 2 MiB window. It fails with
// ErrBadAddress when a span is not wholly inside guest RAM.
func (r *Region) bind(mem *guestmem.Table, pins *pvdma.Cache) error {
	r.segs = r.one[:0]
	var off uint64
	for _, sp := range r.Spans {
		gpa, left := sp.GPA, sp.Len
		for left > 0 {
			reg, ok := mem.Lookup(gpa)
			if !ok {
				return fmt.Errorf("guest physical %#x: %w", gpa, ErrBadAddress)
			}
			take := min(reg.GuestPhys+reg.Size-gpa, left)
			v, err := mem.Translate(gpa, take)
			if err != nil {
				return fmt.Errorf("guest physical [%#x, +%#x): %w", gpa, take, ErrBadAddress)
			}
			var area pvdma.Pins
			if pins != nil {
				a := pins.AreaOf(reg)
				if a == nil {
					return fmt.Errorf("guest physical %#x: region %v unknown to the pin cache: %w", gpa, reg, ErrBadAddress)
				}
				area = a.Pins()
			}
			if k := len(r.segs) - 1; k >= 0 && r.segs[k].gpa+r.segs[k].view.Len() == gpa && r.segs[k].pins.Area() == area.Area() {
				// Contiguous with the previous piece in the same region:
				// widen it so translation walks fewer segments.
				if wide, err := mem.Translate(r.segs[k].gpa, r.segs[k].view.Len()+take); err == nil {
					r.segs[k].view = wide
					off += take
					gpa += take
					left -= take
					continue
				}
			}
			r.segs = append(r.segs, segment{off: off, gpa: gpa, view: v, pins: area})
			off += take
			gpa += take
			left -= take
		}
	}
	r.multi, r.pinned = len(r.segs) > 1, pins != nil
	r.index()
	return nil
}

// index builds entries (see Region).
func (r *Region) index() {
	r.entries = nil
	if len(r.segs) <= 1 || r.Length == 0 {
		return
	}
	first := r.IOVA >> EntryShift
	windows := (r.IOVA+r.Length-1)>>EntryShift - first + 1
	if windows > 4*uint64(len(r.segs)) {
		return
	}
	r.entries = make([]uint32, windows)
	next := uint64(0) // first window without an entry yet
	for i, s := range r.segs {
		last := (r.IOVA+s.off+s.view.Len()-1)>>EntryShift - first
		for ; next <= last; next++ {
			r.entries[next] = uint32(i)
		}
	}
}

// pinAll takes the region's long-lived hold on every chunk behind it
// (pvdma.ModeAtRegMR).
func (r *Region) pinAll() error {
	for _, s := range r.segs {
		if s.pins.Area() == nil {
			continue
		}
		if err := s.pins.Acquire(&r.hold, s.gpa, s.view.Len()); err != nil {
			r.hold.Release()
			return fmt.Errorf("pin at registration: %w: %w", ErrPin, err)
		}
	}
	return nil
}
