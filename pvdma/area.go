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
	hits  atomic.Uint64  // acquisitions that found their chunks pinned
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
	clock := a.clock.Load()
	for i := gpa>>ChunkShift - a.first; i <= (end-1)>>ChunkShift-a.first; i++ {
		s := &a.slots[i]
		g, ok := s.tryRef()
		if ok {
			a.hits.Add(1)
		} else {
			var err error
			if g, err = a.cache.pin(a, i); err != nil {
				return err
			}
		}
		if s.used.Load() != clock {
			s.used.Store(clock)
		}
		h.refs = append(h.refs, ref{s, g})
	}
	return nil
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
