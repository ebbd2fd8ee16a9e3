package pvdma

import "sync/atomic"

// ChunkShift and ChunkSize are the pinning granule: 2 MiB, aligned on
// guest physical addresses (a huge page, and the IOMMU's large page).
const (
	ChunkShift = 21
	ChunkSize  = 1 << ChunkShift
)

// A slot's state word, one per 2 MiB chunk, kept in a dense array per
// area so the data path's acquisitions touch few cache lines:
//
//	bits 0..31   references held
//	bit  32      present: the chunk is pinned and may be acquired
//	bit  33      busy: the chunk is being unpinned
//	bits 34..63  generation, advanced every time the chunk is released
//
// A reference records the generation it was taken in; releasing it in a
// later generation does nothing. So a chunk can be released whatever its
// references (its memory is going away) without the late releases
// corrupting the count of the chunk pinned in the slot next.
const (
	refMask  = 1<<32 - 1
	present  = 1 << 32
	busy     = 1 << 33
	genShift = 34
)

// slot is one chunk's state word, its last use (the pool's LRU clock at
// its last acquisition) and its hit count, side by side so that an
// acquisition writes one cache line and nothing else: 32 bytes, two slots
// to a line, none straddling two.
type slot struct {
	w    atomic.Uint64
	used atomic.Uint64
	hits atomic.Uint64 // acquisitions that found the chunk pinned
	_    uint64
}

func gen(v uint64) uint64 { return v >> genShift }

// tryRef takes a reference if the chunk is pinned and returns the
// generation it belongs to.
func (s *slot) tryRef() (uint64, bool) {
	v := s.w.Add(1)
	if v&(present|busy) != present {
		s.unref(gen(v))
		return 0, false
	}
	return gen(v), true
}

// unref drops a reference taken in generation g, unless the chunk has
// been released since.
func (s *slot) unref(g uint64) {
	for {
		v := s.w.Load()
		if gen(v) != g || v&refMask == 0 {
			return
		}
		if s.w.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// retireIdle moves an unreferenced chunk of generation g to busy, the
// first step of releasing it. Called with Pool.mu.
func (s *slot) retireIdle(g uint64) bool {
	return s.w.CompareAndSwap(g<<genShift|present, (g+1)<<genShift|busy)
}

// retireForce moves a pinned chunk to busy whatever its references (its
// memory is going away) and reports whether this call did it; the
// references still out are void. Called with Pool.mu.
func (s *slot) retireForce() bool {
	for {
		v := s.w.Load()
		if v&present == 0 {
			return false // empty, or another device's eviction has it
		}
		if s.w.CompareAndSwap(v, (gen(v)+1)<<genShift|busy) {
			return true
		}
	}
}

// done ends a release: the slot is empty again. References taken
// meanwhile (they back off) are kept.
func (s *slot) done() { s.w.Add(^uint64(busy - 1)) }

// Chunk is one pinned 2 MiB piece of guest memory (clipped to its memory
// region): what the slow paths need to release it. The data path never
// touches it.
type Chunk struct {
	area   *Area
	idx    uint64  // slot in area
	gen    uint64  // generation it was pinned in
	size   uint64  // bytes pinned (2 MiB except at edges and around IO)
	pieces []piece // what was pinned: the chunk minus IO pages
	pos    int     // index in the pool's LRU list (guarded by Pool.mu)
}

// piece is one range handed to the Pinner.
type piece struct {
	gpa  uint64
	host []byte
}

func (c *Chunk) slot() *slot { return &c.area.slots[c.idx] }

// idle reports whether the chunk is still the pinned one of its slot and
// unreferenced. Called with Pool.mu.
func (c *Chunk) idle() bool { return c.slot().w.Load() == c.gen<<genShift|present }
