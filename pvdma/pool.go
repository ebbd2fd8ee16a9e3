package pvdma

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Errors an acquisition or a memory change returns, wrapped with detail.
var (
	ErrBudget  = errors.New("pvdma: pinned-memory budget exhausted by chunks in use")
	ErrRemoved = errors.New("pvdma: guest memory was removed")
	ErrRange   = errors.New("pvdma: range outside the memory region")
	ErrPin     = errors.New("pvdma: pinner failed")
	ErrClosed  = errors.New("pvdma: cache closed")
)

// Pool is one host's pinned memory: the budget all its devices share, the
// LRU order of the chunks they pinned on demand, and the Pinner.
type Pool struct {
	limit  uint64 // bytes; 0 = unlimited
	pinner Pinner

	// clock orders acquisitions for the LRU. It ticks twice per pin, so a
	// chunk acquired after the last pin is younger than that pin's chunk;
	// chunks acquired between the same two pins tie.
	clock atomic.Uint64

	mu          sync.Mutex
	bytes       uint64              // pinned on the host (guarded by mu)
	lru         []*Chunk            // every chunk pinned on demand (guarded by mu)
	caches      map[*Cache]struct{} // live caches (guarded by mu)
	closedStats Stats               // counters of closed caches
}

// NewPool creates a host's pool with a budget of limit bytes (0: no
// limit) and the pinner every device uses (nil: MlockPinner).
func NewPool(limit uint64, pinner Pinner) *Pool {
	if pinner == nil {
		pinner = MlockPinner{}
	}
	return &Pool{limit: limit, pinner: pinner, caches: make(map[*Cache]struct{})}
}

// Limit is the host budget in bytes (0: none).
func (p *Pool) Limit() uint64 { return p.limit }

// Stats sums the counters of every cache the pool has served.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.closedStats
	for c := range p.caches {
		add(&s, c.counts())
	}
	s.PinnedBytes = p.bytes
	return s
}

func add(s *Stats, o Stats) {
	s.Pins += o.Pins
	s.Unpins += o.Unpins
	s.PinFailures += o.PinFailures
	s.Evictions += o.Evictions
	s.Hits += o.Hits
	s.Misses += o.Misses
	s.PinLatency.Add(o.PinLatency)
}

// reserve makes room for n more pinned bytes of cache c, retiring the
// least recently used unreferenced chunks while the host budget (or, with
// deviceBudget, c's own) would be exceeded. It returns the retired chunks,
// which the caller must pass to release, also when reserve fails.
func (p *Pool) reserve(c *Cache, n uint64, deviceBudget bool) ([]*Chunk, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var victims []*Chunk
	if deviceBudget && c.limit > 0 && c.bytes+n > c.limit {
		// The device over its own budget frees its own chunks.
		victims = p.evictLocked(c, c.bytes+n-c.limit, victims)
		if c.bytes+n > c.limit {
			return victims, fmt.Errorf("%d bytes more on device %q (%d of %d pinned): %w", n, c.name, c.bytes, c.limit, ErrBudget)
		}
	}
	if p.limit > 0 && p.bytes+n > p.limit {
		victims = p.evictLocked(nil, p.bytes+n-p.limit, victims)
		if p.bytes+n > p.limit {
			return victims, fmt.Errorf("%d bytes more on the host (%d of %d pinned): %w", n, p.bytes, p.limit, ErrBudget)
		}
	}
	p.bytes += n
	c.bytes += n
	return victims, nil
}

// unreserve returns bytes reserve took when the pin then failed.
func (p *Pool) unreserve(c *Cache, n uint64) {
	p.mu.Lock()
	p.bytes -= n
	c.bytes -= n
	p.mu.Unlock()
}

// evictLocked retires the least recently used unreferenced chunks (of
// cache from, or of any cache) until need bytes are freed or none is
// left, appending them to victims. One scan of the pinned chunks, then a
// selection: a pin usually needs one victim, a large MR pinned at
// registration many.
func (p *Pool) evictLocked(from *Cache, need uint64, victims []*Chunk) []*Chunk {
	type candidate struct {
		ch   *Chunk
		used uint64
	}
	var cands []candidate
	for _, ch := range p.lru {
		if (from == nil || ch.area.cache == from) && ch.idle() {
			cands = append(cands, candidate{ch, ch.slot().used.Load()})
		}
	}
	sorted := need/ChunkSize+1 > 8
	if sorted {
		slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.used, b.used) })
	}
	var freed uint64
	for i := 0; freed < need && i < len(cands); i++ {
		if !sorted { // bring the oldest remaining candidate to i
			for j := i + 1; j < len(cands); j++ {
				if cands[j].used < cands[i].used {
					cands[i], cands[j] = cands[j], cands[i]
				}
			}
		}
		ch := cands[i].ch
		if !ch.slot().retireIdle(ch.gen) {
			continue // acquired since the scan
		}
		p.removeLocked(ch)
		freed += ch.size
		victims = append(victims, ch)
	}
	return victims
}

// addLocked puts a freshly pinned chunk on the LRU list.
func (p *Pool) addLocked(ch *Chunk) {
	ch.pos = len(p.lru)
	p.lru = append(p.lru, ch)
}

// removeLocked takes a retired chunk off the LRU list and the books.
func (p *Pool) removeLocked(ch *Chunk) {
	last := len(p.lru) - 1
	p.lru[ch.pos] = p.lru[last]
	p.lru[ch.pos].pos = ch.pos
	p.lru[last] = nil
	p.lru = p.lru[:last]
	ch.pos = -1
	p.bytes -= ch.size
	ch.area.cache.bytes -= ch.size
}

// release unpins retired (busy) chunks and then empties their slots: a
// re-pin of the same slot waits while it is busy, so it never races the
// unpin.
func (p *Pool) release(victims []*Chunk, evicted bool) {
	for _, v := range victims {
		c := v.area.cache
		for _, pc := range v.pieces {
			if err := p.pinner.Unpin(pc.gpa, pc.host); err != nil {
				c.log(err)
			}
		}
		c.st.unpins.Add(1)
		if evicted {
			c.st.evictions.Add(1)
		}
		v.area.chunks[v.idx].CompareAndSwap(v, nil)
		v.slot().done()
	}
}
