package engine_test

import (
	"testing"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestDMAPinsOnDemandAndLetsGo: every DMA pins the chunks it touches
// (first touch pins, later ones hit) and releases its references when it
// is over, whatever the outcome; the only chunks held between DMAs are
// the queues' rings, and they go with the queues.
func TestDMAPinsOnDemandAndLetsGo(t *testing.T) {
	fab := fabric.NewLocal()
	a := enginetest.NewGuest(t, fab, "a", enginetest.Options{RAM: 32 << 20})
	b := enginetest.NewGuest(t, fab, "b", enginetest.Options{RAM: 32 << 20})
	ca, cb := a.CreateCQ(64), b.CreateCQ(64)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	ringsA, ringsB := a.Pins.Held(), b.Pins.Held()
	if ringsA == 0 || ringsB == 0 {
		t.Fatal("queue rings are not pinned")
	}
	// Buffers in chunks of their own, several chunks long.
	a.Alloc(pvdma.ChunkSize, pvdma.ChunkSize)
	b.Alloc(pvdma.ChunkSize, pvdma.ChunkSize)
	src := a.NewBuf(pd, abi.AccessLocalWrite, 3*pvdma.ChunkSize)
	dst := b.NewBuf(pd, abi.AccessAll, 3*pvdma.ChunkSize)
	before := b.Pins.Stats()
	n := uint32(3 * pvdma.ChunkSize)
	qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, uint64(n))}, nil)
	expect(t, ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	if s := b.Pins.Stats(); s.Misses-before.Misses < 3 {
		t.Fatalf("the WRITE pinned %d chunks of the target, want >= 3", s.Misses-before.Misses)
	}
	qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMARead, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 4096)}, nil)
	expect(t, ca.Wait(), 2, abi.WCSuccess, abi.WCRDMARead)
	qb.PostRecv(3, dst.SGE(0, 4096))
	qa.PostSend(abi.SendWQE{WRID: 4, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 4096)}, nil)
	expect(t, ca.Wait(), 4, abi.WCSuccess, abi.WCSend)
	expect(t, cb.Wait(), 3, abi.WCSuccess, abi.WCRecv)
	qa.PostSend(abi.SendWQE{WRID: 5, Opcode: abi.WRAtomicFetchAdd, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key, CompareAdd: 1}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, ca.Wait(), 5, abi.WCSuccess, abi.WCFetchAdd)
	if s := b.Pins.Stats(); s.Hits == before.Hits {
		t.Fatal("later DMAs to pinned chunks did not hit the cache")
	}
	if ha, hb := a.Pins.Held(), b.Pins.Held(); ha != ringsA || hb != ringsB {
		t.Fatalf("after the DMAs %d/%d chunks held, want only the rings' %d/%d", ha, hb, ringsA, ringsB)
	}
	// A DMA that fails (bad rkey) lets go too, and the QPs go to ERR.
	qa.PostSend(abi.SendWQE{WRID: 6, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key + 1}, []abi.SGE{src.SGE(0, 4096)}, nil)
	expect(t, ca.Wait(), 6, abi.WCRemAccessErr, abi.WCRDMAWrite)
	if ha, hb := a.Pins.Held(), b.Pins.Held(); ha != ringsA || hb != ringsB {
		t.Fatalf("after a failed DMA %d/%d chunks held, want %d/%d", ha, hb, ringsA, ringsB)
	}
	for _, g := range []struct {
		g  *enginetest.Guest
		qp uint32
		cq uint32
	}{{a, qa.QPN, ca.CQN}, {b, qb.QPN, cb.CQN}} {
		if err := g.g.Eng.DestroyQP(g.qp); err != nil {
			t.Fatal(err)
		}
		if err := g.g.Eng.DestroyCQ(g.cq); err != nil {
			t.Fatal(err)
		}
		if h := g.g.Pins.Held(); h != 0 {
			t.Fatalf("%v: %d chunks held with no queue and no DMA", g.g, h)
		}
	}
}

// TestPinBudgetExhaustedFailsTheDMA: a responder whose pin budget is all
// held (here by its rings) cannot pin the target chunk: the WRITE
// completes with REM_OP_ERR instead of hanging, and nothing is written.
func TestPinBudgetExhaustedFailsTheDMA(t *testing.T) {
	fab := fabric.NewLocal()
	a := enginetest.NewGuest(t, fab, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, fab, "b", enginetest.Options{PinBudget: pvdma.ChunkSize})
	ca, cb := a.CreateCQ(64), b.CreateCQ(64)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	if b.Pins.Held() != 1 {
		t.Fatalf("setup: %d chunks held, want the rings' one", b.Pins.Held())
	}
	src := a.NewBuf(pd, 0, 64)
	b.Alloc(pvdma.ChunkSize, pvdma.ChunkSize)
	dst := b.NewBuf(pd, abi.AccessAll, 64)
	fill(src.Bytes(), 9)
	qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 64)}, nil)
	expect(t, ca.Wait(), 1, abi.WCRemOpErr, abi.WCRDMAWrite)
	for _, x := range dst.Bytes() {
		if x != 0 {
			t.Fatal("a WRITE that could not pin its target wrote it")
		}
	}
	if s := b.Pins.Stats(); s.PinFailures == 0 {
		t.Fatalf("stats %+v", s)
	}
}
