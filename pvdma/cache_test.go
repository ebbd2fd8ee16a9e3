package pvdma_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
)

const (
	mib   = 1 << 20
	chunk = pvdma.ChunkSize
)

// TestMlockPinnerLocksPages: the default pinner really populates and
// locks the daemon's mapping, and unlocks it again.
func TestMlockPinnerLocksPages(t *testing.T) {
	needMlock(t, 2*chunk)
	r := memfdRegion(t, 0, 8*mib)
	host, err := r.Mapping.PageRange(2*mib, chunk)
	if err != nil {
		t.Fatal(err)
	}
	before := vmLocked(t)
	if err := (pvdma.MlockPinner{}).Pin(2*mib, host); err != nil {
		t.Fatal(err)
	}
	if got := vmLocked(t) - before; got != chunk {
		t.Fatalf("VmLck grew by %d, want %d", got, chunk)
	}
	if err := (pvdma.MlockPinner{}).Unpin(2*mib, host); err != nil {
		t.Fatal(err)
	}
	if got := vmLocked(t); got != before {
		t.Fatalf("VmLck %d after unpin, want %d", got, before)
	}
}

// TestOnDemandPinsOnlyWhatDMATouches: nothing is pinned at SetMemory;
// the first acquisition pins the one 2 MiB chunk (aligned on guest
// physical addresses, clipped to its region) and the next costs a hit.
func TestOnDemandPinsOnlyWhatDMATouches(t *testing.T) {
	needMlock(t, 4*chunk)
	rec := newRecorder(t, pvdma.MlockPinner{})
	pool := pvdma.NewPool(0, rec)
	c := pool.NewCache(pvdma.Options{Name: "d"})
	defer c.Close()
	// A region that starts 1 MiB into a chunk: its first chunk is half.
	r := memfdRegion(t, 1<<30+mib, 64*mib)
	if err := c.SetMemory(table(t, r)); err != nil {
		t.Fatal(err)
	}
	if n := rec.pinnedPages(); n != 0 {
		t.Fatalf("%d pages pinned at SetMemory", n)
	}
	a := c.AreaOf(r)
	var h pvdma.Hold
	if err := a.Acquire(&h, 1<<30+3*mib, 4096); err != nil {
		t.Fatal(err)
	}
	if !rec.pinned(1<<30+2*mib) || !rec.pinned(1<<30+4*mib-4096) || rec.pinned(1<<30+4*mib) || rec.pinned(1<<30+2*mib-4096) {
		t.Fatal("pinned pages are not exactly the chunk [1 GiB + 2 MiB, +2 MiB)")
	}
	if err := a.Acquire(&h, 1<<30+mib, 8); err != nil { // the clipped first chunk
		t.Fatal(err)
	}
	if !rec.pinned(1<<30+mib) || rec.pinned(1<<30) {
		t.Fatal("first chunk not clipped to the region")
	}
	if err := a.Acquire(&h, 1<<30+2*mib+100, 100); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Pins != 2 || s.Misses != 2 || s.Hits != 1 || s.PinnedBytes != chunk+mib || h.Len() != 3 {
		t.Fatalf("stats %+v, hold %d", s, h.Len())
	}
	if s.PinLatency.Count != 2 || s.PinLatency.Sum <= 0 {
		t.Fatalf("pin latency %+v", s.PinLatency)
	}
	h.Release()
	if !a.Pinned(1<<30+2*mib, chunk) {
		t.Fatal("released chunk left the cache without budget pressure")
	}
	if err := a.Acquire(&h, 1<<30+65*mib, 1); !errors.Is(err, pvdma.ErrRange) {
		t.Fatalf("acquire past the region: %v", err)
	}
}

// TestBudgetReleasesLeastRecentlyUsed: over the device budget, the
// chunk acquired longest ago and not held goes; held chunks never do,
// and with everything held the pin fails cleanly.
func TestBudgetReleasesLeastRecentlyUsed(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(0, rec)
	c := pool.NewCache(pvdma.Options{Name: "d", Budget: 3 * chunk})
	defer c.Close()
	r := memfdRegion(t, 0, 16*chunk)
	if err := c.SetMemory(table(t, r)); err != nil {
		t.Fatal(err)
	}
	a := c.AreaOf(r)
	touch := func(i uint64) {
		t.Helper()
		var h pvdma.Hold
		if err := a.Acquire(&h, i*chunk, 1); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	touch(0)
	touch(1)
	touch(2)
	touch(0) // 1 is now the least recently used
	touch(3)
	if !a.Pinned(0, 1) || a.Pinned(chunk, 1) || !a.Pinned(2*chunk, 1) || !a.Pinned(3*chunk, 1) {
		t.Fatal("LRU did not release chunk 1")
	}
	if s := c.Stats(); s.Evictions != 1 || s.PinnedBytes != 3*chunk || s.Unpins != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Hold all three: a fourth cannot be pinned, and nothing held goes.
	var h pvdma.Hold
	for _, i := range []uint64{0, 2, 3} {
		if err := a.Acquire(&h, i*chunk, 1); err != nil {
			t.Fatal(err)
		}
	}
	var h2 pvdma.Hold
	if err := a.Acquire(&h2, 5*chunk, 1); !errors.Is(err, pvdma.ErrBudget) {
		t.Fatalf("pin over a budget of held chunks: %v", err)
	}
	if !a.Pinned(0, 1) || !a.Pinned(2*chunk, 1) || !a.Pinned(3*chunk, 1) || a.Pinned(5*chunk, 1) {
		t.Fatal("a failed pin changed what is pinned")
	}
	h.Release()
	if err := a.Acquire(&h2, 5*chunk, 1); err != nil {
		t.Fatalf("after release: %v", err)
	}
	h2.Release()
	if s := c.Stats(); s.PinFailures != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestHostBudgetIsShared: the host budget spans devices; one device's
// new pin releases another's idle chunk.
func TestHostBudgetIsShared(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(2*chunk, rec)
	c1 := pool.NewCache(pvdma.Options{Name: "one"})
	c2 := pool.NewCache(pvdma.Options{Name: "two"})
	// Different guests, at different guest physical addresses only so
	// the recorder's ledger (by guest physical page) tells them apart.
	r1, r2 := memfdRegion(t, 0, 8*chunk), memfdRegion(t, 1<<40, 8*chunk)
	if err := c1.SetMemory(table(t, r1)); err != nil {
		t.Fatal(err)
	}
	if err := c2.SetMemory(table(t, r2)); err != nil {
		t.Fatal(err)
	}
	var h pvdma.Hold
	must := func(a *pvdma.Area, gpa uint64) {
		t.Helper()
		if err := a.Acquire(&h, gpa, 1); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	a1, a2 := c1.AreaOf(r1), c2.AreaOf(r2)
	must(a1, 0)
	must(a2, 1<<40)
	must(a2, 1<<40+chunk)
	if a1.Pinned(0, 1) || !a2.Pinned(1<<40, 1) || !a2.Pinned(1<<40+chunk, 1) {
		t.Fatal("host budget did not release the other device's idle chunk")
	}
	if s := pool.Stats(); s.PinnedBytes != 2*chunk || s.Evictions != 1 {
		t.Fatalf("pool stats %+v", s)
	}
	c1.Close()
	c2.Close()
	if s := pool.Stats(); s.PinnedBytes != 0 || s.Pins != 3 || s.Unpins != 3 {
		t.Fatalf("pool stats after close %+v", s)
	}
	if n := rec.pinnedPages(); n != 0 {
		t.Fatalf("%d pages still pinned", n)
	}
}

// TestRemovedMemoryIsUnpinnedFirst: a region leaving the table is
// unpinned and its area refuses acquisitions before SetMemory returns;
// regions that stay keep their chunks.
func TestRemovedMemoryIsUnpinnedFirst(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(0, rec)
	c := pool.NewCache(pvdma.Options{Name: "d"})
	defer c.Close()
	low, high := memfdRegion(t, 0, 4*chunk), memfdRegion(t, 1<<30, 4*chunk)
	if err := c.SetMemory(table(t, low, high)); err != nil {
		t.Fatal(err)
	}
	al, ah := c.AreaOf(low), c.AreaOf(high)
	var h pvdma.Hold
	for _, gpa := range []uint64{0, 1 << 30, 1<<30 + chunk} {
		if err := c.Acquire(&h, gpa, 1); err != nil {
			t.Fatal(err)
		}
	}
	// A DMA still holds its chunks while the memory goes.
	if err := c.SetMemory(table(t, low)); err != nil {
		t.Fatal(err)
	}
	if !ah.Gone() || ah.Pinned(1<<30, 1) || rec.pinned(1<<30) || rec.pinned(1<<30+chunk) {
		t.Fatal("removed region still pinned")
	}
	if err := ah.Acquire(&h, 1<<30, 1); !errors.Is(err, pvdma.ErrRemoved) {
		t.Fatalf("acquire on removed memory: %v", err)
	}
	if c.AreaOf(low) != al || !al.Pinned(0, 1) {
		t.Fatal("the region that stayed lost its area or its pins")
	}
	h.Release() // the late release of a removed chunk is harmless
	if s := c.Stats(); s.PinnedBytes != chunk {
		t.Fatalf("pinned %d, want one chunk", s.PinnedBytes)
	}
	// The same guest physical range on a new mapping is a new area.
	again := memfdRegion(t, 1<<30, 4*chunk)
	if err := c.SetMemory(table(t, low, again)); err != nil {
		t.Fatal(err)
	}
	if c.AreaOf(again) == nil || c.AreaOf(again) == ah || c.AreaOf(high) != nil {
		t.Fatal("a new mapping at the old address reused the old area")
	}
	if err := c.SetMemory(nil); err != nil {
		t.Fatal(err)
	}
	if !al.Gone() || rec.pinnedPages() != 0 {
		t.Fatal("SetMemory(nil) left pins")
	}
}

// TestPinAll: ModeAll pins every region whole at SetMemory (the VFIO
// baseline), acquisitions pin nothing more, and a host budget that
// cannot hold the memory refuses the change without changing anything.
func TestPinAll(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(10*chunk, rec)
	c := pool.NewCache(pvdma.Options{Name: "vfio", Mode: pvdma.ModeAll})
	defer c.Close()
	r := memfdRegion(t, 0, 8*chunk)
	if err := c.SetMemory(table(t, r)); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.PinnedBytes != 8*chunk || s.Pins != 1 || rec.pinnedPages() != int(8*chunk/guestmem.PageSize()) {
		t.Fatalf("stats %+v, %d pages", s, rec.pinnedPages())
	}
	var h pvdma.Hold
	if err := c.Acquire(&h, 3*chunk, 4*chunk); err != nil || h.Len() != 0 {
		t.Fatalf("acquire: %v, %d refs", err, h.Len())
	}
	big := memfdRegion(t, 1<<30, 4*chunk)
	if err := c.SetMemory(table(t, r, big)); !errors.Is(err, pvdma.ErrBudget) {
		t.Fatalf("pin-all over the host budget: %v", err)
	}
	if c.AreaOf(big) != nil || c.AreaOf(r) == nil || c.Stats().PinnedBytes != 8*chunk {
		t.Fatal("a refused change changed the cache")
	}
	// A swap pins the new memory before it unpins the old: the budget
	// must hold both for a moment.
	small := memfdRegion(t, 1<<31, 2*chunk)
	if err := c.SetMemory(table(t, small)); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.PinnedBytes != 2*chunk || rec.pinned(0) || !rec.pinned(1<<31) {
		t.Fatalf("after swap: %+v", s)
	}
}

// TestIOPagesAreNeverPinned: a chunk around IO memory (the guest-RAM
// doorbell area) is released when the range is reserved and re-pins
// without its pages; a region pinned whole has them unpinned.
func TestIOPagesAreNeverPinned(t *testing.T) {
	for _, mode := range []pvdma.Mode{pvdma.ModeOnDemand, pvdma.ModeAll} {
		t.Run(mode.String(), func(t *testing.T) {
			rec := newRecorder(t, pvdma.NopPinner{})
			pool := pvdma.NewPool(0, rec)
			c := pool.NewCache(pvdma.Options{Name: "d", Mode: mode})
			defer c.Close()
			r := memfdRegion(t, 0, 4*chunk)
			if err := c.SetMemory(table(t, r)); err != nil {
				t.Fatal(err)
			}
			a := c.AreaOf(r)
			var h pvdma.Hold
			if err := a.Acquire(&h, chunk, chunk); err != nil {
				t.Fatal(err)
			}
			h.Release()
			io := uint64(chunk + 64*4096)
			if !rec.pinned(io) {
				t.Fatal("setup: the page is not pinned")
			}
			c.ExcludeIO(io, 8192)
			if rec.pinned(io) || rec.pinned(io+4096) {
				t.Fatal("IO pages still pinned after ExcludeIO")
			}
			if err := a.Acquire(&h, chunk, chunk); err != nil {
				t.Fatal(err)
			}
			h.Release()
			if rec.pinned(io) || rec.pinned(io+4096) || !rec.pinned(io-4096) || !rec.pinned(io+8192) {
				t.Fatal("re-pin did not cut out exactly the IO pages")
			}
			if a.Pinned(io+4096, 1) || !a.Pinned(io-4096, 4096) || !a.Pinned(io+8192, 4096) {
				t.Fatal("Area.Pinned disagrees with what was pinned around the IO pages")
			}
			c.ClearIO()
			if err := a.Acquire(&h, chunk, chunk); err != nil {
				t.Fatal(err)
			}
			h.Release()
			if !rec.pinned(io) {
				t.Fatal("page not pinned after its IO reservation went")
			}
		})
	}
}

// TestPinFailureChangesNothing: a pinner error fails the acquisition,
// counts a failure, and leaves the slot empty for a later try.
func TestPinFailureChangesNothing(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(0, rec)
	c := pool.NewCache(pvdma.Options{Name: "d"})
	defer c.Close()
	r := memfdRegion(t, 0, 2*chunk)
	if err := c.SetMemory(table(t, r)); err != nil {
		t.Fatal(err)
	}
	rec.fail = errors.New("iommu says no")
	var h pvdma.Hold
	if err := c.Acquire(&h, 0, 1); !errors.Is(err, pvdma.ErrPin) {
		t.Fatalf("acquire with a failing pinner: %v", err)
	}
	if s := c.Stats(); s.PinFailures != 1 || s.PinnedBytes != 0 || h.Len() != 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := c.Acquire(&h, 0, 1); err != nil {
		t.Fatal(err)
	}
	h.Release()
}

// TestConcurrentDMAAndEviction: engines acquiring and releasing chunks
// of several devices under a tight host budget, while the control path
// drops and moves memory, never double-pin a page or unpin one that is
// not pinned (the recorder fails the test), never exceed the budget by
// more than the chunks being pinned at that moment, and leave nothing
// pinned once closed.
func TestConcurrentDMAAndEviction(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(6*chunk, rec)
	const devices = 3
	var caches []*pvdma.Cache
	var regions []guestmem.Region
	for i := range devices {
		c := pool.NewCache(pvdma.Options{Name: string(rune('a' + i)), Budget: 4 * chunk})
		r := memfdRegion(t, uint64(i)<<32, 16*chunk)
		if err := c.SetMemory(table(t, r)); err != nil {
			t.Fatal(err)
		}
		caches, regions = append(caches, c), append(regions, r)
	}
	stop := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range devices {
		wg.Add(1)
		go func() { // the device's engine
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			var h pvdma.Hold
			for time.Now().Before(stop) {
				gpa := regions[i].GuestPhys + rng.Uint64N(16*chunk-3*mib)
				err := caches[i].Acquire(&h, gpa, rng.Uint64N(3*mib)+1)
				if err != nil && !errors.Is(err, pvdma.ErrBudget) && !errors.Is(err, pvdma.ErrRemoved) && !errors.Is(err, pvdma.ErrRange) {
					t.Errorf("acquire: %v", err)
				}
				if s := pool.Stats(); s.PinnedBytes > 6*chunk+devices*chunk {
					t.Errorf("pinned %d bytes over a %d budget", s.PinnedBytes, 6*chunk)
				}
				h.Release()
			}
		}()
	}
	wg.Add(1)
	go func() { // the control path
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 1))
		for time.Now().Before(stop) {
			i := rng.IntN(devices)
			switch rng.IntN(3) {
			case 0:
				caches[i].Drop()
			case 1:
				caches[i].ExcludeIO(regions[i].GuestPhys+rng.Uint64N(16*chunk), 4096)
			case 2:
				caches[i].ClearIO()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	if s := pool.Stats(); s.Evictions == 0 || s.Hits == 0 || s.Pins < 10 {
		t.Fatalf("the run exercised too little: %+v", s)
	}
	for _, c := range caches {
		c.Close()
	}
	if s := pool.Stats(); s.PinnedBytes != 0 || s.Pins != s.Unpins {
		t.Fatalf("after close: %+v", s)
	}
	if n := rec.pinnedPages(); n != 0 {
		t.Fatalf("%d pages still pinned", n)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []pvdma.Mode{pvdma.ModeOnDemand, pvdma.ModeAtRegMR, pvdma.ModeAll} {
		if got, err := pvdma.ParseMode(m.String()); err != nil || got != m {
			t.Fatalf("%v: %v, %v", m, got, err)
		}
	}
	if _, err := pvdma.ParseMode("eager"); err == nil {
		t.Fatal("parsed a bad mode")
	}
}

// TestBatchEvictionIsLRU: a pin that needs many chunks' room (a region
// pinned whole) releases the oldest idle chunks of other devices, in LRU
// order.
func TestBatchEvictionIsLRU(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(12*chunk, rec)
	c1 := pool.NewCache(pvdma.Options{Name: "on-demand"})
	c2 := pool.NewCache(pvdma.Options{Name: "vfio", Mode: pvdma.ModeAll})
	defer c1.Close()
	defer c2.Close()
	r1 := memfdRegion(t, 0, 12*chunk)
	if err := c1.SetMemory(table(t, r1)); err != nil {
		t.Fatal(err)
	}
	a := c1.AreaOf(r1)
	var h pvdma.Hold
	for _, i := range []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 2, 3} {
		if err := a.Acquire(&h, i*chunk, 1); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	r2 := memfdRegion(t, 1<<40, 10*chunk)
	if err := c2.SetMemory(table(t, r2)); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(12) {
		if want := i == 2 || i == 3; a.Pinned(i*chunk, 1) != want {
			t.Errorf("chunk %d pinned %v, want %v", i, !want, want)
		}
	}
	if s := pool.Stats(); s.PinnedBytes != 12*chunk || s.Evictions != 10 {
		t.Fatalf("pool %+v", s)
	}
}
