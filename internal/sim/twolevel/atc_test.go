package twolevel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// refLRU is the obvious LRU: a slice, most recent first.
type refLRU struct {
	cap  int
	keys []uint64
	ptes map[uint64]uint64
}

func (r *refLRU) lookup(k uint64) (uint64, bool) {
	i := slices.Index(r.keys, k)
	if i < 0 {
		return 0, false
	}
	r.keys = slices.Insert(slices.Delete(r.keys, i, i+1), 0, k)
	return r.ptes[k], true
}

func (r *refLRU) insert(k, pte uint64) (evicted uint64, did bool) {
	if len(r.keys) == r.cap {
		evicted, did = r.keys[len(r.keys)-1], true
		r.keys = r.keys[:len(r.keys)-1]
		delete(r.ptes, evicted)
	}
	r.keys = slices.Insert(r.keys, 0, k)
	r.ptes[k] = pte
	return evicted, did
}

// The ATC agrees with a reference LRU on every lookup of a long random
// sequence over a key space a few times its size, so that the hash's
// probe runs and its back-shifting deletions are exercised on every
// eviction.
func TestATCMatchesReferenceLRU(t *testing.T) {
	for _, entries := range []int{1, 3, 8, 64} {
		a := NewATC(entries)
		ref := &refLRU{cap: entries, ptes: map[uint64]uint64{}}
		rng := rand.New(rand.NewPCG(1, uint64(entries)))
		var hits, evictions uint64
		for i := range 200000 {
			dev := uint32(rng.IntN(4))
			gfn := uint64(rng.IntN(3 * entries))
			k := atcKey(dev, gfn)
			want, wok := ref.lookup(k)
			got, ok := a.lookup(dev, gfn)
			if ok != wok || got != want {
				t.Fatalf("%d entries, op %d: lookup(%d, %#x) = %#x, %v; want %#x, %v", entries, i, dev, gfn, got, ok, want, wok)
			}
			if ok {
				hits++
				continue
			}
			pte := rng.Uint64() | ptePresent
			if _, did := ref.insert(k, pte); did {
				evictions++
			}
			a.insert(dev, gfn, pte)
		}
		st := a.Stats()
		if st.Hits != hits || st.Misses != 200000-hits || st.Evictions != evictions || st.Used != entries {
			t.Errorf("%d entries: stats %+v, want %d hits, %d misses, %d evictions", entries, st, hits, 200000-hits, evictions)
		}
		if hits == 0 || evictions == 0 {
			t.Errorf("%d entries: %d hits, %d evictions: the sequence did not exercise both", entries, hits, evictions)
		}
	}
}

// A working set that fits is served from the ATC after its first pass; one
// entry more, visited in a cycle, misses every time (LRU always evicts the
// page needed next).
func TestATCWorkingSet(t *testing.T) {
	const entries = 16
	for _, c := range []struct {
		pages    int
		wantHits bool
	}{{entries, true}, {entries / 2, true}, {entries + 1, false}, {4 * entries, false}} {
		a := NewATC(entries)
		for range 2 { // first pass fills
			for p := range c.pages {
				if _, ok := a.lookup(7, uint64(p)); !ok {
					a.insert(7, uint64(p), uint64(p)<<PageShift|ptePresent)
				}
			}
		}
		before := a.Stats()
		for range 10 {
			for p := range c.pages {
				pte, ok := a.lookup(7, uint64(p))
				if !ok {
					a.insert(7, uint64(p), uint64(p)<<PageShift|ptePresent)
				} else if pte != uint64(p)<<PageShift|ptePresent {
					t.Fatalf("page %d: pte %#x", p, pte)
				}
			}
		}
		st := a.Stats()
		hits, misses := st.Hits-before.Hits, st.Misses-before.Misses
		if c.wantHits && (hits != uint64(10*c.pages) || misses != 0) {
			t.Errorf("%d pages in %d entries: %d hits, %d misses; want all hits", c.pages, entries, hits, misses)
		}
		if !c.wantHits && (hits != 0 || misses != uint64(10*c.pages)) {
			t.Errorf("%d pages in %d entries: %d hits, %d misses; want all misses", c.pages, entries, hits, misses)
		}
	}
}

// The least recently used entry is the one evicted, and a lookup hit
// renews an entry.
func TestATCEvictsLeastRecentlyUsed(t *testing.T) {
	a := NewATC(3)
	for p := range uint64(3) {
		a.insert(1, p, p<<PageShift|ptePresent)
	}
	if _, ok := a.lookup(1, 0); !ok { // 0 is now the most recent; 1 the least
		t.Fatal("page 0 not cached")
	}
	a.insert(1, 3, 3<<PageShift|ptePresent)
	for p, want := range []bool{true, false, true, true} {
		if _, ok := a.lookup(1, uint64(p)); ok != want {
			t.Errorf("page %d cached = %v, want %v", p, ok, want)
		}
	}
}

// Entries are per device: the same guest page of two devices is two
// entries with their own host pages.
func TestATCKeysByDevice(t *testing.T) {
	a := NewATC(4)
	a.insert(1, 0x42, 0x1000|ptePresent)
	if _, ok := a.lookup(2, 0x42); ok {
		t.Fatal("device 2 hit device 1's entry")
	}
	a.insert(2, 0x42, 0x2000|ptePresent)
	for dev, want := range map[uint32]uint64{1: 0x1000 | ptePresent, 2: 0x2000 | ptePresent} {
		if pte, ok := a.lookup(dev, 0x42); !ok || pte != want {
			t.Errorf("device %d: %#x, %v; want %#x", dev, pte, ok, want)
		}
	}
	a.Invalidate()
	if _, ok := a.lookup(1, 0x42); ok {
		t.Error("hit after Invalidate")
	}
	if st := a.Stats(); st.Used != 0 || st.Entries != 4 {
		t.Errorf("after Invalidate: %+v", st)
	}
	if st := NewATC(0).Stats(); st.Entries != DefaultATCEntries {
		t.Errorf("default ATC has %d entries", st.Entries)
	}
}
