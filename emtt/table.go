package emtt

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// lowKeys is the number of key slots inside the table; keysPerChunk the
// number per lazily allocated chunk, which hold the keys past them.
const (
	lowKeys      = 64
	keysPerChunk = 1024
)

type chunk [keysPerChunk]atomic.Pointer[Region]

// Table is a device's translation table.
type Table struct {
	// low holds the slots of the first lowKeys keys (most devices never
	// register more MRs), first in the table: such a key's slot is at a
	// fixed offset from the table, so reading it waits for no other load,
	// and looking one up reads nothing else of the table (max is read
	// only for a key past low; TestTableLayout). It is small on purpose:
	// a thousand devices' tables are then a few hundred KiB of dense
	// memory, where 8 KiB tables spread their hot lines over as many pages
	// (and TLB entries) as devices.
	low  [lowKeys]atomic.Pointer[Region]
	max  uint32
	dir  []atomic.Pointer[chunk] // chunk c: keys c*keysPerChunk.. (below lowKeys: in low)
	pins *pvdma.Cache            // nil: nothing is pinned

	misses atomic.Uint64 // translations refused

	mu   sync.Mutex // serialises writers
	tags []uint8    // next tag per slot (guarded by mu)
	free []uint32   // free slot indices, oldest first (guarded by mu)
	next uint32     // lowest never-used slot (guarded by mu)
	n    int        // live regions (guarded by mu)
	io   []Span     // IO ranges (guarded by mu)
}

// New creates a table for at most max regions (1..1<<24) whose memory is
// pinned through pins (nil: a table that pins nothing, for tests). The
// caller keeps pins on the same guest memory the table binds against
// (pins.SetMemory before Rebind).
func New(max uint32, pins *pvdma.Cache) *Table {
	if max == 0 || max > 1<<24 {
		panic(fmt.Sprintf("emtt: %d regions", max))
	}
	// Slot 0 is never used, so key 0 is never valid.
	t := &Table{
		max:  max,
		dir:  make([]atomic.Pointer[chunk], (uint64(max)+keysPerChunk)/keysPerChunk),
		pins: pins,
		next: 1,
	}
	return t
}

// Lookup returns the live region key names. Lock-free.
func (t *Table) Lookup(k Key) (*Region, error) {
	i := k.Index()
	var r *Region
	if i < lowKeys {
		r = t.low[i].Load() // no index above max has a region: no need to read max
	} else {
		if i > t.max {
			return nil, fmt.Errorf("key %#x: %w", uint32(k), ErrNoKey)
		}
		c := t.dir[i/keysPerChunk].Load()
		if c == nil {
			return nil, fmt.Errorf("key %#x: %w", uint32(k), ErrNoKey)
		}
		r = c[i%keysPerChunk].Load()
	}
	if r == nil || r.Key != k {
		return nil, fmt.Errorf("key %#x: %w", uint32(k), ErrNoKey)
	}
	return r, nil
}

// Translate checks a DMA of n bytes at iova through key k and appends the
// host views behind it to dst. With h it also takes pin references on the
// 2 MiB chunks behind the views, pinning those not pinned yet: the caller
// releases h once the DMA is over. On error h may hold references too.
func (t *Table) Translate(dst []guestmem.View, h *pvdma.Hold, k Key, pd uint32, need abi.Access, iova, n uint64) ([]guestmem.View, error) {
	r, err := t.Lookup(k)
	if err == nil {
		err = r.Check(pd, need, iova, n)
	}
	if err == nil {
		dst, err = r.appendViews(dst, h, iova, n)
	}
	if err != nil {
		t.misses.Add(1)
	}
	return dst, err
}

// Misses is the number of translations refused (bad key, PD, access or
// range, removed memory, or a pin that failed).
func (t *Table) Misses() uint64 { return t.misses.Load() }

// Pins is the table's pin cache (nil if it has none).
func (t *Table) Pins() *pvdma.Cache { return t.pins }

// Spec describes a region to insert.
type Spec struct {
	PD     uint32
	Access abi.Access
	IOVA   uint64
	Length uint64
	Spans  []Span
}

// Insert registers a guest-RAM region, resolving its spans against mem,
// and returns its key. It fails with ErrBadAddress when a span is outside
// guest RAM or overlaps IO memory, and with ErrFull when every slot is
// used.
func (t *Table) Insert(mem *guestmem.Table, s Spec) (*Region, error) {
	var total uint64
	for _, sp := range s.Spans {
		if sp.GPA+sp.Len < sp.GPA {
			return nil, fmt.Errorf("span %#x+%#x wraps: %w", sp.GPA, sp.Len, ErrBadAddress)
		}
		total += sp.Len
	}
	if total != s.Length || s.IOVA+s.Length < s.IOVA {
		return nil, fmt.Errorf("spans cover %#x bytes of a %#x-byte region: %w", total, s.Length, ErrRange)
	}
	r := &Region{PD: s.PD, Access: s.Access, IOVA: s.IOVA, Length: s.Length, Type: MemGuestRAM,
		Spans: append([]Span(nil), s.Spans...), valid: true}
	if err := r.bind(mem, t.pins); err != nil {
		return nil, err
	}
	if t.pins != nil && t.pins.Mode() == pvdma.ModeAtRegMR {
		if err := r.pinAll(); err != nil {
			return nil, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, sp := range r.Spans {
		if t.overlapsIOLocked(sp) {
			r.hold.Release()
			return nil, fmt.Errorf("span %#x+%#x overlaps IO memory: %w", sp.GPA, sp.Len, ErrBadAddress)
		}
	}
	idx, err := t.allocLocked()
	if err != nil {
		r.hold.Release()
		return nil, err
	}
	r.Key = Key(idx<<8 | uint32(t.tags[idx]))
	t.slotLocked(idx).Store(r)
	t.n++
	return r, nil
}

// Remove unregisters k. A DMA that already translated k finishes on the
// old views (the memory stays mapped); every later Lookup fails.
func (t *Table) Remove(k Key) (*Region, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, err := t.Lookup(k)
	if err != nil {
		return nil, err
	}
	i := k.Index()
	t.slotLocked(i).Store(nil)
	t.tags[i]++
	t.free = append(t.free, i)
	t.n--
	r.hold.Release()
	return r, nil
}

// Len is the number of live regions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// Each calls fn for every live region, in key order, under the writer
// lock.
func (t *Table) Each(fn func(*Region)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eachLocked(fn)
}

func (t *Table) eachLocked(fn func(*Region)) {
	for j := range t.low {
		if r := t.low[j].Load(); r != nil {
			fn(r)
		}
	}
	for ci := range t.dir {
		c := t.dir[ci].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if r := c[j].Load(); r != nil {
				fn(r)
			}
		}
	}
}

// Clear removes every region and IO range (a device reset). Tags advance,
// so keys handed out before stay dead.
func (t *Table) Clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eachLocked(func(r *Region) {
		i := r.Key.Index()
		t.slotLocked(i).Store(nil)
		t.tags[i]++
		t.free = append(t.free, i)
		r.hold.Release()
	})
	t.n = 0
	t.io = nil
	if t.pins != nil {
		t.pins.ClearIO()
	}
}

// Rebind moves every region onto a new guest memory table. A region whose
// guest memory is gone is replaced by an invalid copy (its key stays
// allocated: DMA through it fails with ErrInvalidated until DEREG_MR). The
// caller must keep the old mappings until Rebind returns and until the
// engine can no longer hold views from before it.
func (t *Table) Rebind(mem *guestmem.Table) (invalidated int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eachLocked(func(r *Region) {
		nr := *r
		nr.segs, nr.entries, nr.hold = nil, nil, pvdma.Hold{}
		if !r.valid || nr.bind(mem, t.pins) != nil {
			nr.segs, nr.one, nr.entries, nr.valid, nr.multi, nr.pinned = nil, [1]segment{}, nil, false, false, false
			invalidated++
		} else if t.pins != nil && t.pins.Mode() == pvdma.ModeAtRegMR {
			// Pinned again where it now lives; if the budget says no,
			// its DMA pins on demand instead.
			_ = nr.pinAll()
		}
		i := r.Key.Index()
		t.slotLocked(i).Store(&nr)
		r.hold.Release()
	})
	return invalidated
}

// ReserveIO marks a guest physical range as IO memory: no region may
// overlap it. It fails with ErrBadAddress when a live region already does.
func (t *Table) ReserveIO(sp Span) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var clash error
	t.eachLocked(func(r *Region) {
		for _, s := range r.Spans {
			if overlap(s, sp) && clash == nil {
				clash = fmt.Errorf("IO range %#x+%#x overlaps region %#x: %w", sp.GPA, sp.Len, uint32(r.Key), ErrBadAddress)
			}
		}
	})
	if clash != nil {
		return clash
	}
	t.io = append(t.io, sp)
	if t.pins != nil {
		t.pins.ExcludeIO(sp.GPA, sp.Len)
	}
	return nil
}

// MemTypeOf reports the type of the guest physical range: MemIO if it
// overlaps reserved IO memory, else MemGuestRAM.
func (t *Table) MemTypeOf(sp Span) MemType {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.overlapsIOLocked(sp) {
		return MemIO
	}
	return MemGuestRAM
}

func (t *Table) overlapsIOLocked(sp Span) bool {
	for _, io := range t.io {
		if overlap(io, sp) {
			return true
		}
	}
	return false
}

func overlap(a, b Span) bool { return a.GPA < b.GPA+b.Len && b.GPA < a.GPA+a.Len }

func (t *Table) allocLocked() (uint32, error) {
	// Never-used slots first, then the one freed longest ago: a stale key
	// (whose 8-bit tag comes back after 256 reuses of its slot) then
	// takes as long as possible to alias a new region.
	if t.next <= t.max {
		i := t.next
		t.next++
		for uint32(len(t.tags)) <= i {
			t.tags = append(t.tags, 0)
		}
		return i, nil
	}
	if len(t.free) == 0 {
		return 0, fmt.Errorf("%d regions: %w", t.max, ErrFull)
	}
	i := t.free[0]
	t.free = t.free[1:]
	return i, nil
}

// slotLocked is key index i's slot, its chunk allocated if need be.
// Writers only, with mu.
func (t *Table) slotLocked(i uint32) *atomic.Pointer[Region] {
	if i < lowKeys {
		return &t.low[i]
	}
	c := t.dir[i/keysPerChunk].Load()
	if c == nil {
		c = new(chunk)
		t.dir[i/keysPerChunk].Store(c)
	}
	return &c[i%keysPerChunk]
}
