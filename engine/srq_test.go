package engine_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// srqRig is one receiving guest b with an SRQ shared by n QPs, each
// connected to its own QP on guest a. Each runs on the in-process fabric
// and on the cross-host one, since the two take receives on different
// paths (Respond, Begin/Commit).
type srqRig struct {
	fa     fabric.Fabric
	a, b   *enginetest.Guest
	ca, cb *enginetest.CQ
	srq    *enginetest.SRQ
	qa, qb []*enginetest.QP
}

type srqFabric struct {
	name string
	mk   func(t *testing.T) (fa, fb fabric.Fabric)
}

var srqFabrics = []srqFabric{
	{"local", func(*testing.T) (fabric.Fabric, fabric.Fabric) { f := fabric.NewLocal(); return f, f }},
	{"crosshost", func(t *testing.T) (fabric.Fabric, fabric.Fabric) { fa, fb := crossHosts(t, patient); return fa, fb }},
}

// rnrNaks counts the RNR NAKs guest a's requests got, wherever its fabric
// counts them.
func rnrNaks(a *enginetest.Guest, fa fabric.Fabric) uint64 {
	if r, ok := fa.(*remote.Fabric); ok {
		return r.Stats().RNRNaks
	}
	return a.Eng.Stats().RNRNaks
}

// eachFabric runs fn as a subtest on both fabrics.
func eachFabric(t *testing.T, fn func(t *testing.T, f srqFabric)) {
	for _, f := range srqFabrics {
		t.Run(f.name, func(t *testing.T) { fn(t, f) })
	}
}

func newSRQRig(t *testing.T, f srqFabric, n int, size, limit uint32, conn enginetest.ConnOpts) *srqRig {
	t.Helper()
	fa, fb := f.mk(t)
	r := &srqRig{fa: fa, a: enginetest.NewGuest(t, fa, "a", enginetest.Options{}), b: enginetest.NewGuest(t, fb, "b", enginetest.Options{})}
	r.ca, r.cb = r.a.CreateCQ(1024), r.b.CreateCQ(1024)
	r.srq = r.b.CreateSRQ(pd, size, 2, limit)
	for range n {
		qa := r.a.CreateQP(pd, r.ca, r.ca, enginetest.QPOpts{})
		qb := r.b.CreateQP(pd, r.cb, r.cb, enginetest.QPOpts{SRQ: r.srq})
		enginetest.Connect(qa, qb, conn)
		r.qa, r.qb = append(r.qa, qa), append(r.qb, qb)
	}
	return r
}

// TestSRQManyQPs: eight QPs take 32 receives from one SRQ. Every WQE
// completes once, on the QP its message arrived at, with that message's
// bytes; each QP's receives complete in its message order; the SRQ's
// slots are all freed. On the in-process fabric, where requests reach
// the SRQ one at a time, the WQEs are taken in ring order across QPs.
func TestSRQManyQPs(t *testing.T) {
	eachFabric(t, func(t *testing.T, f srqFabric) {
		const nQP, perQP, msg = 8, 4, 64
		r := newSRQRig(t, f, nQP, 64, 0, enginetest.DefaultConn)
		dst := r.b.NewBuf(pd, abi.AccessLocalWrite, nQP*perQP*msg)
		for i := range nQP * perQP {
			r.srq.PostRecv(uint64(i), dst.SGE(uint64(i*msg), msg))
		}
		src := r.a.NewBuf(pd, 0, nQP*perQP*msg)
		fill(src.Bytes(), 3)
		for k := range perQP {
			for i, q := range r.qa {
				j := k*nQP + i
				q.PostSend(abi.SendWQE{WRID: uint64(j), Opcode: abi.WRSend, Flags: abi.SendSignaled},
					[]abi.SGE{src.SGE(uint64(j*msg), msg)}, nil)
			}
		}
		for range nQP * perQP {
			if c := r.ca.Wait(); c.Status != abi.WCSuccess {
				t.Fatalf("send %+v", c)
			}
		}
		seen := map[uint64]bool{}
		next := map[uint32]int{} // per QP on a: the next message k expected
		lastWRID := int64(-1)
		for range nQP * perQP {
			c := r.cb.Wait()
			if c.Status != abi.WCSuccess || c.Opcode != abi.WCRecv || c.ByteLen != msg || seen[c.WRID] || c.WRID >= nQP*perQP {
				t.Fatalf("recv %+v", c)
			}
			seen[c.WRID] = true
			i := -1
			for x, q := range r.qa {
				if q.QPN == c.SrcQP && r.qb[x].QPN == c.QPN {
					i = x
				}
			}
			if i < 0 {
				t.Fatalf("recv %+v from no connected pair", c)
			}
			j := next[c.SrcQP]*nQP + i
			next[c.SrcQP]++
			got := dst.Bytes()[c.WRID*msg : (c.WRID+1)*msg]
			if !bytes.Equal(got, src.Bytes()[j*msg:(j+1)*msg]) {
				t.Fatalf("QP %d's message %d landed wrong in WQE %d", c.QPN, j, c.WRID)
			}
			if f.name == "local" && int64(c.WRID) <= lastWRID {
				t.Fatalf("WQE %d completed after %d: not taken in ring order", c.WRID, lastWRID)
			}
			lastWRID = int64(c.WRID)
		}
		if cons := r.srq.Cons(); cons != nQP*perQP {
			t.Fatalf("srq cons %d, want %d", cons, nQP*perQP)
		}
		r.cb.ExpectNone(5 * time.Millisecond)
	})
}

// TestSRQEmptyIsRNR: a SEND to an empty SRQ gets RNR NAKs until a WQE is
// posted; posting needs no kick.
func TestSRQEmptyIsRNR(t *testing.T) {
	eachFabric(t, func(t *testing.T, f srqFabric) {
		conn := enginetest.DefaultConn
		conn.RNRRetry = 7
		r := newSRQRig(t, f, 2, 16, 0, conn)
		src, dst := r.a.NewBuf(pd, 0, 32), r.b.NewBuf(pd, abi.AccessLocalWrite, 32)
		fill(src.Bytes(), 9)
		r.qa[1].PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 32)}, nil)
		r.ca.ExpectNone(20 * time.Millisecond)
		if rnrNaks(r.a, r.fa) == 0 {
			t.Fatal("no RNR while the SRQ was empty")
		}
		r.srq.PostRecv(7, dst.SGE(0, 32))
		expect(t, r.ca.Wait(), 1, abi.WCSuccess, abi.WCSend)
		c := r.cb.Wait()
		expect(t, c, 7, abi.WCSuccess, abi.WCRecv)
		if c.QPN != r.qb[1].QPN || !bytes.Equal(dst.Bytes(), src.Bytes()) {
			t.Fatalf("recv %+v, bytes %x", c, dst.Bytes())
		}
	})
}

// TestSRQGiveBack: a WRITE_WITH_IMM refused after it took a WQE (its
// rkey is bad) gives the WQE back: the next message gets that same WQE,
// and nothing completes on the responder for the refused one.
func TestSRQGiveBack(t *testing.T) {
	eachFabric(t, func(t *testing.T, f srqFabric) {
		r := newSRQRig(t, f, 2, 16, 0, enginetest.DefaultConn)
		src, dst := r.a.NewBuf(pd, 0, 8), r.b.NewBuf(pd, abi.AccessAll, 64)
		r.srq.PostRecv(1, dst.SGE(0, 32))
		r.srq.PostRecv(2, dst.SGE(32, 32))
		r.qa[0].PostSend(abi.SendWQE{WRID: 10, Opcode: abi.WRRDMAWriteWithImm, Flags: abi.SendSignaled, RemoteAddr: dst.GPA,
			RKey: dst.Key ^ 0xff00}, []abi.SGE{src.SGE(0, 8)}, nil)
		expect(t, r.ca.Wait(), 10, abi.WCRemAccessErr, abi.WCRDMAWrite)
		r.qa[1].PostSend(abi.SendWQE{WRID: 11, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
		expect(t, r.ca.Wait(), 11, abi.WCSuccess, abi.WCSend)
		if c := r.cb.Wait(); c.WRID != 1 || c.Status != abi.WCSuccess || c.QPN != r.qb[1].QPN {
			t.Fatalf("recv %+v: the given-back WQE 1 should serve the next message", c)
		}
		r.cb.ExpectNone(5 * time.Millisecond)
	})
}

// TestSRQLimit: an armed limit fires once when the SRQ falls below it and
// is disarmed; arming it below the current count fires at once.
func TestSRQLimit(t *testing.T) {
	r := newSRQRig(t, srqFabrics[0], 1, 16, 4, enginetest.DefaultConn)
	src, dst := r.a.NewBuf(pd, 0, 8), r.b.NewBuf(pd, abi.AccessLocalWrite, 8*8)
	for i := range 6 {
		r.srq.PostRecv(uint64(i), dst.SGE(uint64(8*i), 8))
	}
	send := func(n int) {
		for i := range n {
			r.qa[0].PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
			r.ca.Wait()
			r.cb.Wait()
		}
	}
	send(2) // 4 left: not below 4
	if countEvents(r.b, abi.EventSRQLimit, r.srq.SRQN) != 0 {
		t.Fatal("limit event with 4 WQEs left and a limit of 4")
	}
	send(1) // 3 left
	r.b.WaitEvent(abi.EventSRQLimit, r.srq.SRQN)
	if a, err := r.b.Eng.QuerySRQ(r.srq.SRQN); err != nil || a.Limit != 0 || a.MaxWR != 16 || a.MaxSGE != 2 || a.PDN != pd {
		t.Fatalf("query after the event: %+v %v", a, err)
	}
	send(1)
	if n := countEvents(r.b, abi.EventSRQLimit, r.srq.SRQN); n != 1 {
		t.Fatalf("%d limit events, want 1 (disarmed after the first)", n)
	}
	if err := r.b.Eng.ArmSRQLimit(r.srq.SRQN, 5); err != nil { // 2 left
		t.Fatal(err)
	}
	if n := countEvents(r.b, abi.EventSRQLimit, r.srq.SRQN); n != 2 {
		t.Fatalf("%d limit events after arming above the count, want 2", n)
	}
	if err := r.b.Eng.ArmSRQLimit(r.srq.SRQN, 16); !errors.Is(err, abi.StatusInvalidArgument) {
		t.Fatalf("limit of the size: %v", err)
	}
}

// TestSRQQPErrorSparesTheSRQ: a QP on the SRQ that goes to ERR gets
// QP_LAST_WQE and flushes nothing of the SRQ's ring; the other QP goes
// on taking every WQE.
func TestSRQQPErrorSparesTheSRQ(t *testing.T) {
	eachFabric(t, func(t *testing.T, f srqFabric) {
		r := newSRQRig(t, f, 2, 16, 0, enginetest.DefaultConn)
		src, dst := r.a.NewBuf(pd, 0, 8), r.b.NewBuf(pd, abi.AccessLocalWrite, 4*8)
		for i := range 4 {
			r.srq.PostRecv(uint64(i), dst.SGE(uint64(8*i), 8))
		}
		r.b.Eng.FailQP(r.qb[0].QPN)
		r.b.WaitEvent(abi.EventQPLastWQE, r.qb[0].QPN)
		r.qb[0].WaitState(abi.QPStateErr)
		r.cb.ExpectNone(5 * time.Millisecond) // nothing of the ring flushed
		if cons := r.srq.Cons(); cons != 0 {
			t.Fatalf("srq cons %d after a QP's error", cons)
		}
		for i := range 4 {
			r.qa[1].PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
			expect(t, r.ca.Wait(), uint64(i), abi.WCSuccess, abi.WCSend)
			if c := r.cb.Wait(); c.QPN != r.qb[1].QPN || c.Status != abi.WCSuccess {
				t.Fatalf("recv %+v", c)
			}
		}
		if n := countEvents(r.b, abi.EventQPLastWQE, r.qb[0].QPN); n != 1 {
			t.Fatalf("%d LAST_WQE events", n)
		}
	})
}

// TestSRQBadWQE: a malformed WQE fails only the QP that took it (its
// receive CQ gets LOC_QP_OP_ERR, the requester REM_OP_ERR); the next WQE
// serves the other QP.
func TestSRQBadWQE(t *testing.T) {
	eachFabric(t, func(t *testing.T, f srqFabric) {
		r := newSRQRig(t, f, 2, 16, 0, enginetest.DefaultConn)
		src, dst := r.a.NewBuf(pd, 0, 8), r.b.NewBuf(pd, abi.AccessLocalWrite, 8)
		slot := r.srq.RawSlot()
		clear(slot)
		abi.RecvWQE{WRID: 66, NumSGE: 3}.Put(slot) // the SRQ takes 2
		r.srq.Commit()
		r.srq.PostRecv(67, dst.SGE(0, 8))
		r.qa[0].PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
		expect(t, r.ca.Wait(), 1, abi.WCRemOpErr, abi.WCSend)
		c := r.cb.Wait()
		expect(t, c, 66, abi.WCLocQPOpErr, abi.WCRecv)
		if c.QPN != r.qb[0].QPN {
			t.Fatalf("bad WQE completed on QP %d", c.QPN)
		}
		r.qb[0].WaitState(abi.QPStateErr)
		r.qa[1].PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
		expect(t, r.ca.Wait(), 2, abi.WCSuccess, abi.WCSend)
		for {
			c := r.cb.Wait()
			if c.Status == abi.WCWRFlushErr {
				continue // qb[0]'s send queue, if anything
			}
			expect(t, c, 67, abi.WCSuccess, abi.WCRecv)
			break
		}
	})
}

// TestSRQRunawayProd: a producer index more than the size ahead puts the
// SRQ in error (SRQ_ERR); the QP that needed a receive goes to ERR and
// its requester gets REM_OP_ERR.
func TestSRQRunawayProd(t *testing.T) {
	eachFabric(t, func(t *testing.T, f srqFabric) {
		r := newSRQRig(t, f, 1, 16, 0, enginetest.DefaultConn)
		src := r.a.NewBuf(pd, 0, 8)
		r.srq.SetProd(17)
		r.qa[0].PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 8)}, nil)
		expect(t, r.ca.Wait(), 1, abi.WCRemOpErr, abi.WCSend)
		r.b.WaitEvent(abi.EventSRQErr, r.srq.SRQN)
		r.b.WaitEvent(abi.EventQPFatal, r.qb[0].QPN)
		r.b.WaitEvent(abi.EventQPLastWQE, r.qb[0].QPN)
		if n := countEvents(r.b, abi.EventSRQErr, r.srq.SRQN); n != 1 {
			t.Fatalf("%d SRQ_ERR events", n)
		}
	})
}

// TestSRQControl checks the engine's side of the control path: sizes,
// PD ownership, and that an SRQ in use cannot be destroyed.
func TestSRQControl(t *testing.T) {
	fab := fabric.NewLocal()
	g := enginetest.NewGuest(t, fab, "g", enginetest.Options{})
	cq := g.CreateCQ(16)
	s := g.CreateSRQ(pd, 16, 2, 0)
	ring := g.Alloc(16*64, 64)
	for _, c := range []struct {
		name string
		spec engine.SRQSpec
		want abi.Status
	}{
		{"srqn 0", engine.SRQSpec{PDN: pd, Doorbell: 140, Size: 16, RingAddr: ring}, abi.StatusInvalidArgument},
		{"srqn in use", engine.SRQSpec{SRQN: s.SRQN, PDN: pd, Doorbell: 140, Size: 16, RingAddr: ring}, abi.StatusBusy},
		{"size 3", engine.SRQSpec{SRQN: 9, PDN: pd, Doorbell: 140, Size: 3, RingAddr: ring}, abi.StatusInvalidArgument},
		{"too many SGEs", engine.SRQSpec{SRQN: 9, PDN: pd, Doorbell: 140, Size: 16, MaxSGE: 99, RingAddr: ring}, abi.StatusInvalidArgument},
		{"limit of the size", engine.SRQSpec{SRQN: 9, PDN: pd, Doorbell: 140, Size: 16, Limit: 16, RingAddr: ring}, abi.StatusInvalidArgument},
		{"record in use", engine.SRQSpec{SRQN: 9, PDN: pd, Doorbell: s.DB, Size: 16, RingAddr: ring}, abi.StatusBusy},
		{"ring outside RAM", engine.SRQSpec{SRQN: 9, PDN: pd, Doorbell: 140, Size: 16, RingAddr: 1 << 40}, abi.StatusBadAddress},
		{"misaligned ring", engine.SRQSpec{SRQN: 9, PDN: pd, Doorbell: 140, Size: 16, RingAddr: ring + 8}, abi.StatusInvalidArgument},
	} {
		if err := g.Eng.CreateSRQ(c.spec); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	qp := func(pdn, srqn, rqSize uint32, rqAddr uint64) error {
		sq := g.Alloc(16*256, 256)
		return g.Eng.CreateQP(engine.QPSpec{QPN: 40, PDN: pdn, Type: abi.QPTypeRC, SendCQN: cq.CQN, RecvCQN: cq.CQN, SRQN: srqn,
			Doorbell: 38, SQSize: 16, RQSize: rqSize, MaxSendSGE: 1, SQAddr: sq, RQAddr: rqAddr})
	}
	for _, c := range []struct {
		name      string
		pdn, srqn uint32
		rqSize    uint32
		rqAddr    uint64
		want      abi.Status
	}{
		{name: "unknown SRQ", pdn: pd, srqn: 9, want: abi.StatusNotFound},
		{name: "SRQ of another PD", pdn: pd + 1, srqn: s.SRQN, want: abi.StatusPermission},
		{name: "an RQ too", pdn: pd, srqn: s.SRQN, rqSize: 16, want: abi.StatusInvalidArgument},
		{name: "an RQ address", pdn: pd, srqn: s.SRQN, rqAddr: g.Alloc(64, 64), want: abi.StatusInvalidArgument},
	} {
		if err := qp(c.pdn, c.srqn, c.rqSize, c.rqAddr); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := qp(pd, s.SRQN, 0, 0); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Eng.QueryQP(40); err != nil || r.Cap.SRQN != s.SRQN || r.Cap.RQSize != 0 {
		t.Fatalf("query qp on srq: %+v %v", r.Cap, err)
	}
	if err := g.Eng.DestroySRQ(s.SRQN); !errors.Is(err, abi.StatusBusy) {
		t.Fatalf("destroy of an SRQ in use: %v", err)
	}
	if err := g.Eng.DestroyQP(40); err != nil {
		t.Fatal(err)
	}
	if err := g.Eng.DestroySRQ(s.SRQN); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint32{s.SRQN, 0, 1 << 31} {
		if err := g.Eng.DestroySRQ(n); !errors.Is(err, abi.StatusNotFound) {
			t.Errorf("destroy srq %d: %v", n, err)
		}
		if _, err := g.Eng.QuerySRQ(n); !errors.Is(err, abi.StatusNotFound) {
			t.Errorf("query srq %d: %v", n, err)
		}
		if err := g.Eng.ArmSRQLimit(n, 1); !errors.Is(err, abi.StatusNotFound) {
			t.Errorf("arm srq %d: %v", n, err)
		}
	}
}

// TestSRQStreamedReceives drives the cross-host path's steps directly
// (Begin, Place, Commit, Release), where a receive is taken at Begin and
// may be in progress for long: a SEND released uncommitted gives its WQE
// back, so the next SEND (on another QP) gets it; when a QP goes to ERR
// with a receive in progress, that receive alone completes WR_FLUSH_ERR
// (then QP_LAST_WQE), its later Commit is refused, and the SRQ's other
// WQEs stay for the other QP.
func TestSRQStreamedReceives(t *testing.T) {
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{})
	ca, cb := a.CreateCQ(16), b.CreateCQ(16)
	s := b.CreateSRQ(pd, 16, 1, 0)
	var qa, qb [2]*enginetest.QP
	for i := range qa {
		qa[i] = a.CreateQP(pd, ca, ca, enginetest.QPOpts{})
		qb[i] = b.CreateQP(pd, cb, cb, enginetest.QPOpts{SRQ: s})
		enginetest.Connect(qa[i], qb[i], enginetest.DefaultConn)
	}
	dst := b.NewBuf(pd, abi.AccessLocalWrite, 3*8)
	for i := range 3 {
		s.PostRecv(uint64(10+i), dst.SGE(uint64(8*i), 8))
	}
	send := func(i int) (fabric.Incoming, fabric.Outcome) {
		return entered(b.Eng).Begin(&fabric.Request{Op: fabric.OpSend, Len: 8,
			Src: fabric.Addr{GID: a.GID, QPN: qa[i].QPN}, Dst: fabric.Addr{GID: b.GID, QPN: qb[i].QPN}})
	}
	msg := []byte("8 bytes!")

	// Taken at Begin, given back at Release.
	first, o := send(0)
	if o != fabric.OutcomeOK || s.Cons() != 1 {
		t.Fatalf("Begin: %v, srq cons %d", o, s.Cons())
	}
	first.Release()
	in, o := send(1)
	if o != fabric.OutcomeOK || !in.Place(0, msg) || in.Commit() != fabric.OutcomeOK {
		t.Fatalf("SEND on QP %d: %v", qb[1].QPN, o)
	}
	in.Release()
	if c := cb.Wait(); c.WRID != 10 || c.Status != abi.WCSuccess || c.QPN != qb[1].QPN || !bytes.Equal(dst.Bytes()[:8], msg) {
		t.Fatalf("recv %+v: want the given-back WQE 10 on QP %d", c, qb[1].QPN)
	}
	if s.Cons() != 1 {
		t.Fatalf("srq cons %d: the given-back WQE was taken from the ring again", s.Cons())
	}

	// In progress when its QP goes to ERR: flushed, alone.
	held, o := send(0)
	if o != fabric.OutcomeOK || !held.Place(0, msg) {
		t.Fatalf("Begin: %v", o)
	}
	b.Eng.FailQP(qb[0].QPN)
	if c := cb.Wait(); c.WRID != 11 || c.Status != abi.WCWRFlushErr || c.QPN != qb[0].QPN {
		t.Fatalf("flush %+v: want WQE 11 flushed on QP %d", c, qb[0].QPN)
	}
	b.WaitEvent(abi.EventQPLastWQE, qb[0].QPN)
	if o := held.Commit(); o == fabric.OutcomeOK {
		t.Fatal("a flushed receive committed")
	}
	held.Release()
	cb.ExpectNone(5 * time.Millisecond)
	in, o = send(1)
	if o != fabric.OutcomeOK || !in.Place(0, msg) || in.Commit() != fabric.OutcomeOK {
		t.Fatalf("SEND after the other QP's error: %v", o)
	}
	in.Release()
	if c := cb.Wait(); c.WRID != 12 || c.Status != abi.WCSuccess {
		t.Fatalf("recv %+v: want WQE 12", c)
	}
}
