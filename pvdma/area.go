package pvdma

import (
	"fmt"
	"sync/atomic"

	"github.com/vstellar/vstellar/guestmem"
)

// Area is the map cache over one guest memory region: a state word per
// 2 MiB chunk (slots, dense) and the chunk pinned in each (chunks, for
// the slow paths). Areas are
// created and retired by Cache.SetMemory; an Area stays the same object
// for as long as its region is in the memory table, so translations bound
// to it (emtt's regions) keep their chunks across unrelated memory
// changes.
type Area struct {
	// The data path's fields first, on one cache line.
	gone  atomic.Bool
	all   bool
	first uint64 // gpa >> ChunkShift
	gpa   uint64
	size  uint64
	slots []slot
	clock *atomic.Uint64 // the pool's LRU clock
	cache *Cache

	mapping *guestmem.Mapping
	chunks  []atomic.Pointer[Chunk]

	// ModeAll (all): the region was pinned whole at SetMemory; pieces is
	// what was pinned (guarded by Cache.mu).
	pieces []piece
}

func newArea(c *Cache, r guestmem.Region, all bool) *Area {
	a := &Area{cache: c, clock: &c.pool.clock, gpa: r.GuestPhys, size: r.Size, mapping: r.Mapping, first: r.GuestPhys >> ChunkShift, all: all}
	if !all {
		n := (r.GuestPhys+r.Size-1)>>ChunkShift - a.first + 1
		a.slots = make([]slot, n)
		a.chunks = make([]atomic.Pointer[Chunk], n)
	}
	return a
}

// hits is the acquisitions that found a chunk of the area pinned: the
// sum of its slots' counts.
func (a *Area) hits() uint64 {
	var n uint64
	for i := range a.slots {
		n += a.slots[i].hits.Load()
	}
	return n
}

// GPA and Size are the guest physical range of the area's region.
func (a *Area) GPA() uint64  { return a.gpa }
func (a *Area) Size() uint64 { return a.size }

// Gone reports whether the area's memory left the memory table.
func (a *Area) Gone() bool { return a.gone.Load() }

// chunkRange is the guest physical range of slot i, clipped to the area.
func (a *Area) chunkRange(i uint64) (gpa, n uint64) {
	lo := max((a.first+i)<<ChunkShift, a.gpa)
	hi := min((a.first+i+1)<<ChunkShift, a.gpa+a.size)
	return lo, hi - lo
}

// Acquire takes a reference on every chunk holding guest physical
// [gpa, gpa+n), pinning the ones that are not pinned yet, and records them
// in h. A chunk already pinned costs one atomic add on its slot. On error
// h keeps what it acquired; the caller releases it as always.
func (a *Area) Acquire(h *Hold, gpa, n uint64) error {
	if a.gone.Load() {
		return fmt.Errorf("guest physical %#x: %w", gpa, ErrRemoved)
	}
	end := gpa + n
	if gpa < a.gpa || end < gpa || end > a.gpa+a.size {
		return fmt.Errorf("guest physical [%#x, +%#x) outside region [%#x, +%#x): %w", gpa, n, a.gpa, a.size, ErrRange)
	}
	if a.all || n == 0 {
		return nil
	}
	return a.take(h, a.slots, a.clock, gpa>>ChunkShift-a.first, (end-1)>>ChunkShift-a.first)
}

// take references slots lo..hi of a (passed in, with the pool's clock, by
// callers that hold them already), pinning the chunks not pinned yet.
func (a *Area) take(h *Hold, slots []slot, clock *atomic.Uint64, lo, hi uint64) error {
	now := clock.Load()
	for i := lo; i <= hi; i++ {
		s := &slots[i]
		g, ok := s.tryRef()
		if ok {
			s.hits.Add(1)
		} else {
			var err error
			if g, err = a.cache.pin(a, i); err != nil {
				return err
			}
		}
		if s.used.Load() != now {
			s.used.Store(now)
		}
		h.refs = append(h.refs, ref{s, g})
	}
	return nil
}

// Pins is an area's data path, copied by value into every translation
// that points into the area (emtt's segments): taking a reference through
// it reads the chunk's slot and the pool's clock, never the Area itself.
// That is one dependent cache miss less per DMA, which is what a
// translation costs once many devices' tables no longer fit the CPU's
// caches. It stays valid for the area's life (its slots never move); a
// removed area's chunks are all retired, so a reference through a stale
// Pins fails over to Area.Acquire, which reports the removal.
type Pins struct {
	// What a reference reads first, in 56 bytes: with the segment's guest
	// address before it, one cache line of emtt's Region.
	slots    []slot // nil: the region is pinned whole, or no area
	first    uint64 // area.first
	gpa, end uint64 // the area's guest physical range
	clock    *atomic.Uint64
	area     *Area // read only off the fast path
}

// Pins returns a's data path.
func (a *Area) Pins() Pins {
	return Pins{area: a, slots: a.slots, first: a.first, gpa: a.gpa, end: a.gpa + a.size, clock: a.clock}
}

// Area is the area p belongs to (nil for the zero Pins).
func (p *Pins) Area() *Area { return p.area }

// Acquire is Area.Acquire, on the area's data path: a range outside the
// area and a region pinned whole take Area.Acquire's checks.
func (p *Pins) Acquire(h *Hold, gpa, n uint64) error {
	end := gpa + n
	if p.slots == nil || n == 0 || gpa < p.gpa || end < gpa || end > p.end {
		if p.area == nil {
			return fmt.Errorf("guest physical %#x: no area: %w", gpa, ErrRange)
		}
		return p.area.Acquire(h, gpa, n)
	}
	return p.area.take(h, p.slots, p.clock, gpa>>ChunkShift-p.first, (end-1)>>ChunkShift-p.first)
}

// Pinned reports whether every byte of [gpa, gpa+n) is pinned: in a
// pinned chunk (or a region pinned whole) and not IO memory, whose pages
// are cut out of every pin. For tests and the operator's view; it takes
// the cache's lock.
func (a *Area) Pinned(gpa, n uint64) bool {
	c := a.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.gone.Load() {
		return false
	}
	for _, io := range c.io {
		if gpa < io.gpa+io.n && io.gpa < gpa+n {
			return false
		}
	}
	if a.all {
		return a.pieces != nil
	}
	for i := gpa>>ChunkShift - a.first; i <= (gpa+n-1)>>ChunkShift-a.first; i++ {
		if a.slots[i].w.Load()&present == 0 {
			return false
		}
	}
	return true
}

// Hold is the set of chunk references one user keeps: a DMA while it runs,
// a ring or an MR pinned at registration for its lifetime. The zero Hold
// is empty; a Hold is reused across DMAs without allocating once it has
// grown.
type Hold struct {
	refs []ref
}

type ref struct {
	s *slot
	g uint64
}

// Release drops every reference.
func (h *Hold) Release() {
	for i, r := range h.refs {
		r.s.unref(r.g)
		h.refs[i] = ref{}
	}
	h.refs = h.refs[:0]
}

// Len is the number of references held.
func (h *Hold) Len() int { return len(h.refs) }
