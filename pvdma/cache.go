package pvdma

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/guestmem"
)

// Cache is one device's map cache.
type Cache struct {
	pool  *Pool
	name  string
	mode  Mode
	limit uint64
	lg    *slog.Logger

	mu     sync.Mutex // pins, memory changes, IO ranges
	areas  atomic.Pointer[[]*Area]
	io     []span // IO ranges, page-rounded outward (guarded by mu)
	closed bool   // guarded by mu

	bytes uint64 // pinned by this device (guarded by Pool.mu)
	st    counters
}

type span struct{ gpa, n uint64 }

// NewCache creates a device's cache on the pool. It holds no memory until
// SetMemory.
func (p *Pool) NewCache(o Options) *Cache {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &Cache{pool: p, name: o.Name, mode: o.Mode, limit: o.Budget, lg: o.Log}
	c.areas.Store(&[]*Area{})
	p.mu.Lock()
	p.caches[c] = struct{}{}
	p.mu.Unlock()
	return c
}

// Mode is the cache's pin mode.
func (c *Cache) Mode() Mode { return c.mode }

// Budget is the bytes this cache may keep pinned on demand (0: only the
// host's budget applies).
func (c *Cache) Budget() uint64 { return c.limit }

// Stats is the device's counters.
func (c *Cache) Stats() Stats {
	s := c.counts()
	c.pool.mu.Lock()
	s.PinnedBytes = c.bytes
	c.pool.mu.Unlock()
	return s
}

// counts is the device's counters but for pinned bytes (which Pool.mu
// guards): the hits of live areas are counted there, for the data path's
// sake, and folded into st when an area goes.
func (c *Cache) counts() Stats {
	s := c.st.snapshot()
	for _, a := range *c.areas.Load() {
		s.Hits += a.hits()
	}
	return s
}

func (c *Cache) log(err error) { c.lg.Warn("pvdma", "cache", c.name, "err", err) }

// Held is the number of chunks someone holds now (a DMA in flight, an MR
// pinned at registration, a queue's ring). For leak checks and the
// operator's view; it scans every slot.
func (c *Cache) Held() int {
	n := 0
	for _, a := range *c.areas.Load() {
		for i := range a.slots {
			if v := a.slots[i].w.Load(); v&present != 0 && v&refMask > 0 {
				n++
			}
		}
	}
	return n
}

// AreaOf returns the area of the memory region r (matched by guest
// physical start, size and mapping), or nil.
func (c *Cache) AreaOf(r guestmem.Region) *Area {
	as := *c.areas.Load()
	i, ok := slices.BinarySearchFunc(as, r.GuestPhys, func(a *Area, gpa uint64) int {
		switch {
		case a.gpa < gpa:
			return -1
		case a.gpa > gpa:
			return 1
		}
		return 0
	})
	if !ok || as[i].size != r.Size || as[i].mapping != r.Mapping {
		return nil
	}
	return as[i]
}

// Acquire takes references on the chunks holding guest physical
// [gpa, gpa+n), which must lie in one region of the current memory table.
func (c *Cache) Acquire(h *Hold, gpa, n uint64) error {
	for _, a := range *c.areas.Load() {
		if a.gpa <= gpa && gpa-a.gpa < a.size {
			return a.Acquire(h, gpa, n)
		}
	}
	return fmt.Errorf("guest physical %#x: %w", gpa, ErrRange)
}

// SetMemory moves the cache onto a new guest memory table (nil: the
// memory is going away with the connection). Regions that stay keep their
// areas and pinned chunks; regions that went away are marked gone and
// unpinned before this returns, so before the caller unmaps them. In
// ModeAll new regions are pinned whole first; if that fails the change is
// refused and nothing changes.
func (c *Cache) SetMemory(mem *guestmem.Table) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("cache %q: %w", c.name, ErrClosed)
	}
	old := *c.areas.Load()
	var next, added []*Area
	for _, r := range mem.Regions() {
		if a := c.AreaOf(r); a != nil {
			next = append(next, a)
			continue
		}
		a := newArea(c, r, c.mode == ModeAll)
		next = append(next, a)
		added = append(added, a)
	}
	for i, a := range added {
		if !a.all {
			continue
		}
		if err := c.pinWholeLocked(a); err != nil {
			for _, b := range added[:i] {
				c.unpinWholeLocked(b)
			}
			return fmt.Errorf("cache %q: pin all guest memory: %w", c.name, err)
		}
	}
	c.areas.Store(&next)
	for _, a := range old {
		if !slices.Contains(next, a) {
			c.removeAreaLocked(a)
		}
	}
	return nil
}

// Drop unpins every chunk pinned on demand (a device reset: the MRs and
// queues that used them are gone). Regions pinned whole stay pinned.
func (c *Cache) Drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range *c.areas.Load() {
		c.retireAllLocked(a, nil)
	}
}

// Close unpins everything and detaches the cache from its pool.
func (c *Cache) Close() {
	c.SetMemory(nil)
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	p := c.pool
	p.mu.Lock()
	delete(p.caches, c)
	add(&p.closedStats, c.st.snapshot())
	p.mu.Unlock()
}

// ExcludeIO marks guest physical [gpa, gpa+n) as IO memory (the doorbell
// fallback's area): its pages are never pinned. Chunks already pinned
// around it are released and re-pin without it on their next use; a
// region pinned whole has the range unpinned.
func (c *Cache) ExcludeIO(gpa, n uint64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := guestmem.PageSize()
	s := span{gpa &^ (ps - 1), roundUp(gpa+n, ps) - gpa&^(ps-1)}
	c.io = append(c.io, s)
	c.ioChangedLocked(s)
}

// ClearIO forgets every IO range (a device reset).
func (c *Cache) ClearIO() {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.io
	c.io = nil
	for _, s := range old {
		c.ioChangedLocked(s)
	}
}

// ioChangedLocked re-pins what the IO range s touches under the current
// IO ranges.
func (c *Cache) ioChangedLocked(s span) {
	for _, a := range *c.areas.Load() {
		if s.gpa >= a.gpa+a.size || a.gpa >= s.gpa+s.n {
			continue
		}
		if a.all {
			c.unpinWholeLocked(a)
			if err := c.pinWholeLocked(a); err != nil {
				c.log(fmt.Errorf("re-pin region %#x after an IO change: %w", a.gpa, err))
			}
			continue
		}
		c.retireAllLocked(a, &s)
	}
}
