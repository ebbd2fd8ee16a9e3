package engine_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

func countEvents(g *enginetest.Guest, t abi.EventType, handle uint32) int {
	n := 0
	for _, ev := range g.Events() {
		if ev.Type == t && ev.Handle == handle {
			n++
		}
	}
	return n
}

// TestCQArm: NEXT_COMP arms for exactly one event; SOLICITED fires only
// for a solicited (or error) completion; an unarmed CQ stays silent.
func TestCQArm(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 64)
	write := func(id uint64) {
		p.qa.PostSend(abi.SendWQE{WRID: id, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
		p.ca.Wait()
	}
	write(1)
	if n := countEvents(p.a, abi.EventCQComp, p.ca.CQN); n != 0 {
		t.Fatalf("%d events on an unarmed CQ", n)
	}
	p.ca.Arm(abi.CQArmNextComp)
	write(2)
	p.a.WaitEvent(abi.EventCQComp, p.ca.CQN)
	write(3)
	time.Sleep(5 * time.Millisecond)
	if n := countEvents(p.a, abi.EventCQComp, p.ca.CQN); n != 1 {
		t.Fatalf("%d events after one arm", n)
	}
	rec := p.a.DB.View()
	off, _ := p.a.Layout.RecordOffset(p.ca.DB)
	if ack := rec.LoadUint32Acquire(off + abi.CQDoorbellOffArmAck); ack != 1 {
		t.Fatalf("arm_ack %d", ack)
	}

	// Solicited arming at the receiver.
	p.cb.Arm(abi.CQArmSolicited)
	p.qb.PostRecv(10, dst.SGE(0, 8))
	p.qa.PostSend(abi.SendWQE{WRID: 4, Opcode: abi.WRSend}, []abi.SGE{src.SGE(0, 8)}, nil)
	p.cb.Wait()
	time.Sleep(5 * time.Millisecond)
	if n := countEvents(p.b, abi.EventCQComp, p.cb.CQN); n != 0 {
		t.Fatal("an unsolicited receive fired a SOLICITED arm")
	}
	p.qb.PostRecv(11, dst.SGE(8, 8))
	p.qa.PostSend(abi.SendWQE{WRID: 5, Opcode: abi.WRSend, Flags: abi.SendSolicited}, []abi.SGE{src.SGE(0, 8)}, nil)
	p.cb.Wait()
	p.b.WaitEvent(abi.EventCQComp, p.cb.CQN)

	// An error completion fires a SOLICITED arm too.
	p.ca.Arm(abi.CQArmSolicited)
	p.qa.PostSend(abi.SendWQE{WRID: 6, Opcode: abi.WRRDMAWrite, RemoteAddr: dst.GPA, RKey: dst.Key ^ 0x300}, []abi.SGE{src.SGE(0, 8)}, nil)
	if c := p.ca.Wait(); c.Status != abi.WCRemAccessErr {
		t.Fatalf("status %v", c.Status)
	}
	deadline := time.Now().Add(2 * time.Second)
	for countEvents(p.a, abi.EventCQComp, p.ca.CQN) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no event for an error completion on a SOLICITED-armed CQ: %v", p.a.Events())
		}
		time.Sleep(time.Millisecond)
	}
}
