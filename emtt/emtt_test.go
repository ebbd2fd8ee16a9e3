package emtt_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// guestRAM builds a two-region guest memory: [0, 1 MiB) and [4 MiB, 5 MiB),
// each its own anonymous mapping (so they are not host-contiguous).
func guestRAM(t *testing.T) (*guestmem.Table, []*guestmem.Mapping) {
	t.Helper()
	var regs []guestmem.Region
	var maps []*guestmem.Mapping
	for _, gpa := range []uint64{0, 4 << 20} {
		m, err := guestmem.MapAnonymous(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Unmap() })
		maps = append(maps, m)
		regs = append(regs, guestmem.Region{GuestPhys: gpa, Size: 1 << 20, UserAddr: 0x7000_0000_0000 + gpa, Mapping: m})
	}
	tab, err := guestmem.NewTable(regs)
	if err != nil {
		t.Fatal(err)
	}
	return tab, maps
}

const rw = abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead

func TestTranslateChecksPDAccessAndRange(t *testing.T) {
	mem, maps := guestRAM(t)
	tab := emtt.New(16, nil)
	r, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: 0x10000, Length: 8192, Spans: []emtt.Span{{GPA: 0x2000, Len: 8192}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Key.Index() == 0 {
		t.Fatalf("key %#x has index 0", uint32(r.Key))
	}
	maps[0].View().PutUint64(0x2000+100, 0xfeedface)
	vs, err := tab.Translate(nil, nil, r.Key, 1, abi.AccessRemoteWrite, 0x10000+100, 8)
	if err != nil || len(vs) != 1 || vs[0].Uint64(0) != 0xfeedface {
		t.Fatalf("translate = %v, %v", vs, err)
	}
	for _, c := range []struct {
		name string
		key  emtt.Key
		pd   uint32
		need abi.Access
		iova uint64
		n    uint64
		want error
	}{
		{"other pd", r.Key, 2, 0, 0x10000, 8, emtt.ErrPD},
		{"no atomic", r.Key, 1, abi.AccessRemoteAtomic, 0x10000, 8, emtt.ErrAccess},
		{"before", r.Key, 1, 0, 0xffff, 8, emtt.ErrRange},
		{"after", r.Key, 1, 0, 0x10000 + 8190, 8, emtt.ErrRange},
		{"wrap", r.Key, 1, 0, 0x10000, ^uint64(0), emtt.ErrRange},
		{"forged tag", r.Key ^ 1, 1, 0, 0x10000, 8, emtt.ErrNoKey},
		{"forged index", r.Key + 0x100, 1, 0, 0x10000, 8, emtt.ErrNoKey},
		{"zero", 0, 1, 0, 0x10000, 8, emtt.ErrNoKey},
		{"huge index", 0xffffff00, 1, 0, 0x10000, 8, emtt.ErrNoKey},
	} {
		if _, err := tab.Translate(nil, nil, c.key, c.pd, c.need, c.iova, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestStaleKeyAfterRemoveAndReuse(t *testing.T) {
	mem, _ := guestRAM(t)
	tab := emtt.New(1, nil)
	spec := emtt.Spec{PD: 1, Access: rw, IOVA: 0, Length: 4096, Spans: []emtt.Span{{GPA: 0, Len: 4096}}}
	a, err := tab.Insert(mem, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Insert(mem, spec); !errors.Is(err, emtt.ErrFull) {
		t.Fatalf("second insert into a 1-entry table: %v", err)
	}
	if _, err := tab.Remove(a.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Remove(a.Key); !errors.Is(err, emtt.ErrNoKey) {
		t.Fatalf("double remove: %v", err)
	}
	b, err := tab.Insert(mem, spec)
	if err != nil {
		t.Fatal(err)
	}
	if b.Key.Index() != a.Key.Index() || b.Key == a.Key {
		t.Fatalf("reused slot: old key %#x new key %#x", uint32(a.Key), uint32(b.Key))
	}
	if _, err := tab.Lookup(a.Key); !errors.Is(err, emtt.ErrNoKey) {
		t.Fatalf("stale key still resolves: %v", err)
	}
}

func TestSpansAcrossRegionsAndPages(t *testing.T) {
	mem, maps := guestRAM(t)
	tab := emtt.New(4, nil)
	// Two pages in different regions, in reverse GPA order, then a page
	// contiguous with the second: three spans, two host segments.
	spans := []emtt.Span{{GPA: 4<<20 + 0x1000, Len: 4096}, {GPA: 0x3000, Len: 4096}, {GPA: 0x4000, Len: 4096}}
	r, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: 0x100000, Length: 3 * 4096, Spans: spans})
	if err != nil {
		t.Fatal(err)
	}
	maps[1].View().PutUint32(0x1000+4092, 0x11111111)
	maps[0].View().PutUint32(0x3000, 0x22222222)
	maps[0].View().PutUint32(0x4000, 0x33333333)
	vs, err := tab.Translate(nil, nil, r.Key, 1, 0, 0x100000+4092, 8196)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0].Len() != 4 || vs[1].Len() != 8192 {
		t.Fatalf("views: %d (%v)", len(vs), vs)
	}
	if vs[0].Uint32(0) != 0x11111111 || vs[1].Uint32(0) != 0x22222222 || vs[1].Uint32(4096) != 0x33333333 {
		t.Fatal("views do not alias the right guest memory")
	}
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 4096, Spans: []emtt.Span{{GPA: 2 << 20, Len: 4096}}}); !errors.Is(err, emtt.ErrBadAddress) {
		t.Fatalf("span in the hole: %v", err)
	}
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 8192, Spans: []emtt.Span{{GPA: 1<<20 - 4096, Len: 8192}}}); !errors.Is(err, emtt.ErrBadAddress) {
		t.Fatalf("span crossing the end of RAM: %v", err)
	}
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 4096, Spans: []emtt.Span{{GPA: 0, Len: 8192}}}); !errors.Is(err, emtt.ErrRange) {
		t.Fatalf("spans longer than the region: %v", err)
	}
}

func TestIOMemoryIsNeverCovered(t *testing.T) {
	mem, _ := guestRAM(t)
	tab := emtt.New(4, nil)
	io := emtt.Span{GPA: 0x8000, Len: 0x2000}
	if err := tab.ReserveIO(io); err != nil {
		t.Fatal(err)
	}
	if got := tab.MemTypeOf(emtt.Span{GPA: 0x9000, Len: 8}); got != emtt.MemIO {
		t.Fatalf("MemTypeOf(io) = %v", got)
	}
	if got := tab.MemTypeOf(emtt.Span{GPA: 0x1000, Len: 8}); got != emtt.MemGuestRAM {
		t.Fatalf("MemTypeOf(ram) = %v", got)
	}
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 0x4000, Spans: []emtt.Span{{GPA: 0x7000, Len: 0x4000}}}); !errors.Is(err, emtt.ErrBadAddress) {
		t.Fatalf("MR over IO memory: %v", err)
	}
	r, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 0x1000, Spans: []emtt.Span{{GPA: 0x10000, Len: 0x1000}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.ReserveIO(emtt.Span{GPA: 0x10800, Len: 0x1000}); !errors.Is(err, emtt.ErrBadAddress) {
		t.Fatalf("IO range over an MR: %v", err)
	}
	tab.Clear()
	if _, err := tab.Lookup(r.Key); !errors.Is(err, emtt.ErrNoKey) {
		t.Fatalf("key after Clear: %v", err)
	}
	if tab.MemTypeOf(io) != emtt.MemGuestRAM || tab.Len() != 0 {
		t.Fatal("Clear kept IO ranges or regions")
	}
}

func TestRebindInvalidatesRemovedMemory(t *testing.T) {
	mem, _ := guestRAM(t)
	tab := emtt.New(4, nil)
	low, _ := tab.Insert(mem, emtt.Spec{PD: 1, Length: 4096, Spans: []emtt.Span{{GPA: 0, Len: 4096}}})
	high, _ := tab.Insert(mem, emtt.Spec{PD: 1, Length: 4096, Spans: []emtt.Span{{GPA: 4 << 20, Len: 4096}}})
	r0, _ := mem.Lookup(0)
	r1, _ := mem.Lookup(4 << 20)
	smaller, _, err := mem.Without(r1.GuestPhys, r1.Size, r1.UserAddr)
	if err != nil {
		t.Fatal(err)
	}
	if n := tab.Rebind(smaller); n != 1 {
		t.Fatalf("Rebind invalidated %d regions, want 1", n)
	}
	if _, err := tab.Translate(nil, nil, high.Key, 1, 0, 0, 8); !errors.Is(err, emtt.ErrInvalidated) {
		t.Fatalf("MR over removed memory: %v", err)
	}
	vs, err := tab.Translate(nil, nil, low.Key, 1, 0, 0, 8)
	if err != nil || len(vs) != 1 {
		t.Fatalf("MR over kept memory: %v", err)
	}
	// Memory coming back does not resurrect an invalidated region: the
	// guest re-registers.
	_ = r0
	if tab.Rebind(mem); tab.Len() != 2 {
		t.Fatal("Rebind dropped a key")
	}
	if _, err := tab.Translate(nil, nil, high.Key, 1, 0, 0, 8); !errors.Is(err, emtt.ErrInvalidated) {
		t.Fatalf("invalidated MR came back: %v", err)
	}
}

// TestLookupsRaceWithUpdates runs lock-free lookups against inserts and
// removes; the race detector checks the publication.
func TestLookupsRaceWithUpdates(t *testing.T) {
	mem, _ := guestRAM(t)
	tab := emtt.New(2048, nil)
	var keys sync.Map
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				keys.Range(func(k, _ any) bool {
					if r, err := tab.Lookup(k.(emtt.Key)); err == nil && r.Key != k.(emtt.Key) {
						t.Errorf("lookup %#x returned %#x", k, r.Key)
					}
					return true
				})
			}
		}()
	}
	for i := range 3000 {
		r, err := tab.Insert(mem, emtt.Spec{PD: 1, Length: 64, Spans: []emtt.Span{{GPA: uint64(i%100) * 64, Len: 64}}})
		if err != nil {
			t.Fatal(err)
		}
		keys.Store(r.Key, true)
		if i%2 == 1 {
			if _, err := tab.Remove(r.Key); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if tab.Len() != 1500 {
		t.Fatalf("Len = %d, want 1500", tab.Len())
	}
}

func BenchmarkTranslate(b *testing.B) {
	m, _ := guestmem.MapAnonymous(1 << 20)
	defer m.Unmap()
	mem, _ := guestmem.NewTable([]guestmem.Region{{GuestPhys: 0, Size: 1 << 20, UserAddr: 1 << 40, Mapping: m}})
	tab := emtt.New(1024, nil)
	r, _ := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, Length: 1 << 20, Spans: []emtt.Span{{GPA: 0, Len: 1 << 20}}})
	dst := make([]guestmem.View, 0, 4)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = tab.Translate(dst[:0], nil, r.Key, 1, abi.AccessRemoteWrite, 4096, 4096)
	}
}

// Keys in every part of the table work alike: the slots inside it, the
// first lazily allocated chunk (past them) and later chunks. Each sees
// them all, a removed key finds nothing wherever it lived, and a slot
// reused after removal gets a new key.
func TestKeysAcrossChunks(t *testing.T) {
	mem, _ := guestRAM(t)
	const n = 2100 // past the inline slots, chunk 0 and chunk 1
	tab := emtt.New(n, nil)
	keys := make([]emtt.Key, 0, n)
	for i := range n {
		r, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: uint64(i) << 12, Length: 4096, Spans: []emtt.Span{{GPA: uint64(i%256) << 12, Len: 4096}}})
		if err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
		keys = append(keys, r.Key)
	}
	if _, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: 0, Length: 4096, Spans: []emtt.Span{{GPA: 0, Len: 4096}}}); !errors.Is(err, emtt.ErrFull) {
		t.Fatalf("region %d of %d: %v, want ErrFull", n+1, n, err)
	}
	for i, k := range keys {
		v, err := tab.Translate(nil, nil, k, 1, abi.AccessRemoteWrite, uint64(i)<<12+8, 8)
		if err != nil || len(v) != 1 || v[0].Len() != 8 {
			t.Fatalf("key %d (%#x): %v %v", i, uint32(k), v, err)
		}
	}
	seen := 0
	tab.Each(func(*emtt.Region) { seen++ })
	if seen != n || tab.Len() != n {
		t.Fatalf("Each saw %d, Len %d, want %d", seen, tab.Len(), n)
	}
	for _, i := range []int{1, 63, 64, 1023, 1024, 2047, 2048} {
		k := keys[i-1] // keys[i-1] has index i: index 0 is never used
		if k.Index() != uint32(i) {
			t.Fatalf("key %d has index %d", i-1, k.Index())
		}
		if _, err := tab.Remove(k); err != nil {
			t.Fatal(err)
		}
		if _, err := tab.Lookup(k); !errors.Is(err, emtt.ErrNoKey) {
			t.Fatalf("removed key of index %d: %v", i, err)
		}
		r, err := tab.Insert(mem, emtt.Spec{PD: 1, Access: rw, IOVA: 0, Length: 4096, Spans: []emtt.Span{{GPA: 0, Len: 4096}}})
		if err != nil || r.Key.Index() != uint32(i) || r.Key == k {
			t.Fatalf("reinsert after removing index %d: key %#x (was %#x), %v", i, uint32(r.Key), uint32(k), err)
		}
		if got, err := tab.Lookup(r.Key); err != nil || got != r {
			t.Fatalf("reinserted index %d: %v", i, err)
		}
	}
}
