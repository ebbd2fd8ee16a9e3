package engine_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestLocalProtectionErrors: every bad local SGE completes with
// LOC_PROT_ERR, moves the QP to ERR and touches nothing remote.
func TestLocalProtectionErrors(t *testing.T) {
	cases := []struct {
		name string
		wqe  func(p *pair, src, otherPD, dst enginetest.Buf) (abi.SendWQE, abi.SGE)
	}{
		{"forged lkey", func(p *pair, src, _, dst enginetest.Buf) (abi.SendWQE, abi.SGE) {
			s := src.SGE(0, 8)
			s.LKey ^= 0x5500
			return writeTo(dst), s
		}},
		{"stale lkey after DEREG_MR", func(p *pair, src, _, dst enginetest.Buf) (abi.SendWQE, abi.SGE) {
			if _, err := p.a.MTT.Remove(emtt.Key(src.Key)); err != nil {
				t.Fatal(err)
			}
			// A new region takes the slot; the old key must not reach it.
			p.a.NewBuf(pd, abi.AccessLocalWrite, 64)
			return writeTo(dst), src.SGE(0, 8)
		}},
		{"key of another PD", func(p *pair, _, other, dst enginetest.Buf) (abi.SendWQE, abi.SGE) {
			return writeTo(dst), other.SGE(0, 8)
		}},
		{"SGE beyond the MR", func(p *pair, src, _, dst enginetest.Buf) (abi.SendWQE, abi.SGE) {
			return writeTo(dst), src.SGE(60, 8)
		}},
		{"READ into an MR without LOCAL_WRITE", func(p *pair, src, _, dst enginetest.Buf) (abi.SendWQE, abi.SGE) {
			return abi.SendWQE{WRID: 1, Opcode: abi.WRRDMARead, RemoteAddr: dst.GPA, RKey: dst.Key}, src.SGE(0, 8)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
			src := p.a.NewBuf(pd, 0, 64) // local read only
			other := p.a.NewBuf(pd+1, abi.AccessLocalWrite, 64)
			dst := p.b.NewBuf(pd, abi.AccessAll, 64)
			fill(dst.Bytes(), 200)
			before := append([]byte{}, dst.Bytes()...)
			w, s := tc.wqe(p, src, other, dst)
			p.qa.PostSend(w, []abi.SGE{s}, nil)
			c := p.ca.Wait()
			if c.Status != abi.WCLocProtErr || c.WRID != 1 {
				t.Fatalf("cqe %+v status %v, want LOC_PROT_ERR", c, c.Status)
			}
			p.qa.WaitState(abi.QPStateErr)
			p.a.WaitEvent(abi.EventQPFatal, p.qa.QPN)
			if !bytes.Equal(dst.Bytes(), before) {
				t.Fatal("remote memory changed")
			}
		})
	}
}

func writeTo(dst enginetest.Buf) abi.SendWQE {
	return abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, RemoteAddr: dst.GPA, RKey: dst.Key}
}

// TestRemoteAccessErrors: rkey, range, PD and access problems at the
// responder complete with REM_ACCESS_ERR at the requester (and an
// ACCESS_ERR event); the responder's memory and QP are untouched.
func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		qpAcc  abi.Access
		mrAcc  abi.Access
		mrPD   uint32
		op     abi.WROpcode
		mutate func(w *abi.SendWQE)
	}{
		{"forged rkey", abi.AccessAll, abi.AccessAll, pd, abi.WRRDMAWrite, func(w *abi.SendWQE) { w.RKey += 1 << 8 }},
		{"range beyond MR", abi.AccessAll, abi.AccessAll, pd, abi.WRRDMAWrite, func(w *abi.SendWQE) { w.RemoteAddr += 60 }},
		{"MR of another PD", abi.AccessAll, abi.AccessAll, pd + 1, abi.WRRDMAWrite, nil},
		{"MR without REMOTE_WRITE", abi.AccessAll, abi.AccessLocalWrite | abi.AccessRemoteRead, pd, abi.WRRDMAWrite, nil},
		{"QP without REMOTE_WRITE", abi.AccessRemoteRead, abi.AccessAll, pd, abi.WRRDMAWrite, nil},
		{"MR without REMOTE_READ", abi.AccessAll, abi.AccessLocalWrite | abi.AccessRemoteWrite, pd, abi.WRRDMARead, nil},
		{"QP without REMOTE_READ", abi.AccessRemoteWrite, abi.AccessAll, pd, abi.WRRDMARead, nil},
		{"QP without REMOTE_ATOMIC", abi.AccessRemoteWrite | abi.AccessRemoteRead, abi.AccessAll, pd, abi.WRAtomicFetchAdd, nil},
		{"MR without REMOTE_ATOMIC", abi.AccessAll, abi.AccessLocalWrite | abi.AccessRemoteWrite, pd, abi.WRAtomicCmpSwap, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn := enginetest.DefaultConn
			conn.Access = tc.qpAcc
			p := newPair(t, conn, enginetest.QPOpts{})
			local := p.a.NewBuf(pd, abi.AccessLocalWrite, 64)
			remote := p.b.NewBuf(tc.mrPD, tc.mrAcc, 64)
			fill(remote.Bytes(), 50)
			before := append([]byte{}, remote.Bytes()...)
			w := abi.SendWQE{WRID: 9, Opcode: tc.op, RemoteAddr: remote.GPA, RKey: remote.Key, CompareAdd: 1}
			if tc.mutate != nil {
				tc.mutate(&w)
			}
			p.qa.PostSend(w, []abi.SGE{local.SGE(0, 8)}, nil)
			c := p.ca.Wait()
			expect(t, c, 9, abi.WCRemAccessErr, abi.WCOpcodeFor(tc.op))
			p.a.WaitEvent(abi.EventQPAccessErr, p.qa.QPN)
			if !bytes.Equal(remote.Bytes(), before) {
				t.Fatal("remote memory changed")
			}
			if st := p.qb.State(); st != abi.QPStateRTS {
				t.Fatalf("responder QP went to %v", st)
			}
		})
	}
}

// TestMalformedWQEs: a garbage opcode, too many SGEs, undefined flags or
// reserved bits complete with LOC_QP_OP_ERR (bad WQEs counted); the QP
// goes to ERR and the rest of its queue is flushed.
func TestMalformedWQEs(t *testing.T) {
	cases := []struct {
		name string
		hdr  func(b []byte)
	}{
		{"garbage opcode", func(b []byte) { b[8] = 0xee }},
		{"SGE count above max_send_sge", func(b []byte) { binary.LittleEndian.PutUint16(b[10:], 5) }},
		{"SGE count 65535", func(b []byte) { binary.LittleEndian.PutUint16(b[10:], 0xffff) }},
		{"undefined flag", func(b []byte) { b[9] = 0x80 }},
		{"reserved word", func(b []byte) { binary.LittleEndian.PutUint32(b[0x3c:], 1) }},
		{"atomic with two SGEs", func(b []byte) { b[8] = byte(abi.WRAtomicFetchAdd); binary.LittleEndian.PutUint16(b[10:], 2) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
			slot := p.qa.RawSlot()
			clear(slot)
			abi.SendWQE{WRID: 31, Opcode: abi.WRSend, Flags: abi.SendSignaled}.Put(slot)
			tc.hdr(slot)
			p.qa.Commit()
			p.qa.WriteSend(abi.SendWQE{WRID: 32, Opcode: abi.WRSend, Flags: abi.SendSignaled}, nil, nil)
			p.qb.PostRecv(1)
			p.qa.RingSQ()
			c := p.ca.Wait()
			if c.WRID != 31 || c.Status != abi.WCLocQPOpErr {
				t.Fatalf("cqe %+v status %v", c, c.Status)
			}
			c = p.ca.Wait()
			if c.WRID != 32 || c.Status != abi.WCWRFlushErr {
				t.Fatalf("second cqe %+v status %v, want a flush", c, c.Status)
			}
			if p.a.Eng.Stats().BadWQEs != 1 {
				t.Fatalf("stats %+v", p.a.Eng.Stats())
			}
			if p.qb.RQCons() != 0 {
				t.Fatal("a malformed WQE consumed a receive at the peer")
			}
		})
	}
}

// TestFlushOnError: a QP moved to ERR flushes outstanding and newly posted
// WQEs of both queues with WR_FLUSH_ERR, in order.
func TestFlushOnError(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	for i := range 3 {
		p.qa.PostRecv(uint64(100 + i))
	}
	if err := p.a.Eng.ModifyQP(p.qa.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateErr}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p.qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite}, nil, nil)
	}
	p.qa.PostRecv(103)
	var sends, recvs []uint64
	for len(sends)+len(recvs) < 7 {
		c := p.ca.Wait()
		if c.Status != abi.WCWRFlushErr {
			t.Fatalf("cqe %+v status %v", c, c.Status)
		}
		if c.Opcode == abi.WCRecv {
			recvs = append(recvs, c.WRID)
		} else {
			sends = append(sends, c.WRID)
		}
	}
	if len(sends) != 3 || sends[0] != 0 || sends[2] != 2 || len(recvs) != 4 || recvs[0] != 100 || recvs[3] != 103 {
		t.Fatalf("flushed sends %v recvs %v", sends, recvs)
	}
	if p.qa.SQCons() != 3 || p.qa.RQCons() != 4 {
		t.Fatalf("cons %d/%d", p.qa.SQCons(), p.qa.RQCons())
	}
	// The guest moved it to ERR: no async event for that.
	for _, ev := range p.a.Events() {
		if ev.Handle == p.qa.QPN {
			t.Fatalf("event %+v for a guest-requested ERR", ev)
		}
	}
	// Back to RESET and up again: the QP works.
	if err := p.a.Eng.ModifyQP(p.qa.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}); err != nil {
		t.Fatal(err)
	}
	if p.qa.SQCons() != 0 || p.qa.RQCons() != 0 {
		t.Fatal("RESET did not zero the record")
	}
	p.qa.SQProd, p.qa.RQProd = 0, 0
	p.qa.SetProd(0, 0)
	p.qa.ToRTS(p.b.GID, p.qb.QPN, enginetest.DefaultConn)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	src := p.a.NewBuf(pd, 0, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 50, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 50, abi.WCSuccess, abi.WCRDMAWrite)
}

// TestReceiveTooSmall: the responder completes its receive with
// LOC_LEN_ERR and goes to ERR; the requester gets REM_INV_REQ_ERR.
func TestReceiveTooSmall(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 100)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite, 100)
	p.qb.PostRecv(7, dst.SGE(0, 50))
	p.qa.PostSend(abi.SendWQE{WRID: 6, Opcode: abi.WRSend}, []abi.SGE{src.SGE(0, 100)}, nil)
	expect(t, p.ca.Wait(), 6, abi.WCRemInvReqErr, abi.WCSend)
	expect(t, p.cb.Wait(), 7, abi.WCLocLenErr, abi.WCRecv)
	p.qb.WaitState(abi.QPStateErr)
	p.qa.WaitState(abi.QPStateErr)
	p.a.WaitEvent(abi.EventQPReqErr, p.qa.QPN)
	p.b.WaitEvent(abi.EventQPFatal, p.qb.QPN)
}

// TestReceiveWithBadLKey: a receive WQE whose SGE is not ours completes
// with LOC_PROT_ERR at the responder and REM_OP_ERR at the requester.
func TestReceiveWithBadLKey(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	ro := p.b.NewBuf(pd, 0, 8) // no LOCAL_WRITE: cannot receive into it
	p.qb.PostRecv(7, ro.SGE(0, 8))
	p.qa.PostSend(abi.SendWQE{WRID: 6, Opcode: abi.WRSend}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 6, abi.WCRemOpErr, abi.WCSend)
	expect(t, p.cb.Wait(), 7, abi.WCLocProtErr, abi.WCRecv)
}

// TestCQOverflow: writing to a full CQ puts it in error (CQ_ERR event)
// and its QPs in ERR (QP_FATAL); completions stop.
func TestCQOverflow(t *testing.T) {
	fab := newFabric()
	a := enginetest.NewGuest(t, fab, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, fab, "b", enginetest.Options{})
	small := a.CreateCQ(2)
	cb := b.CreateCQ(64)
	qa := a.CreateQP(pd, small, small, enginetest.QPOpts{})
	qb := b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	dst := b.NewBuf(pd, abi.AccessAll, 8)
	src := a.NewBuf(pd, 0, 8)
	for i := range 3 {
		qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key},
			[]abi.SGE{src.SGE(0, 8)}, nil)
	}
	a.WaitEvent(abi.EventCQErr, small.CQN)
	a.WaitEvent(abi.EventQPFatal, qa.QPN)
	qa.WaitState(abi.QPStateErr)
	if small.Prod() != 2 {
		t.Fatalf("prod %d after overflow", small.Prod())
	}
	if s := a.Eng.Stats(); s.CQOverflows != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Consuming now does not revive it.
	small.Poll()
	small.Poll()
	qa.PostSend(abi.SendWQE{WRID: 9, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled}, nil, nil)
	small.ExpectNone(10 * time.Millisecond)
}

// TestProducerBeyondRing: an sq_prod or rq_prod more than a ring ahead
// is a guest bug: that QP goes to ERR with QP_FATAL, nothing else.
func TestProducerBeyondRing(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{SQSize: 8, RQSize: 8})
	cq2 := p.a.CreateCQ(64)
	other := p.a.CreateQP(pd, cq2, cq2, enginetest.QPOpts{})
	cqb2 := p.b.CreateCQ(64)
	otherB := p.b.CreateQP(pd, cqb2, cqb2, enginetest.QPOpts{})
	enginetest.Connect(other, otherB, enginetest.DefaultConn)

	p.qa.SetProd(9, 0)
	ev := p.a.WaitEvent(abi.EventQPFatal, p.qa.QPN)
	if ev.Info != uint32(abi.WCLocQPOpErr) {
		t.Fatalf("event %+v", ev)
	}
	p.qa.WaitState(abi.QPStateErr)
	p.ca.ExpectNone(5 * time.Millisecond) // garbage slots are not flushed

	// Another QP of the same device keeps working.
	src := p.a.NewBuf(pd, 0, 8)
	dst0 := p.b.NewBuf(pd, abi.AccessAll, 8)
	other.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst0.GPA, RKey: dst0.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, cq2.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	// Unaffected traffic on a fresh pair of QPs.
	cq3, cqb3 := p.a.CreateCQ(64), p.b.CreateCQ(64)
	q3, qb3 := p.a.CreateQP(pd, cq3, cq3, enginetest.QPOpts{}), p.b.CreateQP(pd, cqb3, cqb3, enginetest.QPOpts{})
	enginetest.Connect(q3, qb3, enginetest.DefaultConn)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	q3.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, cq3.Wait(), 2, abi.WCSuccess, abi.WCRDMAWrite)
}

// TestRespondersRQProdBeyondRing: the responder QP whose rq_prod is
// bogus goes to ERR; the requester sees an error, not a hang.
func TestRespondersRQProdBeyondRing(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{RQSize: 4})
	p.qb.SetProd(0, 5)
	src := p.a.NewBuf(pd, 0, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend}, []abi.SGE{src.SGE(0, 8)}, nil)
	if c := p.ca.Wait(); c.Status != abi.WCRemOpErr {
		t.Fatalf("status %v", c.Status)
	}
	p.b.WaitEvent(abi.EventQPFatal, p.qb.QPN)
}
