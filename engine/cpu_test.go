package engine_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// cpuFraction is the process CPU time spent during d, as a fraction of
// one core.
func cpuFraction(t *testing.T, d time.Duration) float64 {
	t.Helper()
	before := cpuTime(t)
	start := time.Now()
	time.Sleep(d)
	return float64(cpuTime(t)-before) / float64(time.Since(start))
}

// timerLoopFraction is the CPU a goroutine that only sleeps for period in
// a loop costs, as a fraction of a core, measured over one second.
func timerLoopFraction(t *testing.T, period time.Duration) float64 {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm := time.NewTimer(period)
		defer tm.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tm.C:
				tm.Reset(period)
			}
		}
	}()
	frac := cpuFraction(t, time.Second)
	close(stop)
	<-done
	return frac
}

// TestInfiniteRNRDoesNotSpin: a QP retrying RNR for ever (rnr_retry 7)
// against a peer that never posts a receive, with the shortest RNR timer
// (10 us, below the engine's spin time), must let its engine sleep
// between retries rather than keep a core busy; the SEND still completes
// once a receive is posted.
func TestInfiniteRNRDoesNotSpin(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.RNRRetry = 7
	conn.MinRNRTimer = 1
	p := newPair(t, conn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 16)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite, 16)
	fill(src.Bytes(), 9)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 16)}, nil)
	for deadline := time.Now().Add(5 * time.Second); p.a.Eng.Stats().RNRNaks < 10; {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAKs: %+v", p.a.Eng.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	naks := p.a.Eng.Stats().RNRNaks
	frac := cpuFraction(t, time.Second)
	naks = p.a.Eng.Stats().RNRNaks - naks
	// A retry every millisecond costs what any 1 kHz wake-up costs, which
	// depends on the machine (2.5-6% of a core on the 2-core test VMs);
	// spinning costs the whole core. So the bound is a multiple of a bare
	// timer loop waking as often, measured in the same run.
	base := timerLoopFraction(t, time.Second/time.Duration(max(naks, 1)))
	limit := max(0.04, 2*base)
	if raceEnabled {
		limit *= 2
	}
	if frac > limit {
		t.Fatalf("a QP retrying RNR for ever used %.1f%% of a core (%d RNR NAKs in 1 s; a bare timer loop as often: %.1f%%)",
			100*frac, naks, 100*base)
	}
	t.Logf("infinite RNR: %.2f%% of a core, %d RNR NAKs in 1 s (bare timer loop: %.2f%%)", 100*frac, naks, 100*base)
	if naks == 0 {
		t.Fatal("the QP stopped retrying")
	}
	p.ca.ExpectNone(0)
	p.qb.PostRecv(2, dst.SGE(0, 16))
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCSend)
	expect(t, p.cb.Wait(), 2, abi.WCSuccess, abi.WCRecv)
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}

// TestIdlePollingEnginesAreCheap: engines that poll while idle
// (SetIdlePoll, for drivers that never kick) wake every period, scan,
// find nothing and go straight back to sleep, without leaving the idle
// state (no wake-up counted, EngineIdle stays set) and without spinning,
// and back off to 16 periods while nothing turns up.
//
// On the 2-core test VM any process that wakes every millisecond costs
// 2.5-4% of a core whatever it does when awake (a bare time.Timer loop
// measures 2.4-3.7%); ten engines polling every millisecond without the
// back-off measured 3.5-6%, and spinning for spinFor after each poll, as
// the engine once did, about a third of a core. With the back-off they
// poll every 16 ms once idle for a while: about 0.2% of a core each.
func TestIdlePollingEnginesAreCheap(t *testing.T) {
	checkIdlePolling(t, idlePollingGuests(t), "10 idle-polling engines")
}

// idlePollingGuests makes ten guests with one QP each, every engine on a
// goroutine of its own.
func idlePollingGuests(t *testing.T) []*enginetest.Guest {
	fab := fabric.NewLocal()
	gs := make([]*enginetest.Guest, 10)
	for i := range gs {
		gs[i] = enginetest.NewGuest(t, fab, fmt.Sprintf("poll%d", i), enginetest.Options{RAM: 1 << 20})
		cq := gs[i].CreateCQ(8)
		gs[i].CreateQP(pd, cq, cq, enginetest.QPOpts{SQSize: 8, RQSize: 8})
	}
	return gs
}

// checkIdlePolling gives gs, once asleep, a 1 ms idle poll and checks
// over one second that each rescans about once per backed-off period
// (16 ms) without leaving the idle state, and that together they cost
// at most 12% of a core (25% under the race detector).
func checkIdlePolling(t *testing.T, gs []*enginetest.Guest, what string) {
	t.Helper()
	for _, g := range gs {
		waitIdle(t, g)
		g.Eng.SetIdlePoll(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the kick of SetIdlePoll settles
	s0 := make([]engine.Stats, len(gs))
	for i, g := range gs {
		s0[i] = g.Eng.Stats()
	}
	frac := cpuFraction(t, time.Second)
	for i, g := range gs {
		s := g.Eng.Stats()
		if n := s.Sleeps - s0[i].Sleeps; n < 30 || n > 200 {
			t.Fatalf("%s polled %d times in 1 s with a 1 ms idle poll backing off to 16 ms", g.Name, n)
		}
		if n := s.Wakeups - s0[i].Wakeups; n != 0 || g.EngineFlags()&abi.EngineIdle == 0 {
			t.Fatalf("%s: %d wake-ups from idle polls that found nothing (flags %#x)", g.Name, n, g.EngineFlags())
		}
	}
	limit := 0.12
	if raceEnabled {
		limit = 0.25
	}
	if frac > limit {
		t.Fatalf("%s used %.1f%% of a core", what, 100*frac)
	}
	t.Logf("%s: %.2f%% of a core", what, 100*frac)
}
