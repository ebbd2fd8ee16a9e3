package twolevel_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/twolevel"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

const rw = abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead

// guestRAM builds a guest with two regions, [0, 8 MiB) and
// [16 MiB, 24 MiB), each its own anonymous mapping.
func guestRAM(t *testing.T) *guestmem.Table {
	t.Helper()
	var regs []guestmem.Region
	for _, gpa := range []uint64{0, 16 << 20} {
		m, err := guestmem.MapAnonymous(8 << 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Unmap() })
		regs = append(regs, guestmem.Region{GuestPhys: gpa, Size: 8 << 20, UserAddr: 0x7000_0000_0000 + gpa, Mapping: m})
	}
	mem, err := guestmem.NewTable(regs)
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// same is the pair of tables under test: emtt (with a pin cache, as the
// daemon runs it) and the model, with the same MRs.
type same struct {
	mem   *guestmem.Table
	tab   *emtt.Table
	nic   *twolevel.NIC
	dev   *twolevel.Device
	specs []emtt.Spec
	ekeys []emtt.Key
	mkeys []emtt.Key
}

func newSame(t *testing.T, mem *guestmem.Table, specs []emtt.Spec) *same {
	t.Helper()
	cache := pvdma.NewPool(0, pvdma.NopPinner{}).NewCache(pvdma.Options{Name: t.Name()})
	t.Cleanup(cache.Close)
	if err := cache.SetMemory(mem); err != nil {
		t.Fatal(err)
	}
	s := &same{mem: mem, tab: emtt.New(64, cache), nic: twolevel.NewNIC(0), specs: specs}
	var err error
	if s.dev, err = s.nic.AddDevice(mem); err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		er, err := s.tab.Insert(mem, sp)
		if err != nil {
			t.Fatalf("emtt insert %+v: %v", sp, err)
		}
		mr, err := s.dev.Register(sp)
		if err != nil {
			t.Fatalf("model insert %+v: %v", sp, err)
		}
		s.ekeys = append(s.ekeys, er.Key)
		s.mkeys = append(s.mkeys, mr.Key)
	}
	return s
}

// MRs of one span, of several spans in guest-physical disorder, across
// the two memory regions, and one starting mid-page.
func testSpecs() []emtt.Spec {
	return []emtt.Spec{
		{PD: 1, Access: rw, IOVA: 0x7f00_0000_0000, Length: 4 << 20, Spans: []emtt.Span{{GPA: 1 << 20, Len: 4 << 20}}},
		{PD: 1, Access: rw, IOVA: 0x10_0000_3000, Length: 5 * 4096, Spans: []emtt.Span{
			{GPA: 7 << 20, Len: 2 * 4096}, {GPA: 0x5000, Len: 4096}, {GPA: 20 << 20, Len: 2 * 4096}}},
		{PD: 1, Access: rw, IOVA: 0x1234_5000, Length: 2 << 20, Spans: []emtt.Span{{GPA: 8<<20 - 1<<20, Len: 1 << 20}, {GPA: 16 << 20, Len: 1 << 20}}},
		{PD: 2, Access: abi.AccessRemoteRead, IOVA: 0x9000_0123, Length: 3 * 4096, Spans: []emtt.Span{{GPA: 0x40123, Len: 3 * 4096}}},
	}
}

// For random DMAs over every MR, each page the model translates is the
// very byte of host memory emtt's view holds at that offset of the DMA,
// and bytes written through the model read back through emtt.
func TestTranslateMatchesEMTT(t *testing.T) {
	s := newSame(t, guestRAM(t), testSpecs())
	rng := rand.New(rand.NewPCG(7, 7))
	var hold pvdma.Hold
	var views []guestmem.View
	var pages []uint64
	for i := range 5000 {
		m := rng.IntN(len(s.specs))
		sp := s.specs[m]
		n := 1 + rng.Uint64N(min(sp.Length, 64<<10))
		iova := sp.IOVA + rng.Uint64N(sp.Length-n+1)
		var err error
		views, err = s.tab.Translate(views[:0], &hold, s.ekeys[m], sp.PD, 0, iova, n)
		if err != nil {
			t.Fatalf("emtt: %v", err)
		}
		pages, err = s.nic.TranslatePages(pages[:0], s.dev, s.mkeys[m], sp.PD, 0, iova, n)
		if err != nil {
			t.Fatalf("model: %v", err)
		}
		if want := (iova+n-1)/twolevel.PageSize - iova/twolevel.PageSize + 1; uint64(len(pages)) != want {
			t.Fatalf("DMA [%#x, +%#x): %d pages, want %d", iova, n, len(pages), want)
		}
		first, err := s.nic.Translate(s.dev, s.mkeys[m], sp.PD, 0, iova, n)
		if err != nil || first != pages[0] {
			t.Fatalf("Translate = %#x, %v; TranslatePages starts at %#x", first, err, pages[0])
		}
		off := uint64(0) // offset in the DMA of pages[p]
		for p, hpa := range pages {
			hv, err := s.nic.Host().View(hpa, 1)
			if err != nil {
				t.Fatalf("host view of %#x: %v", hpa, err)
			}
			ev := at(views, off)
			if &hv.Bytes()[0] != &ev[0] {
				t.Fatalf("MR %d DMA [%#x, +%#x) page %d: model and emtt name different bytes", m, iova, n, p)
			}
			v := byte(i + p)
			hv.Bytes()[0] = v
			if ev[0] != v {
				t.Fatalf("byte written through the model reads %d through emtt", ev[0])
			}
			off += twolevel.PageSize - (iova+off)%twolevel.PageSize
		}
		hold.Release()
	}
	if st := s.nic.Stats(); st.Translations != 10000 || st.Faults != 0 || st.Pages == 0 {
		t.Errorf("stats %+v", st)
	}
}

// at returns the bytes of the views from offset off on.
func at(views []guestmem.View, off uint64) []byte {
	for _, v := range views {
		if off < v.Len() {
			return v.Bytes()[off:]
		}
		off -= v.Len()
	}
	panic("offset beyond the views")
}

// Bad keys, PDs, access and ranges fail with the error emtt gives for the
// same DMA.
func TestTranslateErrorsMatchEMTT(t *testing.T) {
	s := newSame(t, guestRAM(t), testSpecs())
	base := s.specs[0]
	ro := s.specs[3]
	for _, c := range []struct {
		name string
		mr   int
		key  func(emtt.Key) emtt.Key
		pd   uint32
		need abi.Access
		iova uint64
		n    uint64
		want error
	}{
		{"other pd", 0, nil, 2, 0, base.IOVA, 8, emtt.ErrPD},
		{"no atomic", 0, nil, 1, abi.AccessRemoteAtomic, base.IOVA, 8, emtt.ErrAccess},
		{"read-only MR written", 3, nil, 2, abi.AccessRemoteWrite, ro.IOVA, 8, emtt.ErrAccess},
		{"before", 0, nil, 1, 0, base.IOVA - 1, 8, emtt.ErrRange},
		{"after", 0, nil, 1, 0, base.IOVA + base.Length - 4, 8, emtt.ErrRange},
		{"wrap", 0, nil, 1, 0, base.IOVA, ^uint64(0), emtt.ErrRange},
		{"forged tag", 0, func(k emtt.Key) emtt.Key { return k ^ 1 }, 1, 0, base.IOVA, 8, emtt.ErrNoKey},
		{"forged index", 0, func(k emtt.Key) emtt.Key { return k + 0x1000 }, 1, 0, base.IOVA, 8, emtt.ErrNoKey},
		{"zero", 0, func(emtt.Key) emtt.Key { return 0 }, 1, 0, base.IOVA, 8, emtt.ErrNoKey},
		{"huge index", 0, func(emtt.Key) emtt.Key { return 0xffffff00 }, 1, 0, base.IOVA, 8, emtt.ErrNoKey},
	} {
		ek, mk := s.ekeys[c.mr], s.mkeys[c.mr]
		if c.key != nil {
			ek, mk = c.key(ek), c.key(mk)
		}
		if _, err := s.tab.Translate(nil, nil, ek, c.pd, c.need, c.iova, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: emtt err = %v, want %v", c.name, err, c.want)
		}
		if _, err := s.nic.Translate(s.dev, mk, c.pd, c.need, c.iova, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: model err = %v, want %v", c.name, err, c.want)
		}
	}
	if st := s.nic.Stats(); st.Translations != 0 || st.Pages != 0 {
		t.Errorf("refused DMAs were translated: %+v", st)
	}
}

// MRs the model cannot express or that leave guest RAM are refused.
func TestRegisterRefuses(t *testing.T) {
	mem := guestRAM(t)
	dev, err := twolevel.NewNIC(0).AddDevice(mem)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		spec emtt.Spec
		want error
	}{
		{"outside RAM", emtt.Spec{PD: 1, IOVA: 0, Length: 8192, Spans: []emtt.Span{{GPA: 8<<20 - 4096, Len: 8192}}}, emtt.ErrBadAddress},
		{"short spans", emtt.Spec{PD: 1, IOVA: 0, Length: 8192, Spans: []emtt.Span{{GPA: 0, Len: 4096}}}, emtt.ErrRange},
		{"offset differs", emtt.Spec{PD: 1, IOVA: 0x10, Length: 4096, Spans: []emtt.Span{{GPA: 0x20, Len: 4096}}}, twolevel.ErrUnaligned},
		{"inner boundary mid-page", emtt.Spec{PD: 1, IOVA: 0, Length: 8192, Spans: []emtt.Span{{GPA: 0, Len: 100}, {GPA: 0x10064, Len: 8092}}}, twolevel.ErrUnaligned},
	} {
		if _, err := dev.Register(c.spec); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if dev.MTT().Len() != 0 {
		t.Errorf("%d regions after refusals", dev.MTT().Len())
	}
}

// Through the NIC: a device that stays within as many pages as the ATC
// holds hits after its first pass; devices whose pages together exceed
// it, interleaved, thrash it. The results stay right either way.
func TestATCSharedByDevices(t *testing.T) {
	mem := guestRAM(t)
	nic := twolevel.NewNIC(16)
	spec := emtt.Spec{PD: 1, Access: rw, IOVA: 0x1000_0000, Length: 1 << 20, Spans: []emtt.Span{{GPA: 0, Len: 1 << 20}}}
	var devs []*twolevel.Device
	var keys []emtt.Key
	for range 4 {
		d, err := nic.AddDevice(mem)
		if err != nil {
			t.Fatal(err)
		}
		r, err := d.Register(spec)
		if err != nil {
			t.Fatal(err)
		}
		devs, keys = append(devs, d), append(keys, r.Key)
	}
	base, _ := nic.Host().Base(mem.Regions()[0].Mapping)
	run := func(ndev, pages int) (hits, misses uint64) {
		nic.ATC().Invalidate()
		before := nic.ATC().Stats()
		for round := range 5 {
			for p := range pages {
				for d := range ndev {
					hpa, err := nic.Translate(devs[d], keys[d], 1, abi.AccessRemoteWrite, spec.IOVA+uint64(p)*4096+8, 16)
					if err != nil || hpa != base+uint64(p)*4096+8 {
						t.Fatalf("device %d page %d round %d: %#x, %v", d, p, round, hpa, err)
					}
				}
			}
		}
		st := nic.ATC().Stats()
		return st.Hits - before.Hits, st.Misses - before.Misses
	}
	if hits, misses := run(1, 16); misses != 16 || hits != 4*16 {
		t.Errorf("one device, 16 pages: %d hits, %d misses; want 64, 16", hits, misses)
	}
	if hits, misses := run(4, 4); misses != 16 || hits != 4*16 {
		t.Errorf("four devices, 4 pages each: %d hits, %d misses; want 64, 16", hits, misses)
	}
	if hits, misses := run(4, 16); hits != 0 || misses != 5*64 {
		t.Errorf("four devices, 16 pages each: %d hits, %d misses; want every lookup to miss", hits, misses)
	}
}

// The IOMMU has the last word: a page the domain maps read-only faults on
// a write DMA (after the ATS invalidation a real remap needs), and still
// serves reads.
func TestIOMMUFault(t *testing.T) {
	mem := guestRAM(t)
	nic := twolevel.NewNIC(0)
	d, err := nic.AddDevice(mem)
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Register(emtt.Spec{PD: 1, Access: rw, IOVA: 0, Length: 2 * 4096, Spans: []emtt.Span{{GPA: 0x3000, Len: 2 * 4096}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nic.Translate(d, r.Key, 1, abi.AccessLocalWrite, 0, 8192); err != nil {
		t.Fatal(err)
	}
	base, _ := nic.Host().Base(mem.Regions()[0].Mapping)
	if err := d.Domain().Map(0x4000, base+0x4000, 4096, false); err != nil {
		t.Fatal(err)
	}
	nic.ATC().Invalidate()
	if _, err := nic.Translate(d, r.Key, 1, abi.AccessLocalWrite, 0, 8192); !errors.Is(err, twolevel.ErrFault) {
		t.Errorf("write over a read-only page: %v, want ErrFault", err)
	}
	if hpa, err := nic.Translate(d, r.Key, 1, 0, 4096, 8); err != nil || hpa != base+0x4000 {
		t.Errorf("read of the read-only page: %#x, %v", hpa, err)
	}
	if st := nic.Stats(); st.Faults != 1 {
		t.Errorf("%d faults, want 1", st.Faults)
	}
}

// In steady state a translation allocates nothing, like emtt's.
func TestTranslateDoesNotAllocate(t *testing.T) {
	s := newSame(t, guestRAM(t), testSpecs())
	sp := s.specs[0]
	if _, err := s.nic.Translate(s.dev, s.mkeys[0], 1, 0, sp.IOVA, 64<<10); err != nil {
		t.Fatal(err)
	}
	i := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		i = (i + 4096*7) % (sp.Length - 64<<10)
		if _, err := s.nic.Translate(s.dev, s.mkeys[0], 1, 0, sp.IOVA+i, 64<<10); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per translation", allocs)
	}
}
