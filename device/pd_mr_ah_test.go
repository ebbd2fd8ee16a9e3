package device

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestPD(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxPD: 3}})
	g := startVM(t, d, vmOpts{})
	p1, p2, p3 := g.allocPD(), g.allocPD(), g.allocPD()
	if p1 != 1 || p2 != 2 || p3 != 3 {
		t.Fatalf("PDNs %d %d %d", p1, p2, p3)
	}
	// The limit: a status, not an allocation.
	g.want(abi.StatusNoResources, abi.OpAllocPD, nil)
	if n := d.Objects().PDs; n != 3 {
		t.Fatalf("%d PDs", n)
	}
	for _, h := range []uint32{0, 4, 1 << 31, 0xffffffff} {
		g.want(abi.StatusNotFound, abi.OpDeallocPD, &abi.HandleReq{Handle: h})
	}
	g.want(abi.StatusInvalidArgument, abi.OpDeallocPD, &abi.HandleReq{Handle: 1, Reserved: 1})
	g.must(abi.OpDeallocPD, &abi.HandleReq{Handle: p2}, nil)
	g.want(abi.StatusNotFound, abi.OpDeallocPD, &abi.HandleReq{Handle: p2}) // double
	// The freed slot is the only one left, so it is reused.
	if p := g.allocPD(); p != p2 {
		t.Fatalf("reused PDN %d", p)
	}

	// Busy while an MR or an AH is in it.
	key, _ := g.regMR(p1, 0, 4096)
	g.want(abi.StatusBusy, abi.OpDeallocPD, &abi.HandleReq{Handle: p1})
	g.must(abi.OpDeregMR, &abi.HandleReq{Handle: key}, nil)
	var ah abi.HandleResp
	g.must(abi.OpCreateAH, &abi.CreateAHReq{PDN: p1, AH: abi.AHAttr{DGID: gidOf(1), Port: 1}}, &ah)
	g.want(abi.StatusBusy, abi.OpDeallocPD, &abi.HandleReq{Handle: p1})
	g.must(abi.OpDestroyAH, &abi.HandleReq{Handle: ah.Handle}, nil)
	g.must(abi.OpDeallocPD, &abi.HandleReq{Handle: p1}, nil)
	// ALLOC_PD takes no payload.
	if st, _ := g.raw(abi.AppendRequest(nil, abi.OpAllocPD, []byte{0}), 64); st != abi.StatusInvalidArgument {
		t.Fatalf("ALLOC_PD with a payload: %v", st)
	}
}

// translate reads n bytes through key as the engine would (PD pd, local
// read) and returns them.
func translate(t *testing.T, d *Device, key, pd uint32, iova, n uint64) ([]byte, error) {
	t.Helper()
	views, err := d.mtt.Translate(nil, nil, emtt.Key(key), pd, 0, iova, n)
	if err != nil {
		return nil, err
	}
	var out []byte
	err = guestmem.Guard(func() error { // as the engine reads: guarded
		for _, v := range views {
			out = append(out, v.Bytes()...)
		}
		return nil
	})
	return out, err
}

func TestRegMRContiguous(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxMR: 3, MaxMRSize: 1 << 20}})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	key, gpa := g.regMR(pdn, abi.AccessLocalWrite|abi.AccessRemoteWrite|abi.AccessRemoteRead|abi.AccessRemoteAtomic, 8192)
	copy(g.bytes(gpa, 8192), bytes.Repeat([]byte("vstellar"), 1024))
	got, err := translate(t, d, key, pdn, gpa+8, 16)
	if err != nil || string(got) != "vstellarvstellar" {
		t.Fatalf("translate: %q %v", got, err)
	}
	// Cross-PD use of the MR, and ranges outside it, are refused by the
	// table the engine translates through.
	if _, err := translate(t, d, key, pdn+1, gpa, 16); !errors.Is(err, emtt.ErrPD) {
		t.Fatalf("other PD: %v", err)
	}
	if _, err := translate(t, d, key, pdn, gpa+8190, 16); !errors.Is(err, emtt.ErrRange) {
		t.Fatalf("past the end: %v", err)
	}

	ram := uint64(64 << 20)
	for _, c := range []struct {
		name string
		req  abi.RegMRReq
		want abi.Status
	}{
		{"no PD", abi.RegMRReq{PDN: 99, IOVA: gpa, Length: 4096, Addr: gpa}, abi.StatusNotFound},
		{"PD 0", abi.RegMRReq{PDN: 0, IOVA: gpa, Length: 4096, Addr: gpa}, abi.StatusNotFound},
		{"zero length", abi.RegMRReq{PDN: pdn, IOVA: gpa, Addr: gpa}, abi.StatusInvalidArgument},
		{"over max_mr_size", abi.RegMRReq{PDN: pdn, IOVA: gpa, Length: 1<<20 + 1, Addr: gpa}, abi.StatusInvalidArgument},
		{"IOVA wraps", abi.RegMRReq{PDN: pdn, IOVA: ^uint64(0) - 10, Length: 4096, Addr: gpa}, abi.StatusInvalidArgument},
		{"address wraps", abi.RegMRReq{PDN: pdn, IOVA: 0, Length: 4096, Addr: ^uint64(0) - 10}, abi.StatusBadAddress},
		{"outside guest RAM", abi.RegMRReq{PDN: pdn, IOVA: 0, Length: 4096, Addr: ram}, abi.StatusBadAddress},
		{"straddles the end of RAM", abi.RegMRReq{PDN: pdn, IOVA: 0, Length: 8192, Addr: ram - 4096}, abi.StatusBadAddress},
		{"in the PCI hole", abi.RegMRReq{PDN: pdn, IOVA: 0, Length: 4096, Addr: 3 << 30}, abi.StatusBadAddress},
		{"remote write without local write", abi.RegMRReq{PDN: pdn, Access: abi.AccessRemoteWrite, IOVA: gpa, Length: 4096, Addr: gpa}, abi.StatusInvalidArgument},
		{"undefined access bit", abi.RegMRReq{PDN: pdn, Access: 1 << 9, IOVA: gpa, Length: 4096, Addr: gpa}, abi.StatusInvalidArgument},
		{"page shift without pages", abi.RegMRReq{PDN: pdn, IOVA: gpa, Length: 4096, Addr: gpa, PageShift: 12}, abi.StatusInvalidArgument},
	} {
		if st := g.do(abi.OpRegMR, &c.req, nil); st != c.want {
			t.Errorf("%s: %v, want %v", c.name, st, c.want)
		}
	}
	if n := d.Objects().MRs; n != 1 {
		t.Fatalf("%d MRs after failed registrations", n)
	}

	// The limit.
	g.regMR(pdn, 0, 4096)
	k3, _ := g.regMR(pdn, 0, 4096)
	g.want(abi.StatusNoResources, abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: gpa, Length: 4096, Addr: gpa})
	if n := d.Objects().MRs; n != 3 {
		t.Fatalf("%d MRs at the limit", n)
	}

	// DEREG_MR, double DEREG_MR, stale and forged keys.
	g.must(abi.OpDeregMR, &abi.HandleReq{Handle: key}, nil)
	g.want(abi.StatusNotFound, abi.OpDeregMR, &abi.HandleReq{Handle: key})
	if _, err := translate(t, d, key, pdn, gpa, 16); !errors.Is(err, emtt.ErrNoKey) {
		t.Fatalf("stale key translates: %v", err)
	}
	for _, forged := range []uint32{0, k3 + 1, k3 ^ 0xff, 0xffffff00, (emtt.Key(k3).Index() + 5) << 8} {
		g.want(abi.StatusNotFound, abi.OpDeregMR, &abi.HandleReq{Handle: forged})
	}
	// The slot is reused with a new tag: the stale key still names nothing.
	k4, _ := g.regMR(pdn, 0, 4096)
	if k4 == key || emtt.Key(k4).Index() != emtt.Key(key).Index() {
		t.Fatalf("reused key %#x (old %#x)", k4, key)
	}
	g.want(abi.StatusNotFound, abi.OpDeregMR, &abi.HandleReq{Handle: key})
}

// pageList writes a page list into guest memory and returns its address.
func (g *vmGuest) pageList(pages []uint64) uint64 {
	g.t.Helper()
	a := g.alloc(uint64(len(pages))*8, 8)
	b := g.bytes(a, uint64(len(pages))*8)
	for i, p := range pages {
		binary.LittleEndian.PutUint64(b[i*8:], p)
	}
	return a
}

func TestRegMRPageList(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	// Three scattered pages, the middle two contiguous, and an MR that
	// starts 0x123 into the first.
	a := g.alloc(4096, 4096)
	g.alloc(4096, 4096) // a gap
	b := g.alloc(8192, 4096)
	g.alloc(4096, 4096) // a gap
	c := g.alloc(4096, 4096)
	pages := []uint64{a, b, b + 4096, c}
	const iova, length = 0x10000123, 3*4096 + 0x100
	for i, p := range pages {
		copy(g.bytes(p, 4096), bytes.Repeat([]byte{byte(i + 1)}, 4096))
	}
	var r abi.RegMRResp
	req := abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, IOVA: iova, Length: length, Addr: g.pageList(pages), PageShift: 12, NPages: 4}
	g.must(abi.OpRegMR, &req, &r)
	reg, err := d.mtt.Lookup(emtt.Key(r.LKey))
	if err != nil {
		t.Fatal(err)
	}
	wantSpans := []emtt.Span{{GPA: a + 0x123, Len: 4096 - 0x123}, {GPA: b, Len: 8192}, {GPA: c, Len: 0x223}}
	if len(reg.Spans) != 3 || reg.Spans[0] != wantSpans[0] || reg.Spans[1] != wantSpans[1] || reg.Spans[2] != wantSpans[2] {
		t.Fatalf("spans %+v, want %+v", reg.Spans, wantSpans)
	}
	// Bytes at the page boundaries come from the right pages.
	got, err := translate(t, d, r.LKey, pdn, iova+4096-0x124, 3)
	if err != nil || !bytes.Equal(got, []byte{1, 2, 2}) {
		t.Fatalf("across pages 1/2: %v %v", got, err)
	}
	got, err = translate(t, d, r.LKey, pdn, iova+length-2, 2)
	if err != nil || !bytes.Equal(got, []byte{4, 4}) {
		t.Fatalf("tail: %v %v", got, err)
	}

	ram := uint64(64 << 20)
	bad := func(name string, mut func(*abi.RegMRReq), want abi.Status) {
		t.Helper()
		r := req
		mut(&r)
		if st := g.do(abi.OpRegMR, &r, nil); st != want {
			t.Errorf("%s: %v, want %v", name, st, want)
		}
	}
	bad("misaligned page", func(r *abi.RegMRReq) { r.Addr = g.pageList([]uint64{a + 8, b, b + 4096, c}) }, abi.StatusInvalidArgument)
	bad("too few pages", func(r *abi.RegMRReq) { r.NPages = 3 }, abi.StatusInvalidArgument)
	bad("too many pages", func(r *abi.RegMRReq) { r.NPages = 5; r.Addr = g.pageList(append(pages, c)) }, abi.StatusInvalidArgument)
	bad("page outside RAM", func(r *abi.RegMRReq) { r.Addr = g.pageList([]uint64{a, b, ram, c}) }, abi.StatusBadAddress)
	bad("page in the PCI hole", func(r *abi.RegMRReq) { r.Addr = g.pageList([]uint64{a, 3 << 30, b, c}) }, abi.StatusBadAddress)
	bad("page wraps", func(r *abi.RegMRReq) { r.Addr = g.pageList([]uint64{a, b, ^uint64(0) &^ 4095, c}) }, abi.StatusBadAddress)
	bad("list outside RAM", func(r *abi.RegMRReq) { r.Addr = ram - 8 }, abi.StatusBadAddress)
	bad("unsupported page size", func(r *abi.RegMRReq) { r.PageShift = 13; r.NPages = 2 }, abi.StatusInvalidArgument)
	bad("page shift out of range", func(r *abi.RegMRReq) { r.PageShift = 40 }, abi.StatusInvalidArgument)
	bad("too many pages for the ABI", func(r *abi.RegMRReq) { r.NPages = abi.MaxMRPages + 1 }, abi.StatusInvalidArgument)
	if n := d.Objects().MRs; n != 1 {
		t.Fatalf("%d MRs after failed registrations", n)
	}
	// 2 MiB pages work too (the MR covers one page's worth).
	huge := g.alloc(2<<20, 2<<20)
	g.must(abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: 0x200000, Length: 2 << 20, Addr: g.pageList([]uint64{huge}), PageShift: 21, NPages: 1}, &r)
}

func TestAH(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxAH: 2}})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	av := abi.AHAttr{DGID: gidOf(5), Port: 1, HopLimit: 64}
	var h1, h2 abi.HandleResp
	g.must(abi.OpCreateAH, &abi.CreateAHReq{PDN: pdn, AH: av}, &h1)
	av.Port = 0 // "the" port
	g.must(abi.OpCreateAH, &abi.CreateAHReq{PDN: pdn, AH: av}, &h2)
	if h1.Handle != 1 || h2.Handle != 2 {
		t.Fatalf("AHNs %d %d", h1.Handle, h2.Handle)
	}
	g.want(abi.StatusNoResources, abi.OpCreateAH, &abi.CreateAHReq{PDN: pdn, AH: av})
	g.must(abi.OpDestroyAH, &abi.HandleReq{Handle: h2.Handle}, nil)
	for _, c := range []struct {
		name string
		req  abi.CreateAHReq
		want abi.Status
	}{
		{"no PD", abi.CreateAHReq{PDN: 7, AH: av}, abi.StatusNotFound},
		{"port 2", abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(5), Port: 2}}, abi.StatusInvalidArgument},
		{"empty source GID", abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(5), SGIDIndex: 3}}, abi.StatusInvalidArgument},
		{"source GID past the table", abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(5), SGIDIndex: 200}}, abi.StatusInvalidArgument},
		{"no destination", abi.CreateAHReq{PDN: pdn}, abi.StatusInvalidArgument},
		{"reserved", abi.CreateAHReq{PDN: pdn, Reserved: 1, AH: av}, abi.StatusInvalidArgument},
		{"reserved in the AV", abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(5), Reserved: [7]uint8{1}}}, abi.StatusInvalidArgument},
	} {
		if st := g.do(abi.OpCreateAH, &c.req, nil); st != c.want {
			t.Errorf("%s: %v, want %v", c.name, st, c.want)
		}
	}
	// A guest GID is a valid source once added.
	g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 3, GID: gidOf(3)}, nil)
	g.must(abi.OpCreateAH, &abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: gidOf(5), SGIDIndex: 3}}, &h2)
	g.must(abi.OpDestroyAH, &abi.HandleReq{Handle: h2.Handle}, nil)
	g.want(abi.StatusNotFound, abi.OpDestroyAH, &abi.HandleReq{Handle: h2.Handle})
	g.want(abi.StatusNotFound, abi.OpDestroyAH, &abi.HandleReq{Handle: 0})
	g.must(abi.OpDestroyAH, &abi.HandleReq{Handle: h1.Handle}, nil)
	g.must(abi.OpDeallocPD, &abi.HandleReq{Handle: pdn}, nil)
	if o := d.Objects(); o.AHs != 0 || o.PDs != 0 {
		t.Fatalf("objects %+v", o)
	}
}

// TestMRInvalidatedByMemoryRemoval: guest memory going away (a DIMM
// unplugged: REM_MEM_REG) invalidates the MRs over it before it is
// unmapped; DMA translation through them then fails, and MRs elsewhere
// keep working.
func TestMRInvalidatedByMemoryRemoval(t *testing.T) {
	d := newDevice(t, Config{})
	// 2.5 GiB: guest RAM is [0, 2 GiB) plus [4 GiB, 4.5 GiB).
	g := startVM(t, d, vmOpts{memSize: 5 << 29})
	pdn := g.allocPD()
	low, lowGPA := g.regMR(pdn, abi.AccessLocalWrite, 4096)
	const highGPA = 4 << 30
	var r abi.RegMRResp
	g.must(abi.OpRegMR, &abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, IOVA: highGPA, Length: 1 << 20, Addr: highGPA}, &r)
	high := r.LKey
	if _, err := translate(t, d, high, pdn, highGPA, 8); err != nil {
		t.Fatal(err)
	}
	// The front-end removes the high region.
	regs := g.vm.Regions()
	if len(regs) != 2 || regs[1].GuestPhys != highGPA {
		t.Fatalf("regions %+v", regs)
	}
	if err := g.vm.Frontend().RemMemReg(g.ctx, regs[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := translate(t, d, high, pdn, highGPA, 8); !errors.Is(err, emtt.ErrInvalidated) {
		t.Fatalf("MR over removed memory: %v", err)
	}
	copy(g.bytes(lowGPA, 4), "live")
	if got, err := translate(t, d, low, pdn, lowGPA, 4); err != nil || string(got) != "live" {
		t.Fatalf("MR in remaining memory: %q %v", got, err)
	}
	// The invalid MR keeps its key (and its PD busy) until DEREG_MR.
	g.want(abi.StatusBusy, abi.OpDeallocPD, &abi.HandleReq{Handle: pdn})
	g.must(abi.OpDeregMR, &abi.HandleReq{Handle: high}, nil)
	// New registrations over the removed memory are refused.
	g.want(abi.StatusBadAddress, abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: highGPA, Length: 4096, Addr: highGPA})
}

// TestRegMRSpanBudget: a page list alternating between two pages makes
// one span per entry. The spans beyond each MR's first share a budget
// (one per 4 KiB page of guest RAM, at least minExtraSpans): REG_MR stops
// reading a list at the budget with NO_RESOURCES, so such lists cannot
// make the daemon's heap grow past it; DEREG_MR and RESET_STATE give the
// budget back, and page lists of contiguous pages keep working.
func TestRegMRSpanBudget(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxMR: 64}})
	g := startVM(t, d, vmOpts{}) // 64 MiB: 16384 pages, so the floor applies
	budget := extraSpanBudget(g.vm.Memory())
	if budget != minExtraSpans {
		t.Fatalf("budget %d, want the floor %d", budget, minExtraSpans)
	}
	pdn := g.allocPD()
	pa := g.alloc(4096, 4096)
	g.alloc(4096, 4096) // a gap: pb does not follow pa
	pb := g.alloc(4096, 4096)
	alternating := func(n int) []uint64 {
		l := make([]uint64, n)
		for i := range l {
			l[i] = pa
			if i%2 == 1 {
				l[i] = pb
			}
		}
		return l
	}
	regList := func(list uint64, n int) (abi.RegMRResp, abi.Status) {
		var r abi.RegMRResp
		st := g.do(abi.OpRegMR, &abi.RegMRReq{PDN: pdn, IOVA: 0, Length: uint64(n) * 4096, Addr: list, PageShift: 12, NPages: uint32(n)}, &r)
		return r, st
	}

	// The largest list the ABI allows, with a bad entry at its very end:
	// the device stops at the budget, long before it gets there.
	big := alternating(abi.MaxMRPages)
	big[len(big)-1] = pa + 8
	if _, st := regList(g.pageList(big), len(big)); st != abi.StatusNoResources {
		t.Fatalf("2^20 alternating pages: %v, want NO_RESOURCES", st)
	}
	if spansUsed(d) != 0 || d.Objects().MRs != 0 {
		t.Fatalf("%d spans, %d MRs after a refused REG_MR", spansUsed(d), d.Objects().MRs)
	}

	// Smaller lists fill the budget and then are refused; the heap grows
	// by the budget's worth at most.
	const n = 4096
	small := g.pageList(alternating(n))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var keys []uint32
	for {
		r, st := regList(small, n)
		if st == abi.StatusNoResources {
			break
		}
		if st != abi.StatusOK {
			t.Fatalf("REG_MR %d: %v", len(keys), st)
		}
		keys = append(keys, r.LKey)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if want := int(budget / (n - 1)); len(keys) != want {
		t.Fatalf("%d alternating MRs fit, want %d", len(keys), want)
	}
	if spansUsed(d) > budget {
		t.Fatalf("%d spans in a budget of %d", spansUsed(d), budget)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > int64(budget)*256 {
		t.Fatalf("heap grew %d bytes for %d spans", grew, spansUsed(d))
	}

	// A page list of contiguous pages is one span: still fine.
	run := g.alloc(16*4096, 4096)
	pages := make([]uint64, 16)
	for i := range pages {
		pages[i] = run + uint64(i)*4096
	}
	r, st := regList(g.pageList(pages), len(pages))
	if st != abi.StatusOK {
		t.Fatalf("contiguous page list at the budget: %v", st)
	}
	copy(g.bytes(run+5*4096, 4), "page")
	if got, err := translate(t, d, r.LKey, pdn, 5*4096, 4); err != nil || string(got) != "page" {
		t.Fatalf("translate: %q %v", got, err)
	}

	// DEREG_MR gives the spans back.
	g.must(abi.OpDeregMR, &abi.HandleReq{Handle: keys[0]}, nil)
	if _, st := regList(small, n); st != abi.StatusOK {
		t.Fatalf("REG_MR after DEREG_MR: %v", st)
	}
	if _, st := regList(small, n); st != abi.StatusNoResources {
		t.Fatalf("REG_MR past the budget again: %v", st)
	}
	// So does RESET_STATE.
	g.must(abi.OpResetState, nil, nil)
	if spansUsed(d) != 0 {
		t.Fatalf("%d spans after RESET_STATE", spansUsed(d))
	}
	pdn = g.allocPD()
	if _, st := regList(small, n); st != abi.StatusOK {
		t.Fatalf("REG_MR after RESET_STATE: %v", st)
	}
}

// spansUsed is the span budget the device's live MRs use.
func spansUsed(d *Device) uint64 {
	d.omu.Lock()
	defer d.omu.Unlock()
	return d.o.mrExtraSpans
}
