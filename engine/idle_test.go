package engine_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

func waitIdle(t *testing.T, g *enginetest.Guest) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	// Idle means asleep and staying asleep: a kick from the set-up may
	// still be on its way, and the engine wakes once more for it.
	for {
		s := g.Eng.Stats().Sleeps
		if g.EngineFlags()&abi.EngineIdle != 0 && s != 0 {
			time.Sleep(5 * time.Millisecond)
			if g.EngineFlags()&abi.EngineIdle != 0 && g.Eng.Stats().Sleeps == s {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: engine never went idle (flags %#x, stats %+v)", g.Name, g.EngineFlags(), g.Eng.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestIdleAndWake: with no work the engine announces EngineIdle and
// sleeps; a doorbell followed by the driver's kick (Wake) gets the work
// done and the engine counts the wakeup in the device page.
func TestIdleAndWake(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	waitIdle(t, p.a)
	sleeps := p.a.Eng.Stats().Sleeps
	time.Sleep(20 * time.Millisecond)
	if s := p.a.Eng.Stats(); s.Sleeps != sleeps {
		t.Fatalf("an idle engine with no work woke up: sleeps %d -> %d", sleeps, s.Sleeps)
	}
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	// Doorbell without a kick: the sleeping engine does not see it.
	p.qa.WriteSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	wakeups := p.a.Eng.Stats().Wakeups
	p.a.DB.View().StoreUint32Release(mustOff(t, p.a, p.qa.DB), p.qa.SQProd)
	p.ca.ExpectNone(10 * time.Millisecond)
	// The kick wakes it.
	p.a.Eng.Wake()
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	if s := p.a.Eng.Stats(); s.Wakeups <= wakeups {
		t.Fatalf("wakeups %d -> %d", wakeups, s.Wakeups)
	}
	if w := p.a.DB.View().LoadUint64Acquire(abi.DevPageOffWakeups); w == 0 {
		t.Fatal("device page wakeup counter not written")
	}
	waitIdle(t, p.a)
}

func mustOff(t *testing.T, g *enginetest.Guest, rec uint32) uint64 {
	off, ok := g.Layout.RecordOffset(rec)
	if !ok {
		t.Fatal("record")
	}
	return off + abi.QPDoorbellOffSQProd
}

// TestBusyEngineNeedsNoKick: back-to-back work is found by polling, not
// by kicks: the driver sees EngineIdle clear while traffic flows.
func TestBusyEngineNeedsNoKick(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	kicksNeeded := 0
	for i := range 200 {
		p.qa.WriteSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
		p.a.DB.View().StoreUint32Release(mustOff(t, p.a, p.qa.DB), p.qa.SQProd)
		if p.a.EngineFlags()&abi.EngineIdle != 0 {
			kicksNeeded++
			p.a.Eng.Wake()
		}
		p.ca.Wait()
	}
	if kicksNeeded > 20 {
		t.Fatalf("%d of 200 back-to-back WQEs needed a kick", kicksNeeded)
	}
}

// TestIdleEnginesUseNoCPU: 100 started, idle engines cost under 2% of one
// core.
func TestIdleEnginesUseNoCPU(t *testing.T) {
	fab := fabric.NewLocal()
	gs := make([]*enginetest.Guest, 100)
	for i := range gs {
		gs[i] = enginetest.NewGuest(t, fab, fmt.Sprintf("idle%d", i), enginetest.Options{RAM: 1 << 20})
		cq := gs[i].CreateCQ(8)
		gs[i].CreateQP(pd, cq, cq, enginetest.QPOpts{SQSize: 8, RQSize: 8})
	}
	for _, g := range gs {
		waitIdle(t, g)
	}
	before := cpuTime(t)
	start := time.Now()
	time.Sleep(time.Second)
	used := cpuTime(t) - before
	wall := time.Since(start)
	if frac := float64(used) / float64(wall); frac > 0.02 {
		t.Fatalf("100 idle engines used %v of CPU in %v (%.1f%% of a core)", used, wall, 100*frac)
	} else {
		t.Logf("100 idle engines: %v CPU in %v (%.2f%%)", used, wall, 100*frac)
	}
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdlePollWithoutKicks: for a driver that did not negotiate
// IDLE_WAKEUP (it never kicks), SetIdlePoll makes the sleeping engine find
// a doorbell on its own.
func TestIdlePollWithoutKicks(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	p.a.Eng.SetIdlePoll(time.Millisecond)
	// Polling while idle: the engine sleeps and wakes every period, so
	// wait for several sleeps rather than for a stable one.
	for s0 := p.a.Eng.Stats().Sleeps; p.a.Eng.Stats().Sleeps < s0+3; {
		time.Sleep(time.Millisecond)
	}
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	p.qa.WriteSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	p.a.DB.View().StoreUint32Release(mustOff(t, p.a, p.qa.DB), p.qa.SQProd)
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	// Back to kicks only: an idle engine stays asleep again.
	p.a.Eng.SetIdlePoll(0)
	waitIdle(t, p.a)
	sleeps := p.a.Eng.Stats().Sleeps
	time.Sleep(20 * time.Millisecond)
	if s := p.a.Eng.Stats(); s.Sleeps > sleeps+1 {
		t.Fatalf("engine without idle polling woke up %d times", s.Sleeps-sleeps)
	}
}
