package emtt_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

const chunk = pvdma.ChunkSize

// ram is one anonymous region of size bytes at guest physical 0, every
// byte set to a function of its address so views can be checked.
func ram(t *testing.T, size uint64) (*guestmem.Table, []byte) {
	t.Helper()
	m, err := guestmem.MapAnonymous(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	b := m.View().Bytes()
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	mem, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: 0, Size: size, UserAddr: 1 << 40, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	return mem, b
}

// expected is what [iova, iova+n) of a region built from spans holds,
// read the slow way.
func expected(host []byte, spans []emtt.Span, base, iova, n uint64) []byte {
	var out []byte
	off := iova - base
	for _, s := range spans {
		if off >= s.Len {
			off -= s.Len
			continue
		}
		take := min(s.Len-off, n-uint64(len(out)))
		out = append(out, host[s.GPA+off:s.GPA+off+take]...)
		off = 0
		if uint64(len(out)) == n {
			break
		}
	}
	return out
}

func concat(vs []guestmem.View) []byte {
	var out []byte
	for _, v := range vs {
		out = append(out, v.Bytes()...)
	}
	return out
}

// TestEntriesTranslateFragmentedRegions: a region of shuffled 4 KiB pages
// (indexed by 2 MiB entries) and one of a few large repeated spans
// (searched) translate every random range to exactly the bytes behind
// its spans.
func TestEntriesTranslateFragmentedRegions(t *testing.T) {
	const size = 16 << 20
	mem, host := ram(t, size)
	rng := rand.New(rand.NewPCG(1, 2))
	pages := rng.Perm(2048) // an 8 MiB MR of pages in random order
	var shuffled []emtt.Span
	for _, p := range pages {
		shuffled = append(shuffled, emtt.Span{GPA: uint64(p) * 4096, Len: 4096})
	}
	big := []emtt.Span{{GPA: 0, Len: 12 << 20}, {GPA: 0, Len: 12 << 20}, {GPA: 4096, Len: 12 << 20}, {GPA: 0, Len: 12 << 20}}
	tab := emtt.New(8, nil)
	for _, c := range []struct {
		name  string
		iova  uint64
		spans []emtt.Span
	}{
		{"shuffled pages", 0x1234_5000, shuffled},
		{"large repeated spans", 0x7000_0000_0000, big},
	} {
		t.Run(c.name, func(t *testing.T) {
			var length uint64
			for _, s := range c.spans {
				length += s.Len
			}
			r, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: c.iova, Length: length, Spans: c.spans})
			if err != nil {
				t.Fatal(err)
			}
			for range 2000 {
				n := rng.Uint64N(64<<10) + 1
				iova := c.iova + rng.Uint64N(length-n+1)
				vs, err := tab.Translate(nil, nil, r.Key, 1, 0, iova, n)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := concat(vs), expected(host, c.spans, c.iova, iova, n); !bytes.Equal(got, want) {
					t.Fatalf("[%#x, +%#x): wrong bytes", iova, n)
				}
			}
		})
	}
}

// pinnedTable is a table whose memory is pinned through a cache (with a
// no-op pinner: the bookkeeping is what is under test).
func pinnedTable(t *testing.T, mem *guestmem.Table, o pvdma.Options) (*emtt.Table, *pvdma.Cache) {
	t.Helper()
	c := pvdma.NewPool(0, pvdma.NopPinner{}).NewCache(o)
	t.Cleanup(c.Close)
	if err := c.SetMemory(mem); err != nil {
		t.Fatal(err)
	}
	return emtt.New(16, c), c
}

// TestTranslatePinsTouchedChunks: a translation with a hold pins exactly
// the chunks behind the views it returns, once.
func TestTranslatePinsTouchedChunks(t *testing.T) {
	mem, _ := ram(t, 16*chunk)
	tab, c := pinnedTable(t, mem, pvdma.Options{Name: "d"})
	r, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: 0, Length: 16 * chunk, Spans: []emtt.Span{{GPA: 0, Len: 16 * chunk}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Stats().PinnedBytes != 0 {
		t.Fatal("REG_MR pinned memory on demand mode")
	}
	var h pvdma.Hold
	if _, err := tab.Translate(nil, &h, r.Key, 1, abi.AccessRemoteWrite, 3*chunk-8, 16); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.PinnedBytes != 2*chunk || h.Len() != 2 {
		t.Fatalf("pinned %d bytes, %d refs", s.PinnedBytes, h.Len())
	}
	h.Release()
	if _, err := tab.Translate(nil, &h, r.Key, 1, 0, 3*chunk-8, 16); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if s := c.Stats(); s.Pins != 2 || s.Hits != 2 {
		t.Fatalf("second translation pinned again: %+v", s)
	}
	if _, err := tab.Translate(nil, &h, r.Key, 2, 0, 0, 8); !errors.Is(err, emtt.ErrPD) || tab.Misses() != 1 {
		t.Fatalf("bad PD: %v, misses %d", err, tab.Misses())
	}
}

// TestPinAtRegMR: in pvdma.ModeAtRegMR an MR's chunks are pinned and held
// from REG_MR to DEREG_MR; a registration the budget cannot hold fails
// and pins nothing.
func TestPinAtRegMR(t *testing.T) {
	mem, _ := ram(t, 16*chunk)
	tab, c := pinnedTable(t, mem, pvdma.Options{Name: "d", Mode: pvdma.ModeAtRegMR, Budget: 4 * chunk})
	r, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 3 * chunk, Spans: []emtt.Span{{GPA: chunk / 2, Len: 3 * chunk}}})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.PinnedBytes != 4*chunk {
		t.Fatalf("pinned %d bytes, want the 4 chunks under the MR", s.PinnedBytes)
	}
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: chunk, Spans: []emtt.Span{{GPA: 8 * chunk, Len: chunk}}}); !errors.Is(err, emtt.ErrPin) {
		t.Fatalf("MR over the budget: %v", err)
	}
	if s := c.Stats(); s.PinnedBytes != 4*chunk || tab.Len() != 1 {
		t.Fatalf("a refused REG_MR changed things: %+v, %d MRs", s, tab.Len())
	}
	if _, err := tab.Remove(r.Key); err != nil {
		t.Fatal(err)
	}
	// Its chunks are now only cached: the budget can take them back.
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: chunk, Spans: []emtt.Span{{GPA: 8 * chunk, Len: chunk}}}); err != nil {
		t.Fatalf("after DEREG_MR: %v", err)
	}
}

// TestRemovedMemoryFailsDMA: after memory leaves the table (the cache
// first, then Rebind), DMA through an MR that pointed there fails with
// ErrInvalidated and nothing of it stays pinned; a translation racing the
// change (the cache moved, Rebind not yet) fails with ErrPin.
func TestRemovedMemoryFailsDMA(t *testing.T) {
	m1, _ := guestmem.MapAnonymous(4 * chunk)
	m2, _ := guestmem.MapAnonymous(4 * chunk)
	t.Cleanup(func() { m1.Unmap(); m2.Unmap() })
	r1 := guestmem.Region{GuestPhys: 0, Size: 4 * chunk, UserAddr: 1 << 40, Mapping: m1}
	r2 := guestmem.Region{GuestPhys: 1 << 30, Size: 4 * chunk, UserAddr: 1<<40 + 1<<30, Mapping: m2}
	both, _ := guestmem.NewTable([]guestmem.Region{r1, r2})
	one, _ := guestmem.NewTable([]guestmem.Region{r1})
	tab, c := pinnedTable(t, both, pvdma.Options{Name: "d"})
	mr, err := tab.Insert(both, emtt.Spec{PD: 1, Length: chunk, Spans: []emtt.Span{{GPA: 1 << 30, Len: chunk}}})
	if err != nil {
		t.Fatal(err)
	}
	var h pvdma.Hold
	if _, err := tab.Translate(nil, &h, mr.Key, 1, 0, 0, 8); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if err := c.SetMemory(one); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Translate(nil, &h, mr.Key, 1, 0, 0, 8); !errors.Is(err, emtt.ErrPin) || !errors.Is(err, pvdma.ErrRemoved) {
		t.Fatalf("translation between the cache and Rebind: %v", err)
	}
	h.Release()
	if n := tab.Rebind(one); n != 1 {
		t.Fatalf("Rebind invalidated %d", n)
	}
	if _, err := tab.Translate(nil, &h, mr.Key, 1, 0, 0, 8); !errors.Is(err, emtt.ErrInvalidated) {
		t.Fatalf("after Rebind: %v", err)
	}
	if s := c.Stats(); s.PinnedBytes != 0 {
		t.Fatalf("%d bytes of removed memory still pinned", s.PinnedBytes)
	}
}

// BenchmarkTranslatePinned is BenchmarkTranslate through a pin cache: the
// data path's cost of PVDMA on a chunk already pinned (one atomic add to
// take the reference, one to drop it).
func BenchmarkTranslatePinned(b *testing.B) {
	m, _ := guestmem.MapAnonymous(4 * chunk)
	defer m.Unmap()
	mem, _ := guestmem.NewTable([]guestmem.Region{{GuestPhys: 0, Size: 4 * chunk, UserAddr: 1 << 40, Mapping: m}})
	c := pvdma.NewPool(0, pvdma.NopPinner{}).NewCache(pvdma.Options{Name: "bench"})
	defer c.Close()
	if err := c.SetMemory(mem); err != nil {
		b.Fatal(err)
	}
	tab := emtt.New(1024, c)
	r, _ := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, Length: 4 * chunk, Spans: []emtt.Span{{GPA: 0, Len: 4 * chunk}}})
	dst := make([]guestmem.View, 0, 4)
	var h pvdma.Hold
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = tab.Translate(dst[:0], &h, r.Key, 1, abi.AccessRemoteWrite, chunk+4096, 4096)
		h.Release()
	}
}
