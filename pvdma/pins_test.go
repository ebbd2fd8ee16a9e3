package pvdma_test

import (
	"errors"
	"testing"

	"github.com/vstellar/vstellar/pvdma"
)

// TestPinsIsAreaAcquire: an area's data path (the Pins a translation
// keeps) takes the same references, counts the same hits and misses, and
// refuses the same things as Area.Acquire: a range outside the area,
// removed memory (whose chunks it had referenced before), and anything
// through the zero Pins. A region pinned whole needs no references.
func TestPinsIsAreaAcquire(t *testing.T) {
	rec := newRecorder(t, pvdma.NopPinner{})
	pool := pvdma.NewPool(0, rec)
	c := pool.NewCache(pvdma.Options{Name: "d"})
	defer c.Close()
	r := memfdRegion(t, 1<<30+mib, 8*chunk)
	if err := c.SetMemory(table(t, r)); err != nil {
		t.Fatal(err)
	}
	a := c.AreaOf(r)
	p := a.Pins()
	if p.Area() != a {
		t.Fatal("Pins lost its area")
	}
	var h pvdma.Hold
	// Across a chunk boundary: two chunks pinned, two references.
	if err := p.Acquire(&h, 1<<30+2*mib-64, 128); err != nil || h.Len() != 2 {
		t.Fatalf("acquire: %v, %d refs", err, h.Len())
	}
	if !rec.pinned(1<<30+mib) || !rec.pinned(1<<30+2*mib) || rec.pinned(1<<30+4*mib) {
		t.Fatal("pinned the wrong chunks")
	}
	if err := p.Acquire(&h, 1<<30+3*mib, 4096); err != nil { // pinned: a hit
		t.Fatal(err)
	}
	if s := c.Stats(); s.Pins != 2 || s.Misses != 2 || s.Hits != 1 || h.Len() != 3 || c.Held() != 2 {
		t.Fatalf("stats %+v, hold %d, held %d", s, h.Len(), c.Held())
	}
	for _, bad := range [][2]uint64{{1 << 30, 4096}, {1<<30 + mib + 8*chunk - 64, 128}, {^uint64(0) - 10, 20}} {
		if err := p.Acquire(&h, bad[0], bad[1]); !errors.Is(err, pvdma.ErrRange) {
			t.Errorf("acquire [%#x, +%#x): %v, want ErrRange", bad[0], bad[1], err)
		}
	}
	if h.Len() != 3 {
		t.Fatalf("refused acquisitions took references: %d", h.Len())
	}
	h.Release()
	if c.Held() != 0 {
		t.Fatalf("%d chunks held after release", c.Held())
	}

	// The memory goes while a translation still has its Pins: pinned
	// chunks and new ones alike are refused, and nothing is pinned again.
	if err := p.Acquire(&h, 1<<30+3*mib, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.SetMemory(nil); err != nil {
		t.Fatal(err)
	}
	for _, gpa := range []uint64{1<<30 + 3*mib, 1<<30 + 9*mib} {
		if err := p.Acquire(&h, gpa, 1); !errors.Is(err, pvdma.ErrRemoved) {
			t.Errorf("acquire at %#x on removed memory: %v", gpa, err)
		}
	}
	h.Release()
	if rec.pinnedPages() != 0 {
		t.Fatalf("%d pages pinned after the memory went", rec.pinnedPages())
	}

	var zero pvdma.Pins
	if err := zero.Acquire(&h, 0, 1); !errors.Is(err, pvdma.ErrRange) || zero.Area() != nil {
		t.Fatalf("zero Pins: %v", err)
	}

	all := pool.NewCache(pvdma.Options{Name: "vfio", Mode: pvdma.ModeAll})
	defer all.Close()
	if err := all.SetMemory(table(t, r)); err != nil {
		t.Fatal(err)
	}
	pa := all.AreaOf(r).Pins()
	if err := pa.Acquire(&h, 1<<30+2*mib, chunk); err != nil || h.Len() != 0 {
		t.Fatalf("pinned whole: %v, %d refs", err, h.Len())
	}
	if err := pa.Acquire(&h, 1<<30, 1); !errors.Is(err, pvdma.ErrRange) {
		t.Fatalf("pinned whole, outside: %v", err)
	}
}
