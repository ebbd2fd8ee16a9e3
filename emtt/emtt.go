package emtt

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// MemType says what kind of memory a range is.
type MemType uint8

const (
	// MemGuestRAM is ordinary guest memory: DMA may read and write it.
	MemGuestRAM MemType = 1
	// MemIO is device memory mapped into the guest (doorbells): never
	// pinned, never a DMA target.
	MemIO MemType = 2
	// MemGPU is reserved for GPU memory exposed to the guest.
	MemGPU MemType = 3
)

func (t MemType) String() string {
	switch t {
	case MemGuestRAM:
		return "guest-ram"
	case MemIO:
		return "io"
	case MemGPU:
		return "gpu"
	}
	return fmt.Sprintf("MemType(%d)", uint8(t))
}

// Errors a translation or update returns (wrapped with detail). The engine
// maps them to work-completion statuses, the control path to statuses.
var (
	ErrNoKey       = errors.New("emtt: no region with this key")
	ErrPD          = errors.New("emtt: region belongs to another protection domain")
	ErrAccess      = errors.New("emtt: access not granted by the region")
	ErrRange       = errors.New("emtt: range outside the region")
	ErrIOMemory    = errors.New("emtt: IO memory is not a DMA target")
	ErrInvalidated = errors.New("emtt: region's guest memory was removed")
	ErrFull        = errors.New("emtt: table full")
	ErrBadAddress  = errors.New("emtt: range outside guest RAM or in IO memory")
)

// Key is a memory key (lkey and rkey are the same key).
type Key uint32

// Index is the slot the key names.
func (k Key) Index() uint32 { return uint32(k) >> 8 }

// Tag is the key's reuse tag.
func (k Key) Tag() uint8 { return uint8(k) }

// Span is a guest-physically contiguous range.
type Span struct {
	GPA uint64
	Len uint64
}

// segment is a host-contiguous piece of a region: bytes [off, off+view.Len())
// of the region.
type segment struct {
	off  uint64
	gpa  uint64
	view guestmem.View
}

// Region is one registered memory region. It is immutable once published.
type Region struct {
	Key    Key
	PD     uint32
	Access abi.Access
	IOVA   uint64
	Length uint64
	Type   MemType
	// Spans are the guest physical ranges behind [IOVA, IOVA+Length), in
	// order; their lengths sum to Length.
	Spans []Span

	valid bool
	segs  []segment
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

// AppendViews appends views of the host memory behind [iova, iova+n) to
// dst. The caller has checked the range with Check.
func (r *Region) AppendViews(dst []guestmem.View, iova, n uint64) []guestmem.View {
	if n == 0 {
		return dst
	}
	off := iova - r.IOVA
	// First segment holding off: segments are sorted by off.
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].off+r.segs[i].view.Len() > off })
	for ; n > 0 && i < len(r.segs); i++ {
		s := r.segs[i]
		in := off - s.off
		take := min(s.view.Len()-in, n)
		v, _ := s.view.Sub(in, take) // in range by construction
		dst = append(dst, v)
		off += take
		n -= take
	}
	return dst
}

// bind resolves the region's spans against mem into host segments,
// merging spans that are contiguous in guest physical memory. It fails
// with ErrBadAddress when a span is not wholly inside guest RAM.
func (r *Region) bind(mem *guestmem.Table) error {
	r.segs = r.segs[:0]
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
			if k := len(r.segs) - 1; k >= 0 && r.segs[k].gpa+r.segs[k].view.Len() == gpa {
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
			r.segs = append(r.segs, segment{off: off, gpa: gpa, view: v})
			off += take
			gpa += take
			left -= take
		}
	}
	return nil
}

// keysPerChunk is the number of slots per lazily allocated chunk.
const keysPerChunk = 1024

type chunk [keysPerChunk]atomic.Pointer[Region]

// Table is a device's translation table.
type Table struct {
	max uint32
	dir []atomic.Pointer[chunk]

	mu   sync.Mutex // serialises writers
	tags []uint8    // next tag per slot (guarded by mu)
	free []uint32   // free slot indices, oldest first (guarded by mu)
	next uint32     // lowest never-used slot (guarded by mu)
	n    int        // live regions (guarded by mu)
	io   []Span     // IO ranges (guarded by mu)
}

// New creates a table for at most max regions (1..1<<24).
func New(max uint32) *Table {
	if max == 0 || max > 1<<24 {
		panic(fmt.Sprintf("emtt: %d regions", max))
	}
	// Slot 0 is never used, so key 0 is never valid.
	return &Table{
		max:  max,
		dir:  make([]atomic.Pointer[chunk], (uint64(max)+keysPerChunk)/keysPerChunk),
		next: 1,
	}
}

// Lookup returns the live region key names. Lock-free.
func (t *Table) Lookup(k Key) (*Region, error) {
	i := k.Index()
	if i == 0 || i > t.max {
		return nil, fmt.Errorf("key %#x: %w", uint32(k), ErrNoKey)
	}
	c := t.dir[i/keysPerChunk].Load()
	if c == nil {
		return nil, fmt.Errorf("key %#x: %w", uint32(k), ErrNoKey)
	}
	r := c[i%keysPerChunk].Load()
	if r == nil || r.Key != k {
		return nil, fmt.Errorf("key %#x: %w", uint32(k), ErrNoKey)
	}
	return r, nil
}

// Translate checks a DMA of n bytes at iova through key k and appends the
// host views behind it to dst.
func (t *Table) Translate(dst []guestmem.View, k Key, pd uint32, need abi.Access, iova, n uint64) ([]guestmem.View, error) {
	r, err := t.Lookup(k)
	if err != nil {
		return dst, err
	}
	if err := r.Check(pd, need, iova, n); err != nil {
		return dst, err
	}
	return r.AppendViews(dst, iova, n), nil
}

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
	if err := r.bind(mem); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, sp := range r.Spans {
		if t.overlapsIOLocked(sp) {
			return nil, fmt.Errorf("span %#x+%#x overlaps IO memory: %w", sp.GPA, sp.Len, ErrBadAddress)
		}
	}
	idx, err := t.allocLocked()
	if err != nil {
		return nil, err
	}
	r.Key = Key(idx<<8 | uint32(t.tags[idx]))
	t.storeLocked(idx, r)
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
	t.dir[i/keysPerChunk].Load()[i%keysPerChunk].Store(nil)
	t.tags[i]++
	t.free = append(t.free, i)
	t.n--
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
		t.dir[i/keysPerChunk].Load()[i%keysPerChunk].Store(nil)
		t.tags[i]++
		t.free = append(t.free, i)
	})
	t.n = 0
	t.io = nil
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
		nr.segs = nil
		if !r.valid || nr.bind(mem) != nil {
			nr.segs, nr.valid = nil, false
			invalidated++
		}
		i := r.Key.Index()
		t.dir[i/keysPerChunk].Load()[i%keysPerChunk].Store(&nr)
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

func (t *Table) storeLocked(i uint32, r *Region) {
	c := t.dir[i/keysPerChunk].Load()
	if c == nil {
		c = new(chunk)
		t.dir[i/keysPerChunk].Store(c)
	}
	c[i%keysPerChunk].Store(r)
}
