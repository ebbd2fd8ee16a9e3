package device

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// srqReq is a CREATE_SRQ request for an SRQ of size WQEs with its ring in
// guest RAM.
func (g *vmGuest) srqReq(pdn, size, maxSGE uint32) *abi.CreateSRQReq {
	stride := abi.RecvWQEStride(maxSGE)
	return &abi.CreateSRQReq{PDN: pdn, Size: size, MaxSGE: maxSGE, RingAddr: g.alloc(uint64(size*stride), uint64(stride))}
}

// srqQPReq is a CREATE_QP request for a QP on SRQ srqn: no RQ of its own.
func (g *vmGuest) srqQPReq(pdn, cqn, srqn uint32) *abi.CreateQPReq {
	r := g.qpReq(pdn, cqn, cqn)
	r.SRQN, r.RQSize, r.MaxRecvSGE, r.RQAddr = srqn, 0, 0, 0
	return r
}

// TestSRQCommands walks the SRQ commands through the control queue:
// numbering and doorbell records, every refusal of spec §8.21-8.24 and
// CREATE_QP's srqn, the use counts that make PD, CQ and SRQ busy, and
// QUERY_DEVICE's and config space's limits.
func TestSRQCommands(t *testing.T) {
	l := abi.Limits{MaxQP: 100, MaxCQ: 10, MaxSRQ: 2, MaxSRQWR: 64, MaxSRQSGE: 4}
	d := newDevice(t, Config{Limits: l})
	g := startVM(t, d, vmOpts{})
	pdn, pd2 := g.allocPD(), g.allocPD()
	cq := g.createCQ(16)

	var a abi.DeviceAttr
	if st, b := g.raw(enc(abi.OpQueryDevice, nil), respLen(abi.OpQueryDevice)); st != abi.StatusOK || a.UnmarshalBinary(b) != nil {
		t.Fatalf("QUERY_DEVICE: %v", st)
	}
	if a.MaxSRQ != 2 || a.MaxSRQWR != 64 || a.MaxSRQSGE != 4 {
		t.Fatalf("QUERY_DEVICE SRQ limits %d/%d/%d", a.MaxSRQ, a.MaxSRQWR, a.MaxSRQSGE)
	}
	if dl := d.DoorbellLayout(); dl.Records != 100+10+2 {
		t.Fatalf("%d doorbell records, want one per QP, CQ and SRQ", dl.Records)
	}

	var s1 abi.CreateSRQResp
	g.must(abi.OpCreateSRQ, g.srqReq(pdn, 16, 2), &s1)
	if s1.SRQN != 1 || s1.DoorbellIndex != 100+10 || s1.Stride != abi.RecvWQEStride(2) {
		t.Fatalf("first SRQ %+v (doorbell must be max_qp + max_cq + srqn - 1)", s1)
	}
	ram := uint64(64 << 20)
	for _, c := range []struct {
		name string
		mod  func(r *abi.CreateSRQReq)
		want abi.Status
	}{
		{"unknown PD", func(r *abi.CreateSRQReq) { r.PDN = 9 }, abi.StatusNotFound},
		{"size 0", func(r *abi.CreateSRQReq) { r.Size = 0 }, abi.StatusInvalidArgument},
		{"size 3", func(r *abi.CreateSRQReq) { r.Size = 3 }, abi.StatusInvalidArgument},
		{"over max_srq_wr", func(r *abi.CreateSRQReq) { r.Size = 128 }, abi.StatusInvalidArgument},
		{"over max_srq_sge", func(r *abi.CreateSRQReq) { r.MaxSGE = 5 }, abi.StatusInvalidArgument},
		{"limit of the size", func(r *abi.CreateSRQReq) { r.Limit = 16 }, abi.StatusInvalidArgument},
		{"ring outside guest RAM", func(r *abi.CreateSRQReq) { r.RingAddr = ram }, abi.StatusBadAddress},
		{"ring wraps", func(r *abi.CreateSRQReq) { r.RingAddr = ^uint64(0) &^ 63 }, abi.StatusBadAddress},
		{"misaligned ring", func(r *abi.CreateSRQReq) { r.RingAddr += 16 }, abi.StatusInvalidArgument},
	} {
		r := g.srqReq(pdn, 16, 2)
		c.mod(r)
		if st := g.do(abi.OpCreateSRQ, r, nil); st != c.want {
			t.Errorf("create srq, %s: %v, want %v", c.name, st, c.want)
		}
	}
	if n := d.Objects().SRQs; n != 1 {
		t.Fatalf("%d SRQs after failed creates", n)
	}
	var s2 abi.CreateSRQResp
	g.must(abi.OpCreateSRQ, g.srqReq(pd2, 4, 1), &s2)
	g.want(abi.StatusNoResources, abi.OpCreateSRQ, g.srqReq(pdn, 4, 1))

	// CREATE_QP on an SRQ.
	for _, c := range []struct {
		name string
		mod  func(r *abi.CreateQPReq)
		want abi.Status
	}{
		{"unknown SRQ", func(r *abi.CreateQPReq) { r.SRQN = 7 }, abi.StatusNotFound},
		{"SRQ of another PD", func(r *abi.CreateQPReq) { r.SRQN = s2.SRQN }, abi.StatusPermission},
		{"an RQ as well", func(r *abi.CreateQPReq) { r.RQSize = 4 }, abi.StatusInvalidArgument},
		{"receive SGEs", func(r *abi.CreateQPReq) { r.MaxRecvSGE = 1 }, abi.StatusInvalidArgument},
		{"an RQ address", func(r *abi.CreateQPReq) { r.RQAddr = g.alloc(64, 64) }, abi.StatusInvalidArgument},
	} {
		r := g.srqQPReq(pdn, cq.CQN, s1.SRQN)
		c.mod(r)
		if st := g.do(abi.OpCreateQP, r, nil); st != c.want {
			t.Errorf("create qp, %s: %v, want %v", c.name, st, c.want)
		}
	}
	var qp abi.CreateQPResp
	g.must(abi.OpCreateQP, g.srqQPReq(pdn, cq.CQN, s1.SRQN), &qp)
	if qp.RQStride != 0 {
		t.Errorf("QP on an SRQ got rq_stride %d", qp.RQStride)
	}
	var qr abi.QueryQPResp
	g.must(abi.OpQueryQP, &abi.HandleReq{Handle: qp.QPN}, &qr)
	if qr.Cap.SRQN != s1.SRQN || qr.Cap.RQSize != 0 {
		t.Errorf("QUERY_QP cap %+v", qr.Cap)
	}

	// MODIFY_SRQ and QUERY_SRQ. A limit armed on the empty SRQ fires at
	// once and is disarmed; the event reaches the driver.
	var sa abi.SRQAttr
	g.must(abi.OpQuerySRQ, &abi.HandleReq{Handle: s1.SRQN}, &sa)
	if sa != (abi.SRQAttr{PDN: pdn, MaxWR: 16, MaxSGE: 2}) {
		t.Errorf("QUERY_SRQ %+v", sa)
	}
	bufs := g.postEventBuffers(1, abi.EventSize)
	g.must(abi.OpModifySRQ, &abi.ModifySRQReq{SRQN: s1.SRQN, AttrMask: abi.SRQAttrLimit, Limit: 3}, nil)
	if _, err := g.waitEvents(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ev, err := abi.DecodeEvent(g.bytes(bufs[0], abi.EventSize)); err != nil || ev.Type != abi.EventSRQLimit || ev.Handle != s1.SRQN {
		t.Fatalf("event %+v %v, want SRQ_LIMIT for SRQ %d", ev, err, s1.SRQN)
	}
	g.must(abi.OpQuerySRQ, &abi.HandleReq{Handle: s1.SRQN}, &sa)
	if sa.Limit != 0 {
		t.Errorf("limit %d after it fired", sa.Limit)
	}
	g.want(abi.StatusNotSupported, abi.OpModifySRQ, &abi.ModifySRQReq{SRQN: s1.SRQN, AttrMask: abi.SRQAttrMaxWR | abi.SRQAttrLimit, MaxWR: 32, Limit: 1})
	g.want(abi.StatusInvalidArgument, abi.OpModifySRQ, &abi.ModifySRQReq{SRQN: s1.SRQN, AttrMask: abi.SRQAttrLimit, Limit: 16})
	g.want(abi.StatusInvalidArgument, abi.OpModifySRQ, &abi.ModifySRQReq{SRQN: s1.SRQN, AttrMask: 1 << 5})
	g.want(abi.StatusNotFound, abi.OpModifySRQ, &abi.ModifySRQReq{SRQN: 9, AttrMask: abi.SRQAttrLimit})
	g.must(abi.OpQuerySRQ, &abi.HandleReq{Handle: s1.SRQN}, &sa)
	if sa.Limit != 0 {
		t.Errorf("a refused MODIFY_SRQ changed the limit to %d", sa.Limit)
	}

	// In use: the SRQ, its PD and the CQ are busy.
	g.want(abi.StatusBusy, abi.OpDestroySRQ, &abi.HandleReq{Handle: s1.SRQN})
	g.want(abi.StatusBusy, abi.OpDeallocPD, &abi.HandleReq{Handle: pd2})
	g.must(abi.OpDestroyQP, &abi.HandleReq{Handle: qp.QPN}, nil)
	g.must(abi.OpDestroySRQ, &abi.HandleReq{Handle: s1.SRQN}, nil)
	g.must(abi.OpDestroySRQ, &abi.HandleReq{Handle: s2.SRQN}, nil)
	for _, h := range []uint32{s1.SRQN, 0, 3, 1 << 31} {
		g.want(abi.StatusNotFound, abi.OpDestroySRQ, &abi.HandleReq{Handle: h})
		g.want(abi.StatusNotFound, abi.OpQuerySRQ, &abi.HandleReq{Handle: h})
	}
	g.must(abi.OpDeallocPD, &abi.HandleReq{Handle: pd2}, nil)
	if o := d.Objects(); o.SRQs != 0 || o.QPs != 0 {
		t.Fatalf("objects %+v", o)
	}
	// The freed numbers are handed out again, never-used slots first.
	var s3 abi.CreateSRQResp
	g.must(abi.OpCreateSRQ, g.srqReq(pdn, 4, 1), &s3)
	if s3.SRQN != 1 {
		t.Errorf("SRQN %d after both were freed", s3.SRQN)
	}
	// RESET_STATE drops SRQs with everything else.
	g.must(abi.OpResetState, nil, nil)
	if n := d.Objects().SRQs; n != 0 {
		t.Fatalf("%d SRQs after RESET_STATE", n)
	}
}
