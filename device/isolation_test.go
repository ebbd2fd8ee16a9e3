package device

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestTwoDevicesAreIsolated: two VMs on one daemon (one fabric). Each
// device has its own doorbell memfd (different inodes, and a doorbell
// rung in one VM's mapping is not visible in the other's), and handles are
// per device: the same numbers name different objects, and one guest's
// commands cannot touch the other's objects.
func TestTwoDevicesAreIsolated(t *testing.T) {
	fab := sharedFabric()
	da := newDevice(t, Config{Name: "vm-a", Fabric: fab})
	db := newDevice(t, Config{Name: "vm-b", Fabric: fab})
	ga, gb := startVM(t, da, vmOpts{}), startVM(t, db, vmOpts{})

	// Separate files.
	var sa, sb unix.Stat_t
	if err := unix.Fstat(da.DoorbellRegion().Fd(), &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(db.DoorbellRegion().Fd(), &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Ino == sb.Ino && sa.Dev == sb.Dev {
		t.Fatal("the two devices share a doorbell file")
	}
	// Each VM's SHMEM mapping is its own device's region.
	layout := da.DoorbellLayout()
	off, _ := layout.RecordOffset(0)
	va, err := ga.vm.ShmemMapped(abi.DoorbellShmID, off, 64)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := gb.vm.ShmemMapped(abi.DoorbellShmID, off, 64)
	if err != nil {
		t.Fatal(err)
	}
	va.StoreUint32Release(0, 0xa11ce)
	if got := da.DoorbellRegion().View().LoadUint32Acquire(off); got != 0xa11ce {
		t.Fatalf("device A sees %#x", got)
	}
	if got := vb.LoadUint32Acquire(0); got != 0 {
		t.Fatalf("VM B's doorbell page shows VM A's write: %#x", got)
	}
	if got := db.DoorbellRegion().View().LoadUint32Acquire(off); got != 0 {
		t.Fatalf("device B's region shows VM A's write: %#x", got)
	}
	vb.StoreUint32Release(0, 0xb0b)
	if got := va.LoadUint32Acquire(0); got != 0xa11ce {
		t.Fatalf("VM B's write reached VM A: %#x", got)
	}
	va.StoreUint32Release(0, 0)
	vb.StoreUint32Release(0, 0)

	// Same handles, different objects.
	pa, pb := ga.allocPD(), gb.allocPD()
	if pa != pb {
		t.Fatalf("PDNs %d %d", pa, pb)
	}
	keyA, _ := ga.regMR(pa, abi.AccessLocalWrite, 4096)
	cqA := ga.createCQ(4)
	qpA := ga.createQP(pa, cqA.CQN, cqA.CQN)
	// B names A's objects: none of them exist on B.
	gb.want(abi.StatusNotFound, abi.OpDeregMR, &abi.HandleReq{Handle: keyA})
	gb.want(abi.StatusNotFound, abi.OpDestroyQP, &abi.HandleReq{Handle: qpA.QPN})
	gb.want(abi.StatusNotFound, abi.OpQueryQP, &abi.HandleReq{Handle: qpA.QPN})
	gb.want(abi.StatusNotFound, abi.OpDestroyCQ, &abi.HandleReq{Handle: cqA.CQN})
	gb.want(abi.StatusNotFound, abi.OpCreateQP, gb.qpReq(pb, cqA.CQN, cqA.CQN))
	// B's PD 1 is empty, A's is busy.
	gb.must(abi.OpDeallocPD, &abi.HandleReq{Handle: pb}, nil)
	ga.want(abi.StatusBusy, abi.OpDeallocPD, &abi.HandleReq{Handle: pa})
	if o := da.Objects(); o.PDs != 1 || o.MRs != 1 || o.QPs != 1 || o.CQs != 1 {
		t.Fatalf("A's objects after B's commands: %+v", o)
	}
	// B resetting does not touch A.
	gb.must(abi.OpResetState, nil, nil)
	if o := da.Objects(); o.PDs != 1 || o.MRs != 1 || o.QPs != 1 || o.CQs != 1 {
		t.Fatalf("A's objects after B's reset: %+v", o)
	}
	// A guest physical address means the guest's own RAM: the same GPA
	// registered by B covers B's memory, not A's. (48 MiB: above what the
	// test allocators hand out.)
	const gpa = 48 << 20
	copy(ga.bytes(gpa, 4), "AAAA")
	copy(gb.bytes(gpa, 4), "BBBB")
	var r abi.RegMRResp
	gb.must(abi.OpRegMR, &abi.RegMRReq{PDN: gb.allocPD(), IOVA: gpa, Length: 4096, Addr: gpa}, &r)
	if got, err := translate(t, db, r.LKey, 1, gpa, 4); err != nil || string(got) != "BBBB" {
		t.Fatalf("B's MR reads %q %v", got, err)
	}
}

// connect moves q through INIT, RTR and RTS towards (dgid, dqpn).
func (g *vmGuest) connect(qpn uint32, dgid abi.GID, dqpn uint32, access abi.Access) {
	g.t.Helper()
	g.must(abi.OpModifyQP, &abi.ModifyQPReq{QPN: qpn, AttrMask: abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags,
		Attr: abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: access}}, nil)
	g.must(abi.OpModifyQP, &abi.ModifyQPReq{QPN: qpn,
		AttrMask: abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN | abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer,
		Attr:     abi.QPAttr{State: abi.QPStateRTR, PathMTU: abi.MTU4096, DestQPN: dqpn, MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: abi.AHAttr{DGID: dgid, Port: 1}}}, nil)
	g.must(abi.OpModifyQP, &abi.ModifyQPReq{QPN: qpn,
		AttrMask: abi.QPAttrState | abi.QPAttrSQPSN | abi.QPAttrMaxQPRdAtomic | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry | abi.QPAttrTimeout,
		Attr:     abi.QPAttr{State: abi.QPStateRTS, MaxRdAtomic: 1, RetryCnt: 1, RNRRetry: 1, Timeout: 14}}, nil)
}

// doorbell is the guest's view of doorbell record i (shared memory mode).
func (g *vmGuest) doorbell(i uint32) guestmem.View {
	g.t.Helper()
	off, ok := g.d.DoorbellLayout().RecordOffset(i)
	if !ok {
		g.t.Fatalf("no doorbell record %d", i)
	}
	v, err := g.vm.ShmemMapped(abi.DoorbellShmID, off, abi.DoorbellRecordSize)
	if err != nil {
		g.t.Fatal(err)
	}
	return v
}

// ring tells the engine about new send WQEs: store sq_prod, then kick the
// wake-up queue if the engine said it is idle.
func (g *vmGuest) ringSQ(db uint32, prod uint32) {
	g.t.Helper()
	g.doorbell(db).StoreUint32Release(abi.QPDoorbellOffSQProd, prod)
	page, err := g.vm.ShmemMapped(abi.DoorbellShmID, 0, 8)
	if err != nil {
		g.t.Fatal(err)
	}
	if page.LoadUint32Acquire(abi.DevPageOffEngineFlags)&abi.EngineIdle != 0 {
		if err := g.vm.Kick(abi.QueueWakeup); err != nil {
			g.t.Fatal(err)
		}
	}
}

// pollCQ waits for CQE number n (0-based) of the CQ and decodes it.
func (g *vmGuest) pollCQ(cq abi.CreateCQResp, ring uint64, entries, n uint32) abi.CQE {
	g.t.Helper()
	rec := g.doorbell(cq.DoorbellIndex)
	wait.For(g.t, "a completion", func() bool { return int32(rec.LoadUint32Acquire(abi.CQDoorbellOffProd)-n) > 0 })
	c := abi.DecodeCQE(g.bytes(ring+uint64(n%entries)*abi.CQESize, abi.CQESize))
	rec.StoreUint32Release(abi.CQDoorbellOffCons, n+1)
	return c
}

// TestCrossPDMROnTheDataPath: an MR registered in one PD cannot be used
// by a QP of another PD, not even on the QP's own device; the same WQE
// with an MR of the QP's PD succeeds. Forged and stale lkeys fail too.
func TestCrossPDMROnTheDataPath(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	pd1, pd2 := g.allocPD(), g.allocPD()
	other, _ := g.regMR(pd1, abi.AccessLocalWrite, 4096)
	own, src := g.regMR(pd2, abi.AccessLocalWrite, 4096)
	dst, dstGPA := g.regMR(pd2, abi.AccessLocalWrite|abi.AccessRemoteWrite, 4096)
	stale, _ := g.regMR(pd2, abi.AccessLocalWrite, 4096)
	g.must(abi.OpDeregMR, &abi.HandleReq{Handle: stale}, nil)
	copy(g.bytes(src, 8), "payload!")

	const entries = 16
	ringGPA := g.cqRing(entries)
	var cq abi.CreateCQResp
	g.must(abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: ringGPA, Entries: entries}, &cq)
	req := g.qpReq(pd2, cq.CQN, cq.CQN)
	var q abi.CreateQPResp
	g.must(abi.OpCreateQP, req, &q)
	g.connect(q.QPN, d.GID(), q.QPN, abi.AccessLocalWrite|abi.AccessRemoteWrite)

	post := func(i uint32, lkey uint32) abi.CQE {
		t.Helper()
		slot := g.bytes(req.SQAddr+uint64(i%req.SQSize)*uint64(q.SQStride), uint64(q.SQStride))
		abi.SendWQE{WRID: uint64(100 + i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, NumSGE: 1,
			RemoteAddr: dstGPA, RKey: dst}.Put(slot)
		abi.SGE{Addr: src, Length: 8, LKey: lkey}.Put(slot[abi.SendWQEHeaderSize:])
		g.ringSQ(q.DoorbellIndex, i+1)
		return g.pollCQ(cq, ringGPA, entries, i)
	}
	if c := post(0, own); c.Status != abi.WCSuccess || c.WRID != 100 || !bytes.Equal(g.bytes(dstGPA, 8), []byte("payload!")) {
		t.Fatalf("WRITE with the QP's own MR: %+v, destination %q", c, g.bytes(dstGPA, 8))
	}
	copy(g.bytes(dstGPA, 8), "untouch!")
	if c := post(1, other); c.Status != abi.WCLocProtErr || c.WRID != 101 {
		t.Fatalf("WRITE with another PD's MR: %+v", c)
	}
	if string(g.bytes(dstGPA, 8)) != "untouch!" {
		t.Fatal("cross-PD WRITE moved data")
	}
	// The QP is in ERR now; stale and forged keys are checked by the same
	// translation (TestRegMRContiguous), and the table says so directly.
	if _, err := translate(t, d, stale, pd2, src, 8); err == nil {
		t.Fatal("stale lkey translates")
	}
}
