package engine_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// qpSpec is a QP of g on scq/rcq at fresh ring addresses, for calling
// Engine.CreateQP directly (enginetest.CreateQP fails the test on error).
func qpSpec(g *enginetest.Guest, qpn, scq, rcq uint32) engine.QPSpec {
	sqStride, rqStride := abi.SendWQEStride(1, 0), abi.RecvWQEStride(1)
	return engine.QPSpec{QPN: qpn, PDN: pd, Type: abi.QPTypeRC, SendCQN: scq, RecvCQN: rcq, Doorbell: qpn - 2,
		SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1,
		SQAddr: g.Alloc(8*uint64(sqStride), uint64(sqStride)), RQAddr: g.Alloc(8*uint64(rqStride), uint64(rqStride))}
}

// TestCreateQPOnFailedCQ: a CQ in error (here: it overflowed) takes no
// new QP, as send or as receive CQ: the QP's completions would vanish.
func TestCreateQPOnFailedCQ(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	small := p.a.CreateCQ(2)
	good := p.a.CreateCQ(16)
	q := p.a.CreateQP(pd, small, small, enginetest.QPOpts{})
	q.ToRTS(p.b.GID, p.qb.QPN, enginetest.DefaultConn)
	for i := range 3 {
		q.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled}, nil, nil)
	}
	p.a.WaitEvent(abi.EventCQErr, small.CQN)
	wantStatus(t, "qp on a failed send cq", p.a.Eng.CreateQP(qpSpec(p.a, 40, small.CQN, good.CQN)), abi.StatusBadState)
	wantStatus(t, "qp on a failed recv cq", p.a.Eng.CreateQP(qpSpec(p.a, 41, good.CQN, small.CQN)), abi.StatusBadState)
	// Refused cleanly: the numbers and the healthy CQ are still free.
	if err := p.a.Eng.CreateQP(qpSpec(p.a, 40, good.CQN, good.CQN)); err != nil {
		t.Fatalf("qp on a healthy cq: %v", err)
	}
}

// TestCompletionToFailedCQFailsQP: a QP whose CQ is in error (and which
// cqFailed did not reach) goes to ERR with QP_FATAL on its next
// completion instead of losing it silently and running on.
func TestCompletionToFailedCQFailsQP(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	p.a.Eng.BreakCQ(p.ca.CQN)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	if ev := p.a.WaitEvent(abi.EventQPFatal, p.qa.QPN); ev.Info != uint32(abi.WCFatalErr) {
		t.Fatalf("event %+v", ev)
	}
	p.qa.WaitState(abi.QPStateErr)
	if p.ca.Prod() != 0 {
		t.Fatal("a CQE was written into a CQ in error")
	}
	// The receive side too: a SEND lands in the responder's receive
	// buffer, its CQ is in error, so its QP goes to ERR.
	p2 := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	p2.b.Eng.BreakCQ(p2.cb.CQN)
	p2.qb.PostRecv(3, p2.b.NewBuf(pd, abi.AccessLocalWrite, 8).SGE(0, 8))
	p2.qa.PostSend(abi.SendWQE{WRID: 4, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{p2.a.NewBuf(pd, 0, 8).SGE(0, 8)}, nil)
	expect(t, p2.ca.Wait(), 4, abi.WCSuccess, abi.WCSend)
	p2.b.WaitEvent(abi.EventQPFatal, p2.qb.QPN)
	p2.qb.WaitState(abi.QPStateErr)
}

// TestCQRecordLostAtStart: a Start with a layout that no longer holds a
// CQ's doorbell record puts the CQ in error (CQ_ERR) and its QPs in ERR,
// rather than letting them run with their completions dropped.
func TestCQRecordLostAtStart(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	p.a.Eng.Stop()
	// Records for the QPs only: the CQs' records (MaxQP + cqn - 1) are
	// beyond it.
	small, err := abi.NewDoorbellLayout(abi.Limits{MaxQP: 8, MaxCQ: 8, MaxSRQ: 1}.WithDefaults(), guestmem.PageSize())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := small.RecordOffset(p.ca.DB); ok {
		t.Fatalf("layout of %d records holds record %d", small.Records, p.ca.DB)
	}
	if err := p.a.Eng.Start(p.a.Mem, p.a.DB.View(), small); err != nil {
		t.Fatal(err)
	}
	p.a.WaitEvent(abi.EventCQErr, p.ca.CQN)
	p.a.WaitEvent(abi.EventQPFatal, p.qa.QPN)
	p.qa.WaitState(abi.QPStateErr)
	if s := p.a.Eng.Stats(); s.CQOverflows != 0 {
		t.Fatalf("a lost record counted as an overflow: %+v", s)
	}
}

// TestLostCQRingIsNoOverflow: a CQ whose ring left guest memory is in
// error, but did not overflow.
func TestLostCQRingIsNoOverflow(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	m, err := guestmem.MapAnonymous(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	other, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: 1 << 40, Size: 1 << 20, UserAddr: 0x6000_0000_0000, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.b.Eng.SetMemory(other); err != nil {
		t.Fatal(err)
	}
	p.b.WaitEvent(abi.EventCQErr, p.cb.CQN)
	time.Sleep(time.Millisecond)
	if s := p.b.Eng.Stats(); s.CQOverflows != 0 {
		t.Fatalf("a lost ring counted as an overflow: %+v", s)
	}
}
