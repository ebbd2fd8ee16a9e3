package engine_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestThirdQPCannotUseConnectedQP: a QP connected to A cannot be written,
// read or sent to by a QP of a third device that names it; the intruder
// times out (RETRY_EXC_ERR) and the victim's memory and receives are
// untouched.
func TestThirdQPCannotUseConnectedQP(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	c := enginetest.NewGuest(t, p.fabric(), "c", enginetest.Options{})
	ccq := c.CreateCQ(16)
	conn := enginetest.DefaultConn
	conn.RetryCnt = 1
	victim := p.b.NewBuf(pd, abi.AccessAll, 64)
	fill(victim.Bytes(), 11)
	before := append([]byte{}, victim.Bytes()...)
	p.qb.PostRecv(1, victim.SGE(0, 64))
	src := c.NewBuf(pd, abi.AccessLocalWrite, 64)
	for i, op := range []abi.WROpcode{abi.WRRDMAWrite, abi.WRSend, abi.WRRDMARead, abi.WRAtomicFetchAdd} {
		q := c.CreateQP(pd, ccq, ccq, enginetest.QPOpts{})
		q.ToRTS(p.b.GID, p.qb.QPN, conn)
		n := uint64(64)
		if op.IsAtomic() {
			n = 8
		}
		q.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: op, RemoteAddr: victim.GPA, RKey: victim.Key, CompareAdd: 1}, []abi.SGE{src.SGE(0, n)}, nil)
		if cqe := ccq.Wait(); cqe.Status != abi.WCRetryExcErr {
			t.Fatalf("%v from a third QP: %v", op, cqe.Status)
		}
	}
	if !bytes.Equal(victim.Bytes(), before) || p.qb.RQCons() != 0 {
		t.Fatal("the third QP reached the victim")
	}
	// The legitimate peer still gets through.
	msg := p.a.NewBuf(pd, 0, 64)
	p.qa.PostSend(abi.SendWQE{WRID: 5, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{msg.SGE(0, 64)}, nil)
	expect(t, p.ca.Wait(), 5, abi.WCSuccess, abi.WCSend)
}

// TestDestroyWhileTrafficRuns: destroying the responder's QP (and then
// the requester's) while WRITEs stream must neither crash nor race; the
// requester ends with RETRY_EXC_ERR.
func TestDestroyWhileTrafficRuns(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RetryCnt = 1
	p := newPair(t, conn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 64<<10)
	dst := p.b.NewBuf(pd, abi.AccessAll, 64<<10)
	var wg sync.WaitGroup
	wg.Add(1)
	var last abi.WCStatus
	var ok int
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			p.qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 64<<10)}, nil)
			c := p.ca.Wait()
			last = c.Status
			if c.Status != abi.WCSuccess {
				return
			}
			ok++
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := p.b.Eng.DestroyQP(p.qb.QPN); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if last != abi.WCRetryExcErr || ok == 0 {
		t.Fatalf("after %d WRITEs: %v", ok, last)
	}
	if err := p.a.Eng.DestroyQP(p.qa.QPN); err != nil {
		t.Fatal(err)
	}
}

// TestStoppedPeer: while the responder's device is stopped the requester
// retries; it succeeds if the device comes back in time.
func TestStoppedPeer(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RetryCnt = 7
	conn.Timeout = 12 // ~16.8 ms
	p := newPair(t, conn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	fill(src.Bytes(), 1)
	p.b.Eng.Stop()
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	p.ca.ExpectNone(30 * time.Millisecond)
	if err := p.b.Eng.Start(p.b.Mem, p.b.DB.View(), p.b.Layout); err != nil {
		t.Fatal(err)
	}
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	if !bytes.Equal(dst.Bytes(), src.Bytes()) || p.a.Eng.Stats().Retries == 0 {
		t.Fatalf("data or retries (%+v)", p.a.Eng.Stats())
	}
	// The restarted device kept its QP and its counters.
	p.qb.PostRecv(3)
	if p.qb.RQCons() != 0 || p.qb.State() != abi.QPStateRTS {
		t.Fatal("restart lost QP state")
	}
}

// TestFaultyDeviceIsolated: a guest that truncates its memory file makes
// its own device fault; that device's QPs go to ERR (QP_FATAL), the
// process survives, and another pair's traffic is unaffected.
func TestFaultyDeviceIsolated(t *testing.T) {
	fab := newFabric()
	bad := enginetest.NewGuest(t, fab, "bad", enginetest.Options{Memfd: true, RAM: 4 << 20})
	peer := enginetest.NewGuest(t, fab, "peer", enginetest.Options{})
	x := enginetest.NewGuest(t, fab, "x", enginetest.Options{})
	y := enginetest.NewGuest(t, fab, "y", enginetest.Options{})
	bcq, pcq, xcq, ycq := bad.CreateCQ(16), peer.CreateCQ(16), x.CreateCQ(16), y.CreateCQ(16)
	qbad, qpeer := bad.CreateQP(pd, bcq, bcq, enginetest.QPOpts{}), peer.CreateQP(pd, pcq, pcq, enginetest.QPOpts{})
	qx, qy := x.CreateQP(pd, xcq, xcq, enginetest.QPOpts{}), y.CreateQP(pd, ycq, ycq, enginetest.QPOpts{})
	conn := enginetest.DefaultConn
	conn.RetryCnt = 1
	enginetest.Connect(qbad, qpeer, conn)
	enginetest.Connect(qx, qy, conn)
	bsrc := bad.NewBuf(pd, 0, 8)
	pdst := peer.NewBuf(pd, abi.AccessAll, 8)
	qbad.WriteSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: pdst.GPA, RKey: pdst.Key}, []abi.SGE{bsrc.SGE(0, 8)}, nil)
	// The guest's RAM vanishes under the device.
	if err := unix.Ftruncate(bad.Fd, 0); err != nil {
		t.Fatal(err)
	}
	qbad.RingSQ() // the doorbell region is separate memory
	if ev := bad.WaitEvent(abi.EventQPFatal, qbad.QPN); ev.Info != uint32(abi.WCFatalErr) {
		t.Fatalf("event %+v", ev)
	}
	if st := qbad.State(); st != abi.QPStateErr {
		t.Fatalf("faulted device's QP in %v", st)
	}
	// The peer's requests to the broken device fail cleanly.
	psrc := peer.NewBuf(pd, 0, 8)
	qpeer.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRSend}, []abi.SGE{psrc.SGE(0, 8)}, nil)
	if c := pcq.Wait(); c.Status != abi.WCRetryExcErr {
		t.Fatalf("peer: %v", c.Status)
	}
	// Another pair is unaffected.
	xs := x.NewBuf(pd, 0, 4096)
	yd := y.NewBuf(pd, abi.AccessAll, 4096)
	fill(xs.Bytes(), 3)
	for i := range 50 {
		qx.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: yd.GPA, RKey: yd.Key}, []abi.SGE{xs.SGE(0, 4096)}, nil)
		expect(t, xcq.Wait(), uint64(i), abi.WCSuccess, abi.WCRDMAWrite)
	}
	if !bytes.Equal(yd.Bytes(), xs.Bytes()) {
		t.Fatal("data differs")
	}
}

// memfdRegion maps a fresh memfd of n bytes, as a front-end's doorbell
// region in the guest-RAM fallback mode is; truncate cuts it under the
// mapping.
func memfdRegion(t *testing.T, n uint64) (m *guestmem.Mapping, truncate func()) {
	t.Helper()
	fd, err := unix.MemfdCreate("doorbells", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	m, err = guestmem.Map(fd, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	return m, func() {
		if err := unix.Ftruncate(fd, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartOnTruncatedDoorbellRegion: Start writes the doorbell records
// and the device page on the caller's goroutine; a region whose file the
// front-end truncated makes Start fail with BAD_ADDRESS instead of
// killing the process, and leaves the engine stopped and usable.
func TestStartOnTruncatedDoorbellRegion(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	// A device that was never started has its records zeroed at Start,
	// one that was has them rewritten: both write.
	fresh := engine.New(engine.Config{Name: "fresh", Limits: enginetest.Limits, MTT: p.a.MTT, GID: p.a.GID})
	if err := fresh.SetMemory(p.a.Mem); err != nil {
		t.Fatal(err)
	}
	ring := p.a.Alloc(16*abi.CQESize, abi.CQESize)
	if err := fresh.CreateCQ(engine.CQSpec{CQN: 1, Doorbell: enginetest.Limits.MaxQP, RingAddr: ring, Entries: 16}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*engine.Engine{p.a.Eng, fresh} {
		if e == p.a.Eng {
			e.Stop()
		}
		m, truncate := memfdRegion(t, p.a.Layout.Size())
		truncate()
		wantStatus(t, "start on a truncated region", e.Start(p.a.Mem, m.View(), p.a.Layout), abi.StatusBadAddress)
		// Nothing half-started: the gate is free (Stop and Start would
		// hang otherwise) and a good region works.
		e.Stop()
		if e == fresh {
			continue
		}
		if err := e.Start(p.a.Mem, p.a.DB.View(), p.a.Layout); err != nil {
			t.Fatal(err)
		}
	}
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
}

// TestControlPathOnTruncatedDoorbellRegion: with the doorbell region
// truncated under a running device, the control-path writes into it
// (a new CQ's or QP's record) fail with BAD_ADDRESS; the process
// survives, the device is broken (its QPs in ERR, RESET still works)
// until it gets a region again.
func TestControlPathOnTruncatedDoorbellRegion(t *testing.T) {
	g := enginetest.NewGuest(t, newFabric(), "g", enginetest.Options{})
	cq := g.CreateCQ(16)
	q := g.CreateQP(pd, cq, cq, enginetest.QPOpts{})
	q.ToRTS(g.GID, 60, enginetest.DefaultConn)
	g.Eng.Stop()
	m, truncate := memfdRegion(t, g.Layout.Size())
	if err := g.Eng.Start(g.Mem, m.View(), g.Layout); err != nil {
		t.Fatal(err)
	}
	truncate()
	ring := g.Alloc(16*abi.CQESize, abi.CQESize)
	wantStatus(t, "create cq", g.Eng.CreateCQ(engine.CQSpec{CQN: 9, Doorbell: enginetest.Limits.MaxQP + 8, RingAddr: ring, Entries: 16}), abi.StatusBadAddress)
	wantStatus(t, "create qp", g.Eng.CreateQP(qpSpec(g, 30, cq.CQN, cq.CQN)), abi.StatusBadAddress)
	g.WaitEvent(abi.EventQPFatal, q.QPN)
	if err := g.Eng.ModifyQP(q.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if st := q.State(); st != abi.QPStateReset {
		t.Fatalf("state %v", st)
	}
	// Refused creations left nothing behind: with a good region again the
	// same numbers and records are free.
	g.Eng.Stop()
	if err := g.Eng.Start(g.Mem, g.DB.View(), g.Layout); err != nil {
		t.Fatal(err)
	}
	if err := g.Eng.CreateCQ(engine.CQSpec{CQN: 9, Doorbell: enginetest.Limits.MaxQP + 8, RingAddr: ring, Entries: 16}); err != nil {
		t.Fatal(err)
	}
	if err := g.Eng.CreateQP(qpSpec(g, 30, cq.CQN, cq.CQN)); err != nil {
		t.Fatal(err)
	}
}
