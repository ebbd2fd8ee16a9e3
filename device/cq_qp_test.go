package device

import (
	"testing"

	"github.com/vstellar/vstellar/virtio/abi"
)

func TestCQ(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxQP: 100, MaxCQ: 3, MaxCQE: 256}})
	g := startVM(t, d, vmOpts{})
	c1 := g.createCQ(16)
	if c1.CQN != 1 || c1.DoorbellIndex != 100 {
		t.Fatalf("first CQ %+v (doorbell must be MaxQP + cqn-1)", c1)
	}
	c2 := g.createCQ(256)
	if c2.CQN != 2 || c2.DoorbellIndex != 101 {
		t.Fatalf("second CQ %+v", c2)
	}
	ring := g.cqRing(4)
	ram := uint64(64 << 20)
	for _, c := range []struct {
		name string
		req  abi.CreateCQReq
		want abi.Status
	}{
		{"zero entries", abi.CreateCQReq{RingAddr: ring, Entries: 0}, abi.StatusInvalidArgument},
		{"not a power of two", abi.CreateCQReq{RingAddr: ring, Entries: 3}, abi.StatusInvalidArgument},
		{"over max_cqe", abi.CreateCQReq{RingAddr: ring, Entries: 512}, abi.StatusInvalidArgument},
		{"flags", abi.CreateCQReq{RingAddr: ring, Entries: 4, Flags: 1}, abi.StatusInvalidArgument},
		{"ring outside guest RAM", abi.CreateCQReq{RingAddr: ram, Entries: 4}, abi.StatusBadAddress},
		{"ring straddles the end of RAM", abi.CreateCQReq{RingAddr: ram - 64, Entries: 4}, abi.StatusBadAddress},
		{"ring in the PCI hole", abi.CreateCQReq{RingAddr: 3 << 30, Entries: 4}, abi.StatusBadAddress},
		{"ring wraps", abi.CreateCQReq{RingAddr: ^uint64(0) &^ 31, Entries: 4}, abi.StatusBadAddress},
		{"misaligned ring", abi.CreateCQReq{RingAddr: ring + 8, Entries: 4}, abi.StatusInvalidArgument},
	} {
		if st := g.do(abi.OpCreateCQ, &c.req, nil); st != c.want {
			t.Errorf("%s: %v, want %v", c.name, st, c.want)
		}
	}
	if n := d.Objects().CQs; n != 2 {
		t.Fatalf("%d CQs after failed creates", n)
	}
	c3 := g.createCQ(4)
	g.want(abi.StatusNoResources, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: ring, Entries: 4})
	if n := d.Objects().CQs; n != 3 {
		t.Fatalf("%d CQs at the limit", n)
	}

	// RESIZE_CQ.
	g.must(abi.OpResizeCQ, &abi.ResizeCQReq{CQN: c1.CQN, Entries: 64, RingAddr: g.cqRing(64)}, nil)
	g.want(abi.StatusNotFound, abi.OpResizeCQ, &abi.ResizeCQReq{CQN: 9, Entries: 64, RingAddr: g.cqRing(64)})
	g.want(abi.StatusInvalidArgument, abi.OpResizeCQ, &abi.ResizeCQReq{CQN: c1.CQN, Entries: 48, RingAddr: g.cqRing(64)})
	g.want(abi.StatusBadAddress, abi.OpResizeCQ, &abi.ResizeCQReq{CQN: c1.CQN, Entries: 64, RingAddr: ram})

	// DESTROY_CQ: busy while a QP uses it; double destroy; forged CQNs.
	pdn := g.allocPD()
	qp := g.createQP(pdn, c2.CQN, c3.CQN)
	g.want(abi.StatusBusy, abi.OpDestroyCQ, &abi.HandleReq{Handle: c2.CQN})
	g.want(abi.StatusBusy, abi.OpDestroyCQ, &abi.HandleReq{Handle: c3.CQN})
	g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: c1.CQN}, nil)
	g.want(abi.StatusNotFound, abi.OpDestroyCQ, &abi.HandleReq{Handle: c1.CQN})
	for _, h := range []uint32{0, 4, 0xffffffff} {
		g.want(abi.StatusNotFound, abi.OpDestroyCQ, &abi.HandleReq{Handle: h})
	}
	g.must(abi.OpDestroyQP, &abi.HandleReq{Handle: qp.QPN}, nil)
	g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: c2.CQN}, nil)
	g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: c3.CQN}, nil)
	g.must(abi.OpDeallocPD, &abi.HandleReq{Handle: pdn}, nil)
	if o := d.Objects(); o.CQs != 0 || o.QPs != 0 || o.PDs != 0 {
		t.Fatalf("objects %+v", o)
	}
}

func TestCreateQP(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxQP: 2, MaxQPWR: 64, MaxSGE: 4, MaxInlineData: 128}})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	cq := g.createCQ(16)
	var q abi.CreateQPResp
	req := g.qpReq(pdn, cq.CQN, cq.CQN)
	g.must(abi.OpCreateQP, req, &q)
	want := abi.CreateQPResp{QPN: 2, DoorbellIndex: 0, SQStride: abi.SendWQEStride(2, 64), RQStride: abi.RecvWQEStride(2)}
	if q != want {
		t.Fatalf("CREATE_QP %+v, want %+v", q, want)
	}

	ram := uint64(64 << 20)
	bad := func(name string, mut func(*abi.CreateQPReq), want abi.Status) {
		t.Helper()
		r := *g.qpReq(pdn, cq.CQN, cq.CQN)
		mut(&r)
		if st := g.do(abi.OpCreateQP, &r, nil); st != want {
			t.Errorf("%s: %v, want %v", name, st, want)
		}
	}
	bad("UD", func(r *abi.CreateQPReq) { r.Type = abi.QPTypeUD }, abi.StatusNotSupported)
	bad("unknown type", func(r *abi.CreateQPReq) { r.Type = 3 }, abi.StatusInvalidArgument)
	bad("sq_sig_all 2", func(r *abi.CreateQPReq) { r.SigAll = 2 }, abi.StatusInvalidArgument)
	bad("no PD", func(r *abi.CreateQPReq) { r.PDN = 5 }, abi.StatusNotFound)
	bad("no send CQ", func(r *abi.CreateQPReq) { r.SendCQN = 5 }, abi.StatusNotFound)
	bad("no receive CQ", func(r *abi.CreateQPReq) { r.RecvCQN = 0 }, abi.StatusNotFound)
	bad("SQ not a power of two", func(r *abi.CreateQPReq) { r.SQSize = 3 }, abi.StatusInvalidArgument)
	bad("RQ of zero", func(r *abi.CreateQPReq) { r.RQSize = 0 }, abi.StatusInvalidArgument)
	bad("SQ over max_qp_wr", func(r *abi.CreateQPReq) { r.SQSize = 128 }, abi.StatusInvalidArgument)
	bad("too many send SGEs", func(r *abi.CreateQPReq) { r.MaxSendSGE = 5 }, abi.StatusInvalidArgument)
	bad("too many receive SGEs", func(r *abi.CreateQPReq) { r.MaxRecvSGE = 5 }, abi.StatusInvalidArgument)
	bad("too much inline data", func(r *abi.CreateQPReq) { r.MaxInlineData = 129 }, abi.StatusInvalidArgument)
	bad("SQ outside guest RAM", func(r *abi.CreateQPReq) { r.SQAddr = ram }, abi.StatusBadAddress)
	bad("RQ outside guest RAM", func(r *abi.CreateQPReq) { r.RQAddr = ram }, abi.StatusBadAddress)
	bad("SQ in the PCI hole", func(r *abi.CreateQPReq) { r.SQAddr = 3 << 30 }, abi.StatusBadAddress)
	bad("RQ straddles the end of RAM", func(r *abi.CreateQPReq) { r.RQAddr = ram - 64 }, abi.StatusBadAddress)
	bad("misaligned SQ", func(r *abi.CreateQPReq) { r.SQAddr += 8 }, abi.StatusInvalidArgument)
	bad("reserved", func(r *abi.CreateQPReq) { r.Reserved0 = 1 }, abi.StatusInvalidArgument)
	bad("no SRQ", func(r *abi.CreateQPReq) { r.SRQN = 1; r.RQSize, r.MaxRecvSGE, r.RQAddr = 0, 0, 0 }, abi.StatusNotFound)
	if n := d.Objects().QPs; n != 1 {
		t.Fatalf("%d QPs after failed creates", n)
	}
	g.createQP(pdn, cq.CQN, cq.CQN)
	g.want(abi.StatusNoResources, abi.OpCreateQP, g.qpReq(pdn, cq.CQN, cq.CQN))
}

func TestModifyQueryDestroyQP(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	cq := g.createCQ(16)
	q := g.createQP(pdn, cq.CQN, cq.CQN)

	var qr abi.QueryQPResp
	g.must(abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN}, &qr)
	if qr.Attr.State != abi.QPStateReset || qr.Cap.PDN != pdn || qr.Cap.SendCQN != cq.CQN || qr.Cap.SQSize != 4 ||
		qr.Cap.MaxSendSGE != 2 || qr.Cap.MaxInlineData != 64 || qr.Cap.Type != abi.QPTypeRC {
		t.Fatalf("QUERY_QP after create: %+v", qr)
	}
	toInit := abi.ModifyQPReq{QPN: q.QPN, AttrMask: abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags,
		Attr: abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: abi.AccessLocalWrite | abi.AccessRemoteWrite}}
	// What the device checks itself: port, P_Key index, address vector.
	bad := toInit
	bad.Attr.Port = 2
	g.want(abi.StatusInvalidArgument, abi.OpModifyQP, &bad)
	bad = toInit
	bad.Attr.PKeyIndex = 1
	g.want(abi.StatusInvalidArgument, abi.OpModifyQP, &bad)
	bad = toInit
	bad.AttrMask |= 1 << 30
	g.want(abi.StatusInvalidArgument, abi.OpModifyQP, &bad)
	bad = toInit
	bad.QPN = 77
	g.want(abi.StatusNotFound, abi.OpModifyQP, &bad)
	// What the engine checks: the state machine.
	rts := abi.ModifyQPReq{QPN: q.QPN, AttrMask: abi.QPAttrState, Attr: abi.QPAttr{State: abi.QPStateRTS}}
	g.want(abi.StatusBadState, abi.OpModifyQP, &rts)
	g.must(abi.OpModifyQP, &toInit, nil)
	g.must(abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN}, &qr)
	if qr.Attr.State != abi.QPStateInit {
		t.Fatalf("state %v after RESET->INIT", qr.Attr.State)
	}
	toRTR := abi.ModifyQPReq{QPN: q.QPN,
		AttrMask: abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN | abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer,
		Attr:     abi.QPAttr{State: abi.QPStateRTR, PathMTU: abi.MTU4096, DestQPN: q.QPN, MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: abi.AHAttr{DGID: d.GID(), Port: 1}}}
	badAV := toRTR
	badAV.Attr.AH.SGIDIndex = 5
	g.want(abi.StatusInvalidArgument, abi.OpModifyQP, &badAV)
	badAV = toRTR
	badAV.Attr.AH.Port = 3
	g.want(abi.StatusInvalidArgument, abi.OpModifyQP, &badAV)
	g.must(abi.OpModifyQP, &toRTR, nil)
	toRTS := abi.ModifyQPReq{QPN: q.QPN,
		AttrMask: abi.QPAttrState | abi.QPAttrSQPSN | abi.QPAttrMaxQPRdAtomic | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry | abi.QPAttrTimeout,
		Attr:     abi.QPAttr{State: abi.QPStateRTS, MaxRdAtomic: 1, RetryCnt: 7, RNRRetry: 7, Timeout: 14}}
	g.must(abi.OpModifyQP, &toRTS, nil)
	g.must(abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN}, &qr)
	if qr.Attr.State != abi.QPStateRTS || qr.Attr.DestQPN != q.QPN || qr.Attr.PathMTU != abi.MTU4096 {
		t.Fatalf("after RTS: %+v", qr.Attr)
	}

	g.want(abi.StatusNotFound, abi.OpQueryQP, &abi.HandleReq{Handle: 0})
	g.want(abi.StatusNotFound, abi.OpQueryQP, &abi.HandleReq{Handle: 1})
	g.want(abi.StatusBusy, abi.OpDeallocPD, &abi.HandleReq{Handle: pdn})
	g.want(abi.StatusBusy, abi.OpDestroyCQ, &abi.HandleReq{Handle: cq.CQN})
	g.must(abi.OpDestroyQP, &abi.HandleReq{Handle: q.QPN}, nil)
	g.want(abi.StatusNotFound, abi.OpDestroyQP, &abi.HandleReq{Handle: q.QPN})
	g.want(abi.StatusNotFound, abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN})
	g.want(abi.StatusNotFound, abi.OpModifyQP, &toInit)
	// The QP's PD and CQ are free again.
	g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: cq.CQN}, nil)
	g.must(abi.OpDeallocPD, &abi.HandleReq{Handle: pdn}, nil)
}

// TestCreateBeforeDoorbells: in the guest-RAM fallback, CREATE_CQ and
// CREATE_QP before SET_DOORBELL_AREA are refused with BAD_STATE and
// allocate nothing.
func TestCreateBeforeDoorbells(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{noShmem: true})
	if d.DoorbellMode() != DoorbellGuestRAM {
		t.Fatalf("mode %v", d.DoorbellMode())
	}
	g.want(abi.StatusBadState, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: g.cqRing(4), Entries: 4})
	if d.Objects().CQs != 0 {
		t.Fatal("CQ allocated without doorbells")
	}
}
