package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestIsolation is the "Isolation and bad input" list, end to end
// against a whole host: the vstellard binary, four VMs on real vhost-user
// sockets, the guest driver. A attacks; V is the victim and meanwhile
// runs checked traffic with B for the whole test. Each subtest asserts the
// exact status or error completion (and the async event it implies for
// A), then that V's and B's traffic never saw an error or a wrong byte,
// that V's memory outside what it legitimately received is untouched, and
// that neither V nor B got an event.
//
// The list, and where each item is:
//
//	cross-PD MR use                 cross-PD_MR: LOC_PROT_ERR (lkey of A's other
//	                                PD), REM_ACCESS_ERR (rkey of V's other PD)
//	forged lkey/rkey                forged_keys: REM_ACCESS_ERR, LOC_PROT_ERR
//	stale lkey/rkey                 stale_key_after_DEREG_MR, stale_rkey_after_
//	                                slot_reuse: REM_ACCESS_ERR, LOC_PROT_ERR;
//	                                DEREG_MR of the stale key NOT_FOUND
//	SGE outside its MR              SGE_outside_its_MR: LOC_PROT_ERR
//	MR over memory outside RAM      REG_MR_outside_guest_RAM (beyond RAM, q35
//	                                hole), REG_MR_page_list_outside_guest_RAM:
//	                                BAD_ADDRESS
//	rings outside guest RAM         rings_outside_guest_RAM: BAD_ADDRESS for
//	                                CREATE_CQ, RESIZE_CQ, CREATE_QP
//	garbage opcode / SGE count      WQE_with_a_garbage_opcode, WQE_with_a_huge_
//	                                SGE_count: LOC_QP_OP_ERR + QP_FATAL, A only
//	another device's doorbell page  writes_into_another_device's_doorbell_page
//	DMA at doorbell/IO memory       DMA_at_doorbell_and_IO_memory: BAD_ADDRESS,
//	                                REM_ACCESS_ERR, LOC_PROT_ERR
//	destroying a CQ in use          destroy_a_CQ_in_use: BUSY
//	double destroy                  double_destroy: NOT_FOUND (QP, CQ, MR, AH, PD)
//	(a QP connected elsewhere)      third_QP_into_a_connected_QP: RETRY_EXC_ERR
//	command flood                   command_flood: exact statuses, NO_RESOURCES
//
// The subtests share state (V's arena, A's objects, the stale key) and run
// in order; the order matters only where a subtest says so.
func TestIsolation(t *testing.T) {
	r := newIsoRig(t)
	r.startTraffic(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"cross-PD MR", r.crossPDMR},
		{"forged keys", r.forgedKeys},
		{"stale key after DEREG_MR", r.staleAfterDereg},
		{"stale rkey after slot reuse", r.staleAfterReuse},
		{"SGE outside its MR", r.sgeOutsideMR},
		{"REG_MR outside guest RAM", r.regMROutsideRAM},
		{"REG_MR page list outside guest RAM", r.pageListOutsideRAM},
		{"rings outside guest RAM", r.ringsOutsideRAM},
		{"WQE with a garbage opcode", r.garbageOpcode},
		{"WQE with a huge SGE count", r.hugeSGECount},
		{"writes into another device's doorbell page", r.doorbellPages},
		{"DMA at doorbell and IO memory", r.dmaAtIOMemory},
		{"destroy a CQ in use", r.destroyCQInUse},
		{"double destroy", r.doubleDestroy},
		{"third QP into a connected QP", r.thirdQP},
		{"command flood", r.commandFlood},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run(t)
			r.bystandersOK(t)
		})
	}

	rounds := r.tr.rounds.Load()
	r.tr.halt()
	if err := r.tr.failure(); err != nil {
		t.Fatalf("V<->B traffic: %v", err)
	}
	for _, e := range []*trafficEnd{&r.tr.v, &r.tr.b} {
		if st := r.qpState(t, conn{e.vm, e.qp, e.scq}); st != abi.QPStateRTS {
			t.Errorf("%s's traffic QP ended in %v", e.vm.Name, st)
		}
	}
	r.checkArena(t)
	noEvents(t, r.v)
	noEvents(t, r.b)
	select {
	case err := <-r.proc.Exited:
		r.proc.Exited <- err
		t.Fatalf("vstellard exited during the attacks: %v", err)
	default:
	}
	if strings.Contains(r.proc.Logs.String(), "panic") {
		t.Fatal("vstellard logged a panic")
	}
	t.Logf("V<->B traffic: %d rounds, each a checked 4-KiB WRITE and 2-KiB SEND both ways", rounds)
}

// victimUnaffected: V's QP that A's is connected to is still in RTS and
// got no completion.
func (r *isoRig) victimUnaffected(t *testing.T, v conn) {
	t.Helper()
	if st := r.qpState(t, v); st != abi.QPStateRTS {
		t.Fatalf("V's QP %d (A's peer) in %v", v.qp.Num(), st)
	}
	var wc [1]guestdriver.WC
	if n := v.cq.Poll(wc[:]); n != 0 {
		t.Fatalf("V's QP %d got a completion: {wr %d %v %v}", v.qp.Num(), wc[0].WRID, wc[0].Opcode, wc[0].Status)
	}
}

// allEvil fails unless b still holds A's own bytes: nothing of V's (or
// anyone's) arrived.
func allEvil(t *testing.T, what string, b []byte) {
	t.Helper()
	for i, c := range b {
		if c != evil {
			t.Fatalf("%s: byte %d is %#02x: data reached A", what, i, c)
		}
	}
}

// Cross-PD MR use: an lkey of A's other PD in A's WQE (LOC_PROT_ERR), and
// an rkey of V's MR in a PD other than the PD of V's QP (REM_ACCESS_ERR),
// for WRITE and READ.
func (r *isoRig) crossPDMR(t *testing.T) {
	a, v := r.attackV(t, r.aPD)
	wc := post(t, a, guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR2.SGE(0, 64)},
		RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey()})
	checkWC(t, "WRITE from an MR of A's other PD", wc, 1, abi.WRRDMAWrite, abi.WCLocProtErr)
	expectEvent(t, r.a, abi.EventQPFatal, a.qp.Num(), abi.WCLocProtErr)
	r.victimUnaffected(t, v)

	a, v = r.attackV(t, r.aPD)
	wc = post(t, a, guestdriver.SendWR{WRID: 2, Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR.SGE(0, 64)},
		RemoteAddr: r.vOther.IOVA(), RKey: r.vOther.RKey()})
	checkWC(t, "WRITE to an MR of V's other PD", wc, 2, abi.WRRDMAWrite, abi.WCRemAccessErr)
	expectEvent(t, r.a, abi.EventQPAccessErr, a.qp.Num(), abi.WCRemAccessErr)
	r.victimUnaffected(t, v)

	a, v = r.attackV(t, r.aPD)
	wc = post(t, a, guestdriver.SendWR{WRID: 3, Opcode: abi.WRRDMARead, SGL: []abi.SGE{r.aMR.SGE(8<<10, 64)},
		RemoteAddr: r.vOther.IOVA(), RKey: r.vOther.RKey()})
	checkWC(t, "READ from an MR of V's other PD", wc, 3, abi.WRRDMARead, abi.WCRemAccessErr)
	allEvil(t, "READ destination", r.aBuf.Bytes()[8<<10:8<<10+64])
	r.victimUnaffected(t, v)
}

// Forged keys: V's real rkey with another tag, an rkey naming a slot V
// never used, a READ with a forged rkey, and A's own lkey with another
// tag. A legitimate WRITE on the same kind of connection succeeds first,
// so the failures are the keys' doing.
func (r *isoRig) forgedKeys(t *testing.T) {
	a, v := r.attackV(t, r.aPD)
	wc := post(t, a, guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true, SGL: []abi.SGE{r.aMR.SGE(0, 64)},
		RemoteAddr: r.vLegit.IOVA(), RKey: r.vLegit.RKey()})
	checkWC(t, "legitimate WRITE", wc, 1, abi.WRRDMAWrite, abi.WCSuccess)
	fillByte(r.want[legitOff:legitOff+64], evil)
	r.checkArena(t)

	forged := []struct {
		what string
		rkey uint32
	}{
		{"V's key with another tag", r.vExposed.RKey() ^ 0x5a},
		{"a key of a slot V never used", 0xfff0<<8 | 0x11},
		{"key 0", 0},
	}
	for i, f := range forged {
		a, v = r.attackV(t, r.aPD)
		wrid := uint64(10 + i)
		wc = post(t, a, guestdriver.SendWR{WRID: wrid, Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR.SGE(0, 64)},
			RemoteAddr: r.vExposed.IOVA(), RKey: f.rkey})
		checkWC(t, "WRITE with "+f.what, wc, wrid, abi.WRRDMAWrite, abi.WCRemAccessErr)
		expectEvent(t, r.a, abi.EventQPAccessErr, a.qp.Num(), abi.WCRemAccessErr)
		r.victimUnaffected(t, v)
	}

	a, v = r.attackV(t, r.aPD)
	wc = post(t, a, guestdriver.SendWR{WRID: 20, Opcode: abi.WRRDMARead, SGL: []abi.SGE{r.aMR.SGE(8<<10, 64)},
		RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey() + 1})
	checkWC(t, "READ with a forged rkey", wc, 20, abi.WRRDMARead, abi.WCRemAccessErr)
	allEvil(t, "READ destination", r.aBuf.Bytes()[8<<10:8<<10+64])
	r.victimUnaffected(t, v)

	a, v = r.attackV(t, r.aPD)
	wc = post(t, a, guestdriver.SendWR{WRID: 21, Opcode: abi.WRRDMAWrite,
		SGL:        []abi.SGE{{Addr: r.aMR.IOVA(), Length: 64, LKey: r.aMR.LKey() ^ 0x01}},
		RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey()})
	checkWC(t, "WRITE with a forged lkey", wc, 21, abi.WRRDMAWrite, abi.WCLocProtErr)
	expectEvent(t, r.a, abi.EventQPFatal, a.qp.Num(), abi.WCLocProtErr)
	r.victimUnaffected(t, v)
}

// Stale keys: V deregisters an MR whose rkey A holds; WRITE and READ with
// it fail. A's own deregistered lkey fails locally. The stale rkey is kept
// for the next subtest.
func (r *isoRig) staleAfterDereg(t *testing.T) {
	stale := r.regMR(t, r.vPD, r.slice(t, r.arena, staleOff, mrLen), abi.AccessAll)
	a, v := r.attackV(t, r.aPD)
	key := stale.RKey()
	if err := stale.Dereg(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.staleKey = key
	wc := post(t, a, guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR.SGE(0, 64)},
		RemoteAddr: stale.IOVA(), RKey: key})
	checkWC(t, "WRITE with a deregistered rkey", wc, 1, abi.WRRDMAWrite, abi.WCRemAccessErr)
	expectEvent(t, r.a, abi.EventQPAccessErr, a.qp.Num(), abi.WCRemAccessErr)
	r.victimUnaffected(t, v)

	a, v = r.attackV(t, r.aPD)
	wc = post(t, a, guestdriver.SendWR{WRID: 2, Opcode: abi.WRRDMARead, SGL: []abi.SGE{r.aMR.SGE(8<<10, 64)},
		RemoteAddr: stale.IOVA(), RKey: key})
	checkWC(t, "READ with a deregistered rkey", wc, 2, abi.WRRDMARead, abi.WCRemAccessErr)
	allEvil(t, "READ destination", r.aBuf.Bytes()[8<<10:8<<10+64])
	r.victimUnaffected(t, v)

	own := r.regMR(t, r.aPD, r.slice(t, r.aBuf, 16<<10, 4<<10), abi.AccessLocalWrite)
	lkey := own.LKey()
	if err := own.Dereg(r.ctx); err != nil {
		t.Fatal(err)
	}
	a, v = r.attackV(t, r.aPD)
	wc = post(t, a, guestdriver.SendWR{WRID: 3, Opcode: abi.WRRDMAWrite,
		SGL:        []abi.SGE{{Addr: own.IOVA(), Length: 64, LKey: lkey}},
		RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey()})
	checkWC(t, "WRITE from a deregistered lkey", wc, 3, abi.WRRDMAWrite, abi.WCLocProtErr)
	expectEvent(t, r.a, abi.EventQPFatal, a.qp.Num(), abi.WCLocProtErr)
	r.victimUnaffected(t, v)
}

// Stale rkey after the slot is reused: V registers MRs until one takes
// the deregistered MR's key slot, with a new tag (V's device has max_mr
// 64, and hands out never-used slots first). The old key reaches neither
// the old memory nor the new MR, and DEREG_MR with the old key does not
// remove the new MR. Runs after staleAfterDereg.
func (r *isoRig) staleAfterReuse(t *testing.T) {
	if r.staleKey == 0 {
		t.Fatal("needs the stale key of the DEREG_MR subtest")
	}
	var reused *guestdriver.MR
	var extra []*guestdriver.MR
	for reused == nil {
		mr, err := r.vPD.RegMR(r.ctx, r.slice(t, r.arena, reusedOff, mrLen), abi.AccessAll)
		if err != nil {
			t.Fatalf("REG_MR number %d after the stale key's: %v; slot %d never came back", len(extra)+1, err, r.staleKey>>8)
		}
		if mr.RKey()>>8 == r.staleKey>>8 {
			reused = mr
		} else {
			extra = append(extra, mr)
		}
	}
	for _, mr := range extra {
		if err := mr.Dereg(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if reused.RKey() == r.staleKey {
		t.Fatalf("slot %d reused with the same key %#x", r.staleKey>>8, r.staleKey)
	}
	t.Logf("stale key %#x; its slot came back as key %#x after %d other registrations", r.staleKey, reused.RKey(), len(extra))
	for i, addr := range []uint64{reused.IOVA(), r.arena.GPA + staleOff} {
		a, v := r.attackV(t, r.aPD)
		wc := post(t, a, guestdriver.SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR.SGE(0, 64)},
			RemoteAddr: addr, RKey: r.staleKey})
		checkWC(t, fmt.Sprintf("WRITE at %#x with the stale key of a reused slot", addr), wc, uint64(i), abi.WRRDMAWrite, abi.WCRemAccessErr)
		expectEvent(t, r.a, abi.EventQPAccessErr, a.qp.Num(), abi.WCRemAccessErr)
		r.victimUnaffected(t, v)
	}
	wantStatus(t, "DEREG_MR with the stale key", command(r.ctx, r.v, abi.OpDeregMR, &abi.HandleReq{Handle: r.staleKey}, nil), abi.StatusNotFound)
	// The new MR is alive and its key works.
	a, _ := r.attackV(t, r.aPD)
	wc := post(t, a, guestdriver.SendWR{WRID: 9, Opcode: abi.WRRDMAWrite, Signaled: true, SGL: []abi.SGE{r.aMR.SGE(0, 8)},
		RemoteAddr: reused.IOVA(), RKey: reused.RKey()})
	checkWC(t, "WRITE with the new key", wc, 9, abi.WRRDMAWrite, abi.WCSuccess)
	fillByte(r.want[reusedOff:reusedOff+8], evil)
}

// SGEs outside their MR: running past its end, starting before it, one
// byte too long, and a bad second SGE after a good first one (nothing of
// the first may land either).
func (r *isoRig) sgeOutsideMR(t *testing.T) {
	end := r.aMR.IOVA() + r.aMR.Len()
	lk := r.aMR.LKey()
	for i, sgl := range [][]abi.SGE{
		{{Addr: end - 8, Length: 16, LKey: lk}},
		{{Addr: r.aMR.IOVA() - 8, Length: 16, LKey: lk}},
		{{Addr: r.aMR.IOVA(), Length: uint32(r.aMR.Len()) + 1, LKey: lk}},
		{r.aMR.SGE(0, 64), {Addr: end, Length: 8, LKey: lk}},
	} {
		a, v := r.attackV(t, r.aPD)
		wc := post(t, a, guestdriver.SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, SGL: sgl,
			RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey()})
		checkWC(t, fmt.Sprintf("WRITE with SGL %+v outside [%#x, %#x)", sgl, r.aMR.IOVA(), end), wc, uint64(i), abi.WRRDMAWrite, abi.WCLocProtErr)
		expectEvent(t, r.a, abi.EventQPFatal, a.qp.Num(), abi.WCLocProtErr)
		r.victimUnaffected(t, v)
	}
	// A READ whose destination runs past the MR: V's data lands nowhere.
	a, v := r.attackV(t, r.aPD)
	wc := post(t, a, guestdriver.SendWR{WRID: 9, Opcode: abi.WRRDMARead, SGL: []abi.SGE{{Addr: end - 8, Length: 16, LKey: lk}},
		RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey()})
	checkWC(t, "READ into an SGE past its MR", wc, 9, abi.WRRDMARead, abi.WCLocProtErr)
	allEvil(t, "the MR's last bytes", r.aBuf.Bytes()[r.aBuf.Len()-8:])
	r.victimUnaffected(t, v)
}

// Guest physical layout of A (3 GiB, q35): RAM at [0, 2 GiB) and
// [4 GiB, 5 GiB), the PCI hole between.
const (
	gib      = uint64(1) << 30
	aLowEnd  = 2 * gib
	aHighLo  = 4 * gib
	aHighEnd = 5 * gib
)

// REG_MR over memory that is not A's RAM: beyond it, in the q35 hole,
// straddling either edge of the hole or the end of RAM, wrapping. The
// pages at the edges are RAM and register.
func (r *isoRig) regMROutsideRAM(t *testing.T) {
	reg := func(addr, n uint64) (abi.RegMRResp, error) {
		var resp abi.RegMRResp
		err := command(r.ctx, r.a, abi.OpRegMR, &abi.RegMRReq{PDN: r.aPD.Num(), Access: abi.AccessLocalWrite | abi.AccessRemoteWrite,
			IOVA: 0x100000, Length: n, Addr: addr}, &resp)
		return resp, err
	}
	for _, c := range []struct {
		what    string
		addr, n uint64
	}{
		{"just beyond RAM", aHighEnd, 4096},
		{"far beyond RAM", 1 << 46, 4096},
		{"across the end of RAM", aHighEnd - 4096, 8192},
		{"at the start of the q35 hole", aLowEnd, 4096},
		{"inside the q35 hole", 3 * gib, 2 << 20},
		{"from low RAM into the hole", aLowEnd - 4096, 8192},
		{"from the hole into high RAM", aHighLo - 4096, 8192},
		{"across the whole hole", aLowEnd - 4096, aHighLo - aLowEnd + 8192},
		{"wrapping the address space", ^uint64(0) - 4095, 8192},
	} {
		_, err := reg(c.addr, c.n)
		wantStatus(t, fmt.Sprintf("REG_MR of %#x bytes at %#x (%s)", c.n, c.addr, c.what), err, abi.StatusBadAddress)
	}
	for _, addr := range []uint64{aLowEnd - 4096, aHighLo, aHighEnd - 4096} {
		resp, err := reg(addr, 4096)
		if err != nil {
			t.Fatalf("REG_MR of the RAM page at %#x: %v", addr, err)
		}
		if err := command(r.ctx, r.a, abi.OpDeregMR, &abi.HandleReq{Handle: resp.LKey}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// REG_MR whose page list names pages outside RAM, and whose page list
// itself lies outside RAM. A list of RAM pages (one low, one high)
// registers.
func (r *isoRig) pageListOutsideRAM(t *testing.T) {
	low := r.aBuf.GPA // a page of A's RAM
	for _, pages := range [][]uint64{
		{aHighEnd},
		{3 * gib},
		{aLowEnd},
		{low, aHighEnd},
		{low, aHighLo, 1 << 46},
	} {
		_, err := r.aPD.RegMRPages(r.ctx, 0x200000, uint64(len(pages))*4096, 12, pages, abi.AccessLocalWrite)
		wantStatus(t, fmt.Sprintf("REG_MR with pages %#x", pages), err, abi.StatusBadAddress)
	}
	for _, c := range []struct {
		what   string
		list   uint64
		npages uint32
	}{
		{"beyond RAM", aHighEnd, 1},
		{"in the q35 hole", 3 * gib, 1},
		{"across the start of the hole", aLowEnd - 8, 2},
	} {
		err := command(r.ctx, r.a, abi.OpRegMR, &abi.RegMRReq{PDN: r.aPD.Num(), Access: abi.AccessLocalWrite,
			IOVA: 0x200000, Length: uint64(c.npages) * 4096, Addr: c.list, PageShift: 12, NPages: c.npages}, nil)
		wantStatus(t, "REG_MR with its page list "+c.what, err, abi.StatusBadAddress)
	}
	mr, err := r.aPD.RegMRPages(r.ctx, 0x200000, 8192, 12, []uint64{low, aHighLo}, abi.AccessLocalWrite)
	if err != nil {
		t.Fatalf("REG_MR with RAM pages: %v", err)
	}
	if err := mr.Dereg(r.ctx); err != nil {
		t.Fatal(err)
	}
}

// CREATE_CQ, RESIZE_CQ and CREATE_QP with rings outside A's RAM.
func (r *isoRig) ringsOutsideRAM(t *testing.T) {
	const entries = 16
	cqBytes := uint64(entries * abi.CQESize)
	for _, ring := range []uint64{aHighEnd, 3 * gib, aLowEnd - cqBytes/2, aHighEnd - cqBytes/2, aHighLo - cqBytes/2} {
		err := command(r.ctx, r.a, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: ring, Entries: entries}, nil)
		wantStatus(t, fmt.Sprintf("CREATE_CQ with its ring at %#x", ring), err, abi.StatusBadAddress)
	}
	// High RAM is RAM: a ring there is fine.
	var cqr abi.CreateCQResp
	if err := command(r.ctx, r.a, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: aHighLo, Entries: entries}, &cqr); err != nil {
		t.Fatalf("CREATE_CQ in high RAM: %v", err)
	}
	if err := command(r.ctx, r.a, abi.OpDestroyCQ, &abi.HandleReq{Handle: cqr.CQN}, nil); err != nil {
		t.Fatal(err)
	}

	cq, err := r.a.Driver.CreateCQ(r.ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cq.Destroy(context.Background()); err != nil {
			t.Errorf("DESTROY_CQ %d: %v", cq.Num(), err)
		}
	})
	err = command(r.ctx, r.a, abi.OpResizeCQ, &abi.ResizeCQReq{CQN: cq.Num(), Entries: 2 * entries, RingAddr: 3 * gib}, nil)
	wantStatus(t, "RESIZE_CQ into the q35 hole", err, abi.StatusBadAddress)

	sqStride, rqStride := abi.SendWQEStride(1, 0), abi.RecvWQEStride(1)
	sqBytes, rqBytes := uint64(16*sqStride), uint64(16*rqStride)
	sq, err := r.a.VM.Alloc(sqBytes, uint64(sqStride))
	if err != nil {
		t.Fatal(err)
	}
	rq, err := r.a.VM.Alloc(rqBytes, uint64(rqStride))
	if err != nil {
		t.Fatal(err)
	}
	req := func(sqAddr, rqAddr uint64) *abi.CreateQPReq {
		return &abi.CreateQPReq{PDN: r.aPD.Num(), Type: abi.QPTypeRC, SendCQN: cq.Num(), RecvCQN: cq.Num(),
			SQSize: 16, RQSize: 16, MaxSendSGE: 1, MaxRecvSGE: 1, SQAddr: sqAddr, RQAddr: rqAddr}
	}
	for _, c := range []struct {
		what   string
		sq, rq uint64
	}{
		{"SQ beyond RAM", aHighEnd, rq},
		{"RQ beyond RAM", sq, aHighEnd},
		{"SQ in the q35 hole", 3 * gib, rq},
		{"RQ in the q35 hole", sq, 3 * gib},
		{"SQ across the start of the hole", aLowEnd - sqBytes/2, rq},
		{"RQ across the end of RAM", sq, aHighEnd - rqBytes/2},
	} {
		err := command(r.ctx, r.a, abi.OpCreateQP, req(c.sq, c.rq), nil)
		wantStatus(t, "CREATE_QP with its "+c.what, err, abi.StatusBadAddress)
	}
	// The same request with both rings in RAM creates the QP, and the CQ
	// the failed RESIZE_CQ left alone still serves it.
	var qpr abi.CreateQPResp
	if err := command(r.ctx, r.a, abi.OpCreateQP, req(sq, rq), &qpr); err != nil {
		t.Fatalf("CREATE_QP with rings in RAM: %v", err)
	}
	if err := command(r.ctx, r.a, abi.OpDestroyQP, &abi.HandleReq{Handle: qpr.QPN}, nil); err != nil {
		t.Fatal(err)
	}
}

// garbageWQE posts raw as a send WQE on a fresh QP of A connected to V
// and expects LOC_QP_OP_ERR and a QP_FATAL event for A's QP only.
func (r *isoRig) garbageWQE(t *testing.T, what string, raw []byte) {
	t.Helper()
	a, v := r.attackV(t, r.aPD)
	if err := a.qp.PostRawSend(raw); err != nil {
		t.Fatal(err)
	}
	wcs, err := pollWCs(a.cq, 1, opTimeout)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	wrid := binary.LittleEndian.Uint64(raw)
	if wcs[0].WRID != wrid || wcs[0].Status != abi.WCLocQPOpErr {
		t.Fatalf("%s: completion {wr %d %v}, want {wr %d %v}", what, wcs[0].WRID, wcs[0].Status, wrid, abi.WCLocQPOpErr)
	}
	expectEvent(t, r.a, abi.EventQPFatal, a.qp.Num(), abi.WCLocQPOpErr)
	if st := r.qpState(t, a); st != abi.QPStateErr {
		t.Fatalf("%s: A's QP in %v", what, st)
	}
	r.victimUnaffected(t, v)
}

// rawWrite is a send WQE header for an 8-byte WRITE into vExposed with
// num_sge SGEs of A's MR after it.
func (r *isoRig) rawWrite(wrid uint64, op abi.WROpcode, numSGE uint16) []byte {
	raw := make([]byte, abi.SendWQEHeaderSize+2*abi.SGESize)
	abi.SendWQE{WRID: wrid, Opcode: op, Flags: abi.SendSignaled, NumSGE: numSGE,
		RemoteAddr: r.vExposed.IOVA(), RKey: r.vExposed.RKey()}.Put(raw)
	r.aMR.SGE(0, 8).Put(raw[abi.SendWQEHeaderSize:])
	r.aMR.SGE(8, 8).Put(raw[abi.SendWQEHeaderSize+abi.SGESize:])
	return raw
}

// WQEs with opcodes the ABI does not define; everything else in them is a
// valid WRITE into V's exposed MR.
func (r *isoRig) garbageOpcode(t *testing.T) {
	for i, op := range []abi.WROpcode{0xee, 7, 0xff} {
		raw := r.rawWrite(uint64(0xbad0+i), op, 1)
		r.garbageWQE(t, fmt.Sprintf("opcode %#x", uint8(op)), raw)
	}
}

// WQEs with more SGEs than the QP takes (2): one more, and 0xffff, far
// past the slot.
func (r *isoRig) hugeSGECount(t *testing.T) {
	for i, n := range []uint16{3, 0xffff} {
		r.garbageWQE(t, fmt.Sprintf("num_sge %d", n), r.rawWrite(uint64(0x5e0+i), abi.WRRDMAWrite, n))
	}
}

// Writing into another device's doorbell page is impossible: A's and V's
// regions are different memfds. A overwrites its whole region (every
// record and its device page); V's records do not change, A's own QP
// fails with QP_FATAL, V's peer QP and traffic carry on, and a record V
// writes does not appear in A's region. A's guest broke only itself: a
// new QP of A works.
func (r *isoRig) doorbellPages(t *testing.T) {
	aDB, err := r.a.Driver.Doorbells()
	if err != nil {
		t.Fatal(err)
	}
	vDB, err := r.v.Driver.Doorbells()
	if err != nil {
		t.Fatal(err)
	}
	ia, pa := mappingOf(t, aDB.Bytes())
	iv, pv := mappingOf(t, vDB.Bytes())
	ir, _ := mappingOf(t, r.arena.Bytes())
	if ia == iv || iv == ir || !strings.Contains(pa, "memfd:") || !strings.Contains(pv, "memfd:") {
		t.Fatalf("doorbell mappings: A %q inode %d, V %q inode %d (V's RAM inode %d): want two distinct memfds", pa, ia, pv, iv, ir)
	}

	a, v := r.attackV(t, r.aPD)
	layout := r.v.Driver.Config().Doorbell
	maxQP := r.v.Driver.Limits().MaxQP
	busy := map[uint32]bool{ // V's records its traffic changes
		r.tr.v.qp.Num() - 2:          true,
		maxQP + r.tr.v.scq.Num() - 1: true,
		maxQP + r.tr.v.rcq.Num() - 1: true,
	}
	snapshot := func() []byte {
		var out []byte
		for i := range layout.Records {
			if busy[i] {
				continue
			}
			off, _ := layout.RecordOffset(i)
			out = append(out, vDB.Bytes()[off:off+uint64(layout.RecordSize)]...)
		}
		return out
	}
	before := snapshot()

	fillByte(aDB.Bytes(), 0xa5)
	if err := r.a.VM.Kick(abi.QueueWakeup); err != nil {
		t.Fatal(err)
	}
	// A's QP now has a producer index far past its ring.
	expectEvent(t, r.a, abi.EventQPFatal, a.qp.Num(), abi.WCLocQPOpErr)
	r.tr.waitRounds(t, 2)
	if i := firstDiff(snapshot(), before); i >= 0 {
		t.Fatalf("V's doorbell records changed at byte %d (of the idle records) after A wrote its region", i)
	}
	if i := bytes.Index(vDB.Bytes(), []byte{0xa5, 0xa5, 0xa5, 0xa5}); i >= 0 {
		t.Fatalf("A's doorbell bytes appear in V's region at offset %#x", i)
	}
	r.victimUnaffected(t, v)

	// The other way round: a free record of V's region, written by V.
	off, _ := layout.RecordOffset(layout.Records - 1)
	vDB.StoreUint32Release(off, 0x7e57)
	got := aDB.LoadUint32Acquire(off)
	vDB.StoreUint32Release(off, 0)
	if got != 0xa5a5a5a5 {
		t.Fatalf("A's region at %#x reads %#x after V wrote its own", off, got)
	}

	a, _ = r.attackV(t, r.aPD)
	wc := post(t, a, guestdriver.SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true, SGL: []abi.SGE{r.aMR.SGE(0, 128)},
		RemoteAddr: r.vLegit.IOVA() + 64, RKey: r.vLegit.RKey()})
	checkWC(t, "A's WRITE on a new QP", wc, 1, abi.WRRDMAWrite, abi.WCSuccess)
	fillByte(r.want[legitOff+64:legitOff+192], evil)
}

// DMA aimed at doorbell and IO memory. F's VMM lacks SHMEM, so F's driver
// registers a doorbell area in F's RAM (SET_DOORBELL_AREA), which becomes
// IO memory: REG_MR over any part of it, a page list naming it, and rings
// in it get BAD_ADDRESS; an MR right below it registers, but a WRITE from
// A that runs from that MR into the area, or lands just past it, gets
// REM_ACCESS_ERR, and F's own READ into an SGE that runs into the area
// gets LOC_PROT_ERR. In V, A's WRITE just past an exposed MR gets
// REM_ACCESS_ERR and the bytes after the MR stay V's.
func (r *isoRig) dmaAtIOMemory(t *testing.T) {
	f := r.f
	layout := f.Driver.Config().Doorbell
	ps, size := uint64(layout.PageSize), layout.Size()
	// Two pages of F's RAM right below where F's driver will put the
	// area (its first CQ sets it up, allocating straight from the VM).
	below, err := f.VM.Alloc(2*ps, ps)
	if err != nil {
		t.Fatal(err)
	}
	fpd := r.allocPD(t, f)
	fq, _ := r.qpOn(t, f, fpd)
	area := below + 2*ps
	off, _ := layout.RecordOffset(fq.Num() - 2)
	rec, err := f.VM.Memory().Translate(area+off, abi.DoorbellRecordSize)
	if err != nil {
		t.Fatal(err)
	}
	if &rec.Bytes()[0] != &fq.DoorbellRecord().Bytes()[0] {
		t.Fatalf("F's doorbell area is not at %#x", area)
	}
	pageBelow, err := f.VM.Memory().Translate(below, 2*ps)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pageBelow.Bytes() {
		pageBelow.Bytes()[i] = canary(i)
	}
	belowWant := append([]byte(nil), pageBelow.Bytes()...)

	regF := func(addr, n uint64) error {
		return command(r.ctx, f, abi.OpRegMR, &abi.RegMRReq{PDN: fpd.Num(), Access: abi.AccessLocalWrite | abi.AccessRemoteWrite,
			IOVA: addr, Length: n, Addr: addr}, &abi.RegMRResp{})
	}
	for _, c := range []struct {
		what    string
		addr, n uint64
	}{
		{"the area's first page", area, ps},
		{"the area's last page", area + size - ps, ps},
		{"the whole area", area, size},
		{"F's QP's doorbell record", area + off, abi.DoorbellRecordSize},
		{"RAM and the area's first page", below + ps, 2 * ps},
	} {
		wantStatus(t, "REG_MR over "+c.what, regF(c.addr, c.n), abi.StatusBadAddress)
	}
	_, err = fpd.RegMRPages(r.ctx, 0x100000, 2*ps, 12, []uint64{below, area}, abi.AccessLocalWrite)
	wantStatus(t, "REG_MR with a page list naming the area", err, abi.StatusBadAddress)
	err = command(r.ctx, f, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: area + ps, Entries: 16}, nil)
	wantStatus(t, "CREATE_CQ with its ring in the area", err, abi.StatusBadAddress)
	err = command(r.ctx, f, abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: below, Length: size}, nil)
	wantStatus(t, "a second SET_DOORBELL_AREA", err, abi.StatusBadState)

	fmr := r.regMR(t, fpd, guestdriver.Buffer{GPA: below, View: pageBelow}, abi.AccessAll)
	mrEnd := fmr.IOVA() + fmr.Len()
	for i, c := range []struct {
		what       string
		addr, size uint64
	}{
		{"from F's MR into the area", mrEnd - 8, 16},
		{"just past F's MR, at the area", mrEnd, 8},
	} {
		a, _ := r.pair(t, r.a, r.aPD, f, fpd)
		wc := post(t, a, guestdriver.SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR.SGE(0, uint32(c.size))},
			RemoteAddr: c.addr, RKey: fmr.RKey()})
		checkWC(t, "A's WRITE "+c.what, wc, uint64(i), abi.WRRDMAWrite, abi.WCRemAccessErr)
		expectEvent(t, r.a, abi.EventQPAccessErr, a.qp.Num(), abi.WCRemAccessErr)
	}
	fc, _ := r.pair(t, f, fpd, r.a, r.aPD)
	wc := post(t, fc, guestdriver.SendWR{WRID: 7, Opcode: abi.WRRDMARead, SGL: []abi.SGE{{Addr: mrEnd - 8, Length: 16, LKey: fmr.LKey()}},
		RemoteAddr: r.aMR.IOVA(), RKey: r.aMR.RKey()})
	checkWC(t, "F's READ into an SGE that runs into the area", wc, 7, abi.WRRDMARead, abi.WCLocProtErr)
	expectEvent(t, f, abi.EventQPFatal, fc.qp.Num(), abi.WCLocProtErr)

	areaView, err := f.VM.Memory().Translate(area, size)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(areaView.Bytes(), []byte{evil, evil, evil, evil}); i >= 0 {
		t.Fatalf("A's bytes in F's doorbell area at offset %#x", i)
	}
	if i := firstDiff(pageBelow.Bytes(), belowWant); i >= 0 {
		t.Fatalf("F's MR below the area changed at byte %#x", i)
	}

	for i, c := range []struct {
		what       string
		addr, size uint64
	}{
		{"across the end of V's MR", r.vExposed.IOVA() + mrLen - 8, 16},
		{"just past V's MR", r.vExposed.IOVA() + mrLen, 8},
	} {
		a, v := r.attackV(t, r.aPD)
		wc := post(t, a, guestdriver.SendWR{WRID: uint64(10 + i), Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{r.aMR.SGE(0, uint32(c.size))},
			RemoteAddr: c.addr, RKey: r.vExposed.RKey()})
		checkWC(t, "A's WRITE "+c.what, wc, uint64(10+i), abi.WRRDMAWrite, abi.WCRemAccessErr)
		expectEvent(t, r.a, abi.EventQPAccessErr, a.qp.Num(), abi.WCRemAccessErr)
		r.victimUnaffected(t, v)
	}
}

// Destroying a CQ that a QP uses (as send or as receive CQ) is BUSY, so
// is deallocating a PD with objects; both work once the users are gone.
func (r *isoRig) destroyCQInUse(t *testing.T) {
	scq, err := r.a.Driver.CreateCQ(r.ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := r.a.Driver.CreateCQ(r.ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	pd := r.allocPD(t, r.a)
	qp, err := pd.CreateQP(r.ctx, guestdriver.QPInit{SendCQ: scq, RecvCQ: rcq, Cap: guestdriver.QPCap{SQSize: 4, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "DESTROY_CQ of the send CQ", scq.Destroy(r.ctx), abi.StatusBusy)
	wantStatus(t, "DESTROY_CQ of the receive CQ", rcq.Destroy(r.ctx), abi.StatusBusy)
	wantStatus(t, "DEALLOC_PD of the QP's PD", pd.Dealloc(r.ctx), abi.StatusBusy)
	if st := r.qpState(t, conn{r.a, qp, scq}); st != abi.QPStateReset {
		t.Fatalf("QP after the refused destroys: %v", st)
	}
	if err := qp.Destroy(r.ctx); err != nil {
		t.Fatal(err)
	}
	for _, cq := range []*guestdriver.CQ{scq, rcq} {
		if err := cq.Destroy(r.ctx); err != nil {
			t.Fatalf("DESTROY_CQ %d once its QP is gone: %v", cq.Num(), err)
		}
	}
	if err := pd.Dealloc(r.ctx); err != nil {
		t.Fatalf("DEALLOC_PD once empty: %v", err)
	}
}

// Double destroy of a QP, CQ, MR, AH and PD: NOT_FOUND, and so is any
// later command naming them. The driver refuses to name a destroyed QP or
// CQ again (their numbers may be reused), so those go raw.
func (r *isoRig) doubleDestroy(t *testing.T) {
	ctx := r.ctx
	pd := r.allocPD(t, r.a)
	mr := r.regMR(t, pd, r.slice(t, r.aBuf, 32<<10, 4<<10), abi.AccessLocalWrite)
	ah, err := pd.CreateAH(ctx, abi.AHAttr{DGID: r.v.Driver.GID(), HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	cq, err := r.a.Driver.CreateCQ(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: cq, RecvCQ: cq, Cap: guestdriver.QPCap{SQSize: 4, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qpn, cqn := qp.Num(), cq.Num()

	if err := qp.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := qp.Destroy(ctx); !errors.Is(err, guestdriver.ErrDestroyed) {
		t.Fatalf("driver's second QP.Destroy: %v", err)
	}
	for range 2 {
		wantStatus(t, "second DESTROY_QP", command(ctx, r.a, abi.OpDestroyQP, &abi.HandleReq{Handle: qpn}, nil), abi.StatusNotFound)
	}
	wantStatus(t, "QUERY_QP of the destroyed QP", command(ctx, r.a, abi.OpQueryQP, &abi.HandleReq{Handle: qpn}, nil), abi.StatusNotFound)
	wantStatus(t, "MODIFY_QP of the destroyed QP", command(ctx, r.a, abi.OpModifyQP,
		&abi.ModifyQPReq{QPN: qpn, AttrMask: abi.QPAttrState, Attr: abi.QPAttr{State: abi.QPStateErr}}, nil), abi.StatusNotFound)

	if err := cq.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(ctx); !errors.Is(err, guestdriver.ErrDestroyed) {
		t.Fatalf("driver's second CQ.Destroy: %v", err)
	}
	for range 2 {
		wantStatus(t, "second DESTROY_CQ", command(ctx, r.a, abi.OpDestroyCQ, &abi.HandleReq{Handle: cqn}, nil), abi.StatusNotFound)
	}

	if err := mr.Dereg(ctx); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "second DEREG_MR", mr.Dereg(ctx), abi.StatusNotFound)
	if err := ah.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "second DESTROY_AH", ah.Destroy(ctx), abi.StatusNotFound)
	if err := pd.Dealloc(ctx); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "second DEALLOC_PD", pd.Dealloc(ctx), abi.StatusNotFound)
}

// A third QP (A's) connected to V's QP that is connected to B: WRITE,
// SEND and READ are never answered (RETRY_EXC_ERR after one ~1 ms retry);
// V's memory and receive queue are untouched (the traffic would see a
// stolen receive). A cannot take B's GID to look like B either.
func (r *isoRig) thirdQP(t *testing.T) {
	tv := &r.tr.v
	for i, op := range []abi.WROpcode{abi.WRRDMAWrite, abi.WRSend, abi.WRRDMARead, abi.WRAtomicFetchAdd} {
		aq, acq := r.qpOn(t, r.a, r.aPD)
		if err := aq.Connect(r.ctx, fastConn(aq, tv.qp.Endpoint())); err != nil {
			t.Fatal(err)
		}
		wr := guestdriver.SendWR{WRID: uint64(i), Opcode: op, SGL: []abi.SGE{r.aMR.SGE(24<<10, 64)},
			RemoteAddr: tv.dstMR.IOVA() + trafficUsed, RKey: tv.dstMR.RKey(), CompareAdd: 1}
		if op.IsAtomic() {
			wr.SGL[0].Length = 8
		}
		wc := post(t, conn{r.a, aq, acq}, wr)
		checkWC(t, fmt.Sprintf("%v into V's QP connected to B", op), wc, uint64(i), op, abi.WCRetryExcErr)
		expectEvent(t, r.a, abi.EventQPFatal, aq.Num(), abi.WCRetryExcErr)
		allEvil(t, "A's buffer", r.aBuf.Bytes()[24<<10:24<<10+64])
	}
	wantStatus(t, "ADD_GID of B's GID on A", r.a.Driver.AddGID(r.ctx, 1, r.b.Driver.GID()), abi.StatusPermission)
}

// A command flood from A: thousands of bad commands of every kind, from
// two goroutines, each answered with its exact status, while V's traffic
// runs and V's own commands are answered. Then A exhausts its PDs (a
// limit of A's device, not V's) and recovers.
func (r *isoRig) commandFlood(t *testing.T) {
	const n = 4000
	hole := 3 * gib
	bad := []struct {
		op   abi.Opcode
		req  any
		want abi.Status
	}{
		{999, nil, abi.StatusInvalidOpcode},
		{0, nil, abi.StatusInvalidOpcode},
		{abi.OpRegMR, make([]byte, 7), abi.StatusInvalidArgument},
		{abi.OpAllocPD, make([]byte, 8), abi.StatusInvalidArgument},
		{abi.OpDestroyQP, &abi.HandleReq{Handle: 5, Reserved: 1}, abi.StatusInvalidArgument},
		{abi.OpDestroyQP, &abi.HandleReq{Handle: 0xfffff0}, abi.StatusNotFound},
		{abi.OpDestroyCQ, &abi.HandleReq{Handle: 0xfff0}, abi.StatusNotFound},
		{abi.OpDeregMR, &abi.HandleReq{Handle: 0xfff007}, abi.StatusNotFound},
		{abi.OpDeallocPD, &abi.HandleReq{Handle: 0xfff0}, abi.StatusNotFound},
		{abi.OpDestroyAH, &abi.HandleReq{Handle: 0xfff0}, abi.StatusNotFound},
		{abi.OpQueryQP, &abi.HandleReq{Handle: 0xfff0}, abi.StatusNotFound},
		{abi.OpModifyQP, &abi.ModifyQPReq{QPN: 0xfff0, AttrMask: abi.QPAttrState, Attr: abi.QPAttr{State: abi.QPStateErr}}, abi.StatusNotFound},
		{abi.OpRegMR, &abi.RegMRReq{PDN: r.aPD.Num(), Access: abi.AccessLocalWrite, IOVA: 0x1000, Length: 4096, Addr: aHighEnd}, abi.StatusBadAddress},
		{abi.OpRegMR, &abi.RegMRReq{PDN: r.aPD.Num(), Access: abi.AccessLocalWrite, IOVA: 0x1000, Length: 4096, Addr: hole}, abi.StatusBadAddress},
		{abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: hole, Entries: 16}, abi.StatusBadAddress},
		{abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: r.aBuf.GPA, Length: 1 << 20}, abi.StatusBadState},
	}
	before := r.tr.rounds.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	done := make(chan struct{})
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 2 {
				c := bad[i%len(bad)]
				if err := command(r.ctx, r.a, c.op, c.req, nil); !errors.Is(err, c.want) {
					errs <- fmt.Errorf("flood command %d (%v): got %v, want %v", i, c.op, err, c.want)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	// V's control path answers meanwhile.
	vCmds := 0
	for flooding := true; flooding; {
		select {
		case <-done:
			flooding = false
		default:
		}
		if _, err := r.v.Driver.QueryDevice(r.ctx); err != nil {
			t.Fatalf("V's QUERY_DEVICE during the flood: %v", err)
		}
		pd := r.allocPD(t, r.v)
		if err := pd.Dealloc(r.ctx); err != nil {
			t.Fatalf("V's DEALLOC_PD during the flood: %v", err)
		}
		vCmds += 3
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if during := r.tr.rounds.Load() - before; during < 2 {
		t.Fatalf("V's traffic made %d rounds during a flood of %d commands", during, n)
	}
	t.Logf("%d bad commands from A; meanwhile V ran %d commands and %d traffic rounds", n, vCmds, r.tr.rounds.Load()-before)

	// Exhaustion: A allocates PDs until its device says NO_RESOURCES.
	maxPD := int(r.a.Driver.Limits().MaxPD)
	var pds []*guestdriver.PD
	for {
		pd, err := r.a.Driver.AllocPD(r.ctx)
		if err != nil {
			wantStatus(t, fmt.Sprintf("ALLOC_PD number %d", len(pds)+3), err, abi.StatusNoResources)
			break
		}
		pds = append(pds, pd)
		if len(pds) > maxPD {
			t.Fatalf("%d PDs allocated on a device with max_pd %d", len(pds), maxPD)
		}
	}
	// A holds aPD and aPD2; every other PD it made has been freed.
	if len(pds) != maxPD-2 {
		t.Fatalf("A got %d more PDs before NO_RESOURCES, want %d (max_pd %d less A's 2)", len(pds), maxPD-2, maxPD)
	}
	vpd := r.allocPD(t, r.v) // V's device has limits of its own
	if err := vpd.Dealloc(r.ctx); err != nil {
		t.Fatal(err)
	}
	for _, pd := range pds {
		if err := pd.Dealloc(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
	pd := r.allocPD(t, r.a)
	if err := pd.Dealloc(r.ctx); err != nil {
		t.Fatal(err)
	}
}
