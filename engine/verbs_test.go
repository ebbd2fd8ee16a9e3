package engine_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestRDMAWriteGatherAndUnsignalled(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, abi.AccessLocalWrite, 8192)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteWrite, 8192)
	fill(src.Bytes(), 3)
	// Unsignalled first: no CQE, but sq_cons moves.
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, RemoteAddr: dst.GPA, RKey: dst.Key},
		[]abi.SGE{src.SGE(0, 10)}, nil)
	p.qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA + 100, RKey: dst.Key},
		[]abi.SGE{src.SGE(0, 3000), src.SGE(5000, 3000)}, nil)
	cqe := p.ca.Wait()
	expect(t, cqe, 2, abi.WCSuccess, abi.WCRDMAWrite)
	if cqe.ByteLen != 6000 {
		t.Fatalf("byte_len %d", cqe.ByteLen)
	}
	if _, ok := p.ca.Poll(); ok {
		t.Fatal("an unsignalled WRITE produced a CQE")
	}
	if p.qa.SQCons() != 2 {
		t.Fatalf("sq_cons %d", p.qa.SQCons())
	}
	want := append(append([]byte{}, src.Bytes()[:3000]...), src.Bytes()[5000:8000]...)
	if !bytes.Equal(dst.Bytes()[100:6100], want) || !bytes.Equal(dst.Bytes()[:10], src.Bytes()[:10]) {
		t.Fatal("written bytes differ")
	}
	if _, ok := p.cb.Poll(); ok {
		t.Fatal("a plain WRITE completed at the responder")
	}
	if s := p.a.Eng.Stats(); s.BytesSent != 6010 || s.WQEs != 2 {
		t.Fatalf("requester stats %+v", s)
	}
	if s := p.b.Eng.Stats(); s.BytesReceived != 6010 {
		t.Fatalf("responder stats %+v", s)
	}
}

func TestWriteWithImm(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 64)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteWrite, 64)
	fill(src.Bytes(), 9)
	p.qb.PostRecv(900)
	p.qa.PostSend(abi.SendWQE{WRID: 8, Opcode: abi.WRRDMAWriteWithImm, Flags: abi.SendSignaled, Imm: 0x1234,
		RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 64)}, nil)
	expect(t, p.ca.Wait(), 8, abi.WCSuccess, abi.WCRDMAWrite)
	r := p.cb.Wait()
	expect(t, r, 900, abi.WCSuccess, abi.WCRecvRDMAWithImm)
	if r.Imm != 0x1234 || r.Flags&abi.WCWithImm == 0 || r.ByteLen != 64 || r.SrcQP != p.qa.QPN {
		t.Fatalf("recv cqe %+v", r)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}

func TestRDMARead(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	remote := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteRead, 10000)
	local := p.a.NewBuf(pd, abi.AccessLocalWrite, 10000)
	fill(remote.Bytes(), 42)
	p.qa.PostSend(abi.SendWQE{WRID: 3, Opcode: abi.WRRDMARead, Flags: abi.SendSignaled, RemoteAddr: remote.GPA + 1, RKey: remote.Key},
		[]abi.SGE{local.SGE(0, 5000), local.SGE(6000, 4000)}, nil)
	cqe := p.ca.Wait()
	expect(t, cqe, 3, abi.WCSuccess, abi.WCRDMARead)
	if cqe.ByteLen != 9000 {
		t.Fatalf("byte_len %d", cqe.ByteLen)
	}
	if !bytes.Equal(local.Bytes()[:5000], remote.Bytes()[1:5001]) || !bytes.Equal(local.Bytes()[6000:], remote.Bytes()[5001:9001]) {
		t.Fatal("read bytes differ")
	}
}

func TestAtomics(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	remote := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteAtomic, 64)
	local := p.a.NewBuf(pd, abi.AccessLocalWrite, 64)
	le := binary.LittleEndian
	le.PutUint64(remote.Bytes()[8:], 100)

	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRAtomicFetchAdd, Flags: abi.SendSignaled, RemoteAddr: remote.GPA + 8,
		RKey: remote.Key, CompareAdd: 5}, []abi.SGE{local.SGE(0, 8)}, nil)
	c := p.ca.Wait()
	expect(t, c, 1, abi.WCSuccess, abi.WCFetchAdd)
	if got := le.Uint64(local.Bytes()); got != 100 || le.Uint64(remote.Bytes()[8:]) != 105 || c.ByteLen != 8 {
		t.Fatalf("fetch-add: returned %d, memory %d, byte_len %d", got, le.Uint64(remote.Bytes()[8:]), c.ByteLen)
	}
	// Compare fails: memory unchanged, original returned.
	p.qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRAtomicCmpSwap, Flags: abi.SendSignaled, RemoteAddr: remote.GPA + 8,
		RKey: remote.Key, CompareAdd: 1, Swap: 7}, []abi.SGE{local.SGE(8, 8)}, nil)
	expect(t, p.ca.Wait(), 2, abi.WCSuccess, abi.WCCompSwap)
	if le.Uint64(local.Bytes()[8:]) != 105 || le.Uint64(remote.Bytes()[8:]) != 105 {
		t.Fatal("failed compare-and-swap changed memory")
	}
	// Compare matches: swapped.
	p.qa.PostSend(abi.SendWQE{WRID: 3, Opcode: abi.WRAtomicCmpSwap, Flags: abi.SendSignaled, RemoteAddr: remote.GPA + 8,
		RKey: remote.Key, CompareAdd: 105, Swap: 7}, []abi.SGE{local.SGE(16, 8)}, nil)
	expect(t, p.ca.Wait(), 3, abi.WCSuccess, abi.WCCompSwap)
	if le.Uint64(local.Bytes()[16:]) != 105 || le.Uint64(remote.Bytes()[8:]) != 7 {
		t.Fatal("compare-and-swap did not swap")
	}
	// Misaligned remote address: remote invalid request.
	p.qa.PostSend(abi.SendWQE{WRID: 4, Opcode: abi.WRAtomicFetchAdd, Flags: abi.SendSignaled, RemoteAddr: remote.GPA + 4,
		RKey: remote.Key, CompareAdd: 1}, []abi.SGE{local.SGE(24, 8)}, nil)
	expect(t, p.ca.Wait(), 4, abi.WCRemInvReqErr, abi.WCFetchAdd)
	p.a.WaitEvent(abi.EventQPReqErr, p.qa.QPN)
	if le.Uint64(remote.Bytes()[8:]) != 7 {
		t.Fatal("misaligned atomic changed memory")
	}
}

func TestAtomicsAreAtomicAcrossRequesters(t *testing.T) {
	// Two requester devices hammer one counter: every add must land.
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	c := enginetest.NewGuest(t, p.fabric(), "c", enginetest.Options{})
	ccq := c.CreateCQ(64)
	qc := c.CreateQP(pd, ccq, ccq, enginetest.QPOpts{})
	cqb := p.b.CreateCQ(64)
	qb2 := p.b.CreateQP(pd, cqb, cqb, enginetest.QPOpts{})
	enginetest.Connect(qc, qb2, enginetest.DefaultConn)
	counter := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteAtomic, 8)
	la := p.a.NewBuf(pd, abi.AccessLocalWrite, 8)
	lc := c.NewBuf(pd, abi.AccessLocalWrite, 8)
	const n = 300
	done := make(chan struct{})
	run := func(q *enginetest.QP, cq *enginetest.CQ, l enginetest.Buf) {
		defer func() { done <- struct{}{} }()
		for i := range n {
			q.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRAtomicFetchAdd, Flags: abi.SendSignaled,
				RemoteAddr: counter.GPA, RKey: counter.Key, CompareAdd: 1}, []abi.SGE{l.SGE(0, 8)}, nil)
			if c := cq.Wait(); c.Status != abi.WCSuccess {
				t.Errorf("fetch-add %d: %v", i, c.Status)
				return
			}
		}
	}
	go run(p.qa, p.ca, la)
	go run(qc, ccq, lc)
	<-done
	<-done
	if got := p.b.U64(counter.GPA); got != 2*n {
		t.Fatalf("counter %d, want %d", got, 2*n)
	}
}

func TestInline(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{MaxInline: 64})
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteWrite, 128)
	msg := []byte("inline payload travels inside the WQE")
	p.qb.PostRecv(1, dst.SGE(64, 64))
	p.qa.PostSend(abi.SendWQE{WRID: 10, Opcode: abi.WRSend, Flags: abi.SendSignaled}, nil, msg)
	expect(t, p.ca.Wait(), 10, abi.WCSuccess, abi.WCSend)
	if r := p.cb.Wait(); r.ByteLen != uint32(len(msg)) || !bytes.Equal(dst.Bytes()[64:64+len(msg)], msg) {
		t.Fatalf("inline send: cqe %+v, bytes %q", r, dst.Bytes()[64:64+len(msg)])
	}
	// The guest rewriting the slot after ringing must not matter once the
	// engine copied it; an inline WRITE lands intact.
	p.qa.PostSend(abi.SendWQE{WRID: 11, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, nil, msg[:8])
	expect(t, p.ca.Wait(), 11, abi.WCSuccess, abi.WCRDMAWrite)
	if !bytes.Equal(dst.Bytes()[:8], msg[:8]) {
		t.Fatal("inline write")
	}
	// Inline longer than the QP allows: malformed WQE.
	p.qa.PostSend(abi.SendWQE{WRID: 12, Opcode: abi.WRSend, Flags: abi.SendSignaled}, nil, make([]byte, 65))
	expect(t, p.ca.Wait(), 12, abi.WCLocQPOpErr, abi.WCSend)
}

func TestSigAll(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{SigAll: true})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteWrite, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
}

func TestRNRThenSuccess(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RNRRetry = 7 // infinite
	p := newPair(t, conn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 16)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite, 16)
	fill(src.Bytes(), 5)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 16)}, nil)
	p.ca.ExpectNone(20 * time.Millisecond)
	if p.a.Eng.Stats().RNRNaks == 0 {
		t.Fatal("no RNR NAK counted while no receive was posted")
	}
	p.qb.PostRecv(2, dst.SGE(0, 16))
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCSend)
	expect(t, p.cb.Wait(), 2, abi.WCSuccess, abi.WCRecv)
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}

func TestRNRRetryExhausted(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RNRRetry = 2
	p := newPair(t, conn, enginetest.QPOpts{})
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend}, nil, nil) // unsignalled: errors complete anyway
	expect(t, p.ca.Wait(), 1, abi.WCRNRRetryExcErr, abi.WCSend)
	if n := p.a.Eng.Stats().RNRNaks; n != 3 {
		t.Fatalf("%d RNR NAKs, want 3 (first try and 2 retries)", n)
	}
	p.qa.WaitState(abi.QPStateErr)
	if ev := p.a.WaitEvent(abi.EventQPFatal, p.qa.QPN); ev.Info != uint32(abi.WCRNRRetryExcErr) {
		t.Fatalf("event %+v", ev)
	}
	// A WRITE_WITH_IMM finds no receive either: RNR, no data written.
}

func TestWriteImmRNRWritesNothing(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RNRRetry = 0
	p := newPair(t, conn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteWrite, 8)
	fill(src.Bytes(), 1)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWriteWithImm, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 1, abi.WCRNRRetryExcErr, abi.WCRDMAWrite)
	if !bytes.Equal(dst.Bytes(), make([]byte, 8)) {
		t.Fatal("a WRITE_WITH_IMM without a receive wrote data")
	}
}

func TestLoopbackQPOnOneDevice(t *testing.T) {
	// Two QPs of one device connected to each other go through the fabric
	// back into the same engine: must neither deadlock nor misroute.
	fab := newFabric()
	g := enginetest.NewGuest(t, fab, "solo", enginetest.Options{})
	cq := g.CreateCQ(64)
	q1 := g.CreateQP(pd, cq, cq, enginetest.QPOpts{})
	q2 := g.CreateQP(pd, cq, cq, enginetest.QPOpts{})
	enginetest.Connect(q1, q2, enginetest.DefaultConn)
	src := g.NewBuf(pd, 0, 32)
	dst := g.NewBuf(pd, abi.AccessLocalWrite, 32)
	fill(src.Bytes(), 77)
	q2.PostRecv(5, dst.SGE(0, 32))
	q1.PostSend(abi.SendWQE{WRID: 4, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 32)}, nil)
	seen := map[uint64]abi.CQE{}
	for len(seen) < 2 {
		c := cq.Wait()
		seen[c.WRID] = c
	}
	expect(t, seen[4], 4, abi.WCSuccess, abi.WCSend)
	expect(t, seen[5], 5, abi.WCSuccess, abi.WCRecv)
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}

// TestRNRWaitsForTheRespondersTimer: the RNR back-off is the responder's
// min_rnr_timer, carried in the NAK, not the requester's: with the
// responder at 0 (655.36 ms) and the requester at 1 (10 us), one RNR
// retry takes 655 ms, not 10 us.
func TestRNRWaitsForTheRespondersTimer(t *testing.T) {
	fab := newFabric()
	a := enginetest.NewGuest(t, fab, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, fab, "b", enginetest.Options{})
	ca, cb := a.CreateCQ(16), b.CreateCQ(16)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	ra, rb := enginetest.DefaultConn, enginetest.DefaultConn
	ra.MinRNRTimer, ra.RNRRetry = 1, 1
	rb.MinRNRTimer = 0
	qa.ToRTS(b.GID, qb.QPN, ra)
	qb.ToRTS(a.GID, qa.QPN, rb)
	src := a.NewBuf(pd, 0, 8)
	start := time.Now()
	qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
	ca.ExpectNone(300 * time.Millisecond)
	expect(t, ca.Wait(), 1, abi.WCRNRRetryExcErr, abi.WCSend)
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Fatalf("rnr_retry 1 exhausted after %v, want the responder's 655 ms", d)
	}
	if n := a.Eng.Stats().RNRNaks; n != 2 {
		t.Fatalf("%d RNR NAKs, want 2", n)
	}
}
