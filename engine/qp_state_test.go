package engine_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestModifyLosingToDataPathChangesNothing: when the data path moves the
// QP to ERR between ModifyQP's state check and its state change, the
// MODIFY_QP fails with BAD_STATE and leaves the attributes as they were.
func TestModifyLosingToDataPathChangesNothing(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	e := p.a.Eng
	e.SetBeforeStateCAS(e.FailQP)
	before, err := e.QueryQP(p.qa.QPN)
	if err != nil {
		t.Fatal(err)
	}
	err = e.ModifyQP(p.qa.QPN, abi.QPAttrState|abi.QPAttrMinRNRTimer|abi.QPAttrAccessFlags,
		&abi.QPAttr{State: abi.QPStateRTS, MinRNRTimer: 20, AccessFlags: abi.AccessRemoteRead})
	wantStatus(t, "RTS -> RTS racing a move to ERR", err, abi.StatusBadState)
	after, err := e.QueryQP(p.qa.QPN)
	if err != nil {
		t.Fatal(err)
	}
	if after.Attr.State != abi.QPStateErr {
		t.Fatalf("state %v", after.Attr.State)
	}
	after.Attr.State, after.Attr.CurState = before.Attr.State, before.Attr.CurState
	if after.Attr != before.Attr {
		t.Fatalf("a failed MODIFY_QP changed the attributes:\n before %+v\n after  %+v", before.Attr, after.Attr)
	}
}

// TestModifyToErrRacingDataPathSucceeds: a MODIFY_QP to ERR that finds
// the QP moved to ERR by the data path meanwhile has what it asked for.
func TestModifyToErrRacingDataPathSucceeds(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	e := p.a.Eng
	e.SetBeforeStateCAS(e.FailQP)
	if err := e.ModifyQP(p.qa.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateErr}); err != nil {
		t.Fatalf("RTS -> ERR racing a move to ERR: %v", err)
	}
	e.SetBeforeStateCAS(nil)
	if err := e.ModifyQP(p.qa.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateErr}); err != nil {
		t.Fatalf("ERR -> ERR: %v", err)
	}
	p.qa.WaitState(abi.QPStateErr)
}

// TestSQDrainingWhileHeadWaits: QUERY_QP reports sq_draining while an SQD
// QP's head WQE waits for an RNR retry (nothing on the fabric), and
// clears it once the WQE completed.
func TestSQDrainingWhileHeadWaits(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RNRRetry = 7
	p := newPair(t, conn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
	for deadline := time.Now().Add(5 * time.Second); p.a.Eng.Stats().RNRNaks == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := p.a.Eng.ModifyQP(p.qa.QPN, abi.QPAttrState|abi.QPAttrEnSQDAsyncNotif, &abi.QPAttr{State: abi.QPStateSQD}); err != nil {
		t.Fatal(err)
	}
	draining := func() bool {
		r, err := p.a.Eng.QueryQP(p.qa.QPN)
		if err != nil {
			t.Fatal(err)
		}
		if r.Attr.State != abi.QPStateSQD {
			t.Fatalf("state %v", r.Attr.State)
		}
		return r.Attr.SQDraining != 0
	}
	for range 20 {
		if !draining() {
			t.Fatal("sq_draining 0 while the head WQE waits for an RNR retry")
		}
		time.Sleep(time.Millisecond)
	}
	if n := countEvents(p.a, abi.EventSQDrained, p.qa.QPN); n != 0 {
		t.Fatal("SQ_DRAINED before the head WQE completed")
	}
	p.qb.PostRecv(2, dst.SGE(0, 8))
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCSend)
	p.a.WaitEvent(abi.EventSQDrained, p.qa.QPN)
	if draining() {
		t.Fatal("sq_draining after the SQ drained")
	}
}
