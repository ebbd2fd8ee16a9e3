package pvdma

import (
	"fmt"
	"time"
)

// pin pins slot i of a and returns the generation of the reference it
// took: the slow path of Area.Acquire.
func (c *Cache) pin(a *Area, i uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &a.slots[i]
	var v uint64
	for {
		if a.gone.Load() || c.closed {
			return 0, fmt.Errorf("chunk %#x: %w", (a.first+i)<<ChunkShift, ErrRemoved)
		}
		v = s.w.Load()
		if v&busy != 0 {
			// Another device's eviction is unpinning it: the slot
			// empties within microseconds.
			c.mu.Unlock()
			time.Sleep(10 * time.Microsecond)
			c.mu.Lock()
			continue
		}
		if v&present == 0 {
			break
		}
		if g, ok := s.tryRef(); ok { // pinned by someone else meanwhile
			c.st.hits.Add(1)
			return g, nil
		}
	}
	gpa, n := a.chunkRange(i)
	ch := &Chunk{area: a, idx: i, gen: gen(v)}
	var err error
	if ch.pieces, ch.size, err = c.piecesLocked(a, gpa, n); err != nil {
		c.st.failures.Add(1)
		return 0, err
	}
	victims, err := c.pool.reserve(c, ch.size, true)
	c.pool.release(victims, true)
	if err != nil {
		c.st.failures.Add(1)
		return 0, fmt.Errorf("cache %q: pin chunk %#x: %w", c.name, gpa, err)
	}
	t0 := time.Now()
	if err := c.pinPieces(ch.pieces); err != nil {
		c.pool.unreserve(c, ch.size)
		c.st.failures.Add(1)
		return 0, fmt.Errorf("cache %q: pin chunk %#x: %w", c.name, gpa, err)
	}
	c.st.observePin(time.Since(t0))
	c.st.pins.Add(1)
	c.st.misses.Add(1)
	s.used.Store(c.pool.clock.Add(2) - 1)
	a.chunks[i].Store(ch)
	c.pool.mu.Lock()
	c.pool.addLocked(ch)
	c.pool.mu.Unlock()
	// Only the pin path (under c.mu) sets present, and only on an empty,
	// idle slot, so the generation is still ch.gen; references that
	// arrived meanwhile backed off or will.
	v = s.w.Add(present + 1)
	return gen(v), nil
}

// pinPieces pins every piece or none.
func (c *Cache) pinPieces(ps []piece) error {
	for k, pc := range ps {
		if err := c.pool.pinner.Pin(pc.gpa, pc.host); err != nil {
			for _, done := range ps[:k] {
				if uerr := c.pool.pinner.Unpin(done.gpa, done.host); uerr != nil {
					c.log(uerr)
				}
			}
			return fmt.Errorf("%w: %w", ErrPin, err)
		}
	}
	return nil
}

// piecesLocked cuts guest physical [gpa, gpa+n) of a into the host ranges
// to pin: everything but IO pages. It returns them and their byte count.
func (c *Cache) piecesLocked(a *Area, gpa, n uint64) ([]piece, uint64, error) {
	rest := []span{{gpa, n}}
	for _, io := range c.io {
		var next []span
		for _, s := range rest {
			next = append(next, subtract(s, io)...)
		}
		rest = next
	}
	var ps []piece
	var total uint64
	for _, s := range rest {
		host, err := a.mapping.PageRange(s.gpa-a.gpa, s.n)
		if err != nil {
			return nil, 0, fmt.Errorf("cache %q: chunk %#x: %w", c.name, gpa, ErrRemoved)
		}
		ps = append(ps, piece{gpa: s.gpa, host: host})
		total += uint64(len(host))
	}
	return ps, total, nil
}

// subtract returns the parts of s outside io.
func subtract(s, io span) []span {
	lo, hi := max(s.gpa, io.gpa), min(s.gpa+s.n, io.gpa+io.n)
	if lo >= hi {
		return []span{s}
	}
	var out []span
	if s.gpa < lo {
		out = append(out, span{s.gpa, lo - s.gpa})
	}
	if hi < s.gpa+s.n {
		out = append(out, span{hi, s.gpa + s.n - hi})
	}
	return out
}

// pinWholeLocked pins a ModeAll region (minus IO pages) in one go, as
// VFIO maps a region: it counts against the host budget only.
func (c *Cache) pinWholeLocked(a *Area) error {
	ps, n, err := c.piecesLocked(a, a.gpa, a.size)
	if err != nil {
		return err
	}
	victims, err := c.pool.reserve(c, n, false)
	c.pool.release(victims, true)
	if err != nil {
		c.st.failures.Add(1)
		return err
	}
	t0 := time.Now()
	if err := c.pinPieces(ps); err != nil {
		c.pool.unreserve(c, n)
		c.st.failures.Add(1)
		return err
	}
	c.st.observePin(time.Since(t0))
	c.st.pins.Add(1)
	a.pieces = ps
	return nil
}

// unpinWholeLocked unpins a ModeAll region.
func (c *Cache) unpinWholeLocked(a *Area) {
	if a.pieces == nil {
		return
	}
	var n uint64
	for _, pc := range a.pieces {
		if err := c.pool.pinner.Unpin(pc.gpa, pc.host); err != nil {
			c.log(err)
		}
		n += uint64(len(pc.host))
	}
	a.pieces = nil
	c.pool.unreserve(c, n)
	c.st.unpins.Add(1)
}

// removeAreaLocked retires an area whose region left the memory table.
func (c *Cache) removeAreaLocked(a *Area) {
	a.gone.Store(true)
	c.st.hits.Add(a.hits()) // its count outlives it
	if a.all {
		c.unpinWholeLocked(a)
		return
	}
	c.retireAllLocked(a, nil)
}

// retireAllLocked releases every chunk of a (overlapping s, if s is not
// nil), held or not, and waits until no slot is busy: chunks another
// device's eviction took first are being unpinned by it.
func (c *Cache) retireAllLocked(a *Area, s *span) {
	lo, hi := uint64(0), uint64(len(a.slots))
	if s != nil {
		lo = max(s.gpa, a.gpa)>>ChunkShift - a.first
		hi = (min(s.gpa+s.n, a.gpa+a.size)-1)>>ChunkShift - a.first + 1
	}
	var mine []*Chunk
	c.pool.mu.Lock()
	for i := lo; i < hi; i++ {
		if a.slots[i].retireForce() {
			ch := a.chunks[i].Load()
			c.pool.removeLocked(ch)
			mine = append(mine, ch)
		}
	}
	c.pool.mu.Unlock()
	c.pool.release(mine, false)
	for i := lo; i < hi; i++ {
		for a.slots[i].w.Load()&busy != 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

func roundUp(v, align uint64) uint64 { return (v + align - 1) &^ (align - 1) }
