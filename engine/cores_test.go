package engine_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
	"golang.org/x/sys/unix"
)

// dedicatedCores returns n dedicated data-path threads, raising
// GOMAXPROCS for the test if it leaves too few processors beside them.
func dedicatedCores(t *testing.T, cfg engine.CoresConfig) *engine.Cores {
	t.Helper()
	n := max(cfg.Threads, len(cfg.CPUs))
	if p := runtime.GOMAXPROCS(0); p < n+2 {
		runtime.GOMAXPROCS(n + 2)
		t.Cleanup(func() { runtime.GOMAXPROCS(p) })
	}
	c, err := engine.NewCores(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Dedicated() {
		t.Fatal("threads not dedicated")
	}
	return c
}

// moveTo restarts the guests' engines on c.
func moveTo(t *testing.T, c *engine.Cores, gs ...*enginetest.Guest) {
	t.Helper()
	for _, g := range gs {
		g.Eng.Stop()
		g.Eng.SetCores(c)
		if err := g.Eng.Start(g.Mem, g.DB.View(), g.Layout); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCoresEnginesShareAThread: eight engines polled from one dedicated
// thread all make progress at once, every byte lands, and the thread and
// the engines account the time they polled.
func TestCoresEnginesShareAThread(t *testing.T) {
	c := dedicatedCores(t, engine.CoresConfig{Threads: 1})
	type flow struct {
		p        *pair
		src, dst enginetest.Buf
	}
	var flows []flow
	for range 4 {
		p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
		moveTo(t, c, p.a, p.b)
		f := flow{p: p, src: p.a.NewBuf(pd, 0, 64<<10), dst: p.b.NewBuf(pd, abi.AccessAll, 64<<10)}
		fill(f.src.Bytes(), byte(len(flows)))
		flows = append(flows, f)
	}
	if s := c.Stats(); len(s) != 1 || s[0].Engines != 8 || s[0].CPU != -1 {
		t.Fatalf("threads %+v, want one with 8 engines, unpinned", s)
	}
	const writes = 200
	for i := range writes {
		for _, f := range flows {
			off := uint64(i%16) * 4096
			f.p.qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: f.dst.GPA + off, RKey: f.dst.Key},
				[]abi.SGE{f.src.SGE(off, 4096)}, nil)
		}
		for _, f := range flows {
			expect(t, f.p.ca.Wait(), uint64(i), abi.WCSuccess, abi.WCRDMAWrite)
		}
	}
	for i, f := range flows {
		if !bytes.Equal(f.dst.Bytes(), f.src.Bytes()) {
			t.Fatalf("flow %d: data differs", i)
		}
		if a := f.p.a.Eng.Stats().Awake; a <= 0 {
			t.Fatalf("flow %d: engine awake for %v", i, a)
		}
	}
	if s := c.Stats(); s[0].Busy <= 0 {
		t.Fatalf("thread busy for %v", s[0].Busy)
	}
	for _, f := range flows {
		waitIdle(t, f.p.a)
		waitIdle(t, f.p.b)
	}
	// All asleep: the thread blocks, and only the idle engines' awake
	// time stops growing.
	busy := c.Stats()[0].Busy
	awake := flows[0].p.a.Eng.Stats().Awake
	time.Sleep(50 * time.Millisecond)
	if b := c.Stats()[0].Busy; b != busy {
		t.Fatalf("an idle thread's busy time grew from %v to %v", busy, b)
	}
	if a := flows[0].p.a.Eng.Stats().Awake; a != awake {
		t.Fatalf("a sleeping engine's awake time grew from %v to %v", awake, a)
	}
	for _, f := range flows {
		f.p.a.Close()
		f.p.b.Close()
	}
	if s := c.Stats(); s[0].Engines != 0 {
		t.Fatalf("thread keeps %d engines after every Stop", s[0].Engines)
	}
}

// TestCoresIdleEnginesUseNoCPU: 100 idle engines on two dedicated
// threads cost what they cost on threads of their own: under 2% of a
// core (TestIdleEnginesUseNoCPU).
func TestCoresIdleEnginesUseNoCPU(t *testing.T) {
	c := dedicatedCores(t, engine.CoresConfig{Threads: 2})
	fab := fabric.NewLocal()
	gs := make([]*enginetest.Guest, 100)
	for i := range gs {
		gs[i] = enginetest.NewGuest(t, fab, fmt.Sprintf("idle%d", i), enginetest.Options{RAM: 1 << 20})
		cq := gs[i].CreateCQ(8)
		gs[i].CreateQP(pd, cq, cq, enginetest.QPOpts{SQSize: 8, RQSize: 8})
	}
	moveTo(t, c, gs...)
	for _, g := range gs {
		waitIdle(t, g)
	}
	if s := c.Stats(); s[0].Engines+s[1].Engines != 100 || s[0].Engines != 50 {
		t.Fatalf("threads %+v: want 50 engines each", s)
	}
	if frac := cpuFraction(t, time.Second); frac > 0.02 {
		t.Fatalf("100 idle engines on dedicated threads used %.1f%% of a core", 100*frac)
	} else {
		t.Logf("100 idle engines on dedicated threads: %.2f%% of a core", 100*frac)
	}
}

// TestCoresKickWakesASleepingEngine: the wake-up protocol on a shared
// thread. A doorbell without a kick is not seen by a sleeping engine;
// the kick wakes it, counted in the device page, while its neighbour on
// the thread sleeps on.
func TestCoresKickWakesASleepingEngine(t *testing.T) {
	c := dedicatedCores(t, engine.CoresConfig{Threads: 1})
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	moveTo(t, c, p.a, p.b)
	waitIdle(t, p.a)
	waitIdle(t, p.b)
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	p.qa.WriteSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	wakeups, bWakeups := p.a.Eng.Stats().Wakeups, p.b.Eng.Stats().Wakeups
	p.a.DB.View().StoreUint32Release(mustOff(t, p.a, p.qa.DB), p.qa.SQProd)
	p.ca.ExpectNone(10 * time.Millisecond)
	p.a.Eng.Wake()
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	if s := p.a.Eng.Stats(); s.Wakeups <= wakeups {
		t.Fatalf("wakeups %d -> %d", wakeups, s.Wakeups)
	}
	if w := p.a.DB.View().LoadUint64Acquire(abi.DevPageOffWakeups); w == 0 {
		t.Fatal("device page wakeup counter not written")
	}
	waitIdle(t, p.a)
	if s := p.b.Eng.Stats(); s.Wakeups != bWakeups {
		t.Fatalf("the responder's engine woke %d times for its neighbour's kick", s.Wakeups-bWakeups)
	}
}

// TestCoresControlChangeStallsOnlyItsEngine: a control change holding
// one engine's gate (here for as long as the test likes) does not stop
// the thread from serving the other engines on it.
func TestCoresControlChangeStallsOnlyItsEngine(t *testing.T) {
	c := dedicatedCores(t, engine.CoresConfig{Threads: 1})
	busy := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	held := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	moveTo(t, c, busy.a, busy.b, held.a, held.b)
	inside, release := make(chan struct{}), make(chan struct{})
	held.a.Eng.SetQuiet(func() {
		close(inside)
		<-release
	})
	done := make(chan error)
	go func() { done <- held.a.Eng.SetMemory(held.a.Mem) }()
	<-inside
	src := busy.a.NewBuf(pd, 0, 64)
	dst := busy.b.NewBuf(pd, abi.AccessAll, 64)
	for i := range 50 {
		busy.qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key},
			[]abi.SGE{src.SGE(0, 64)}, nil)
		expect(t, busy.ca.Wait(), uint64(i), abi.WCSuccess, abi.WCRDMAWrite)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	held.a.Eng.SetQuiet(nil)
	// The held engine serves again.
	hs, hd := held.a.NewBuf(pd, 0, 8), held.b.NewBuf(pd, abi.AccessAll, 8)
	held.qa.PostSend(abi.SendWQE{WRID: 9, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: hd.GPA, RKey: hd.Key}, []abi.SGE{hs.SGE(0, 8)}, nil)
	expect(t, held.ca.Wait(), 9, abi.WCSuccess, abi.WCRDMAWrite)
}

// TestCoresPinned: a thread pinned to a CPU the process may use serves
// traffic; a CPU it may not use is refused.
func TestCoresPinned(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for !allowed.IsSet(cpu) {
		cpu++
	}
	c := dedicatedCores(t, engine.CoresConfig{CPUs: []int{cpu}})
	if s := c.Stats(); len(s) != 1 || s[0].CPU != cpu {
		t.Fatalf("threads %+v, want one pinned to CPU %d", s, cpu)
	}
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	moveTo(t, c, p.a, p.b)
	src, dst := p.a.NewBuf(pd, 0, 8), p.b.NewBuf(pd, abi.AccessAll, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)

	for _, bad := range [][]int{{1 << 20}, {cpu, cpu}} {
		if _, err := engine.NewCores(engine.CoresConfig{CPUs: bad}); err == nil {
			t.Errorf("CPUs %v accepted", bad)
		}
	}
}

// TestCoresYieldingGiveEachEngineItsOwn: without processors to spare the
// engines are polled as before, each from a yielding goroutine of its
// own, which ends with its engine's Stop.
func TestCoresYieldingGiveEachEngineItsOwn(t *testing.T) {
	c, err := engine.NewCores(engine.CoresConfig{Threads: 1, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Dedicated() || len(c.Stats()) != 0 {
		t.Fatalf("dedicated %v, threads %+v before any engine", c.Dedicated(), c.Stats())
	}
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	moveTo(t, c, p.a, p.b)
	if s := c.Stats(); len(s) != 2 || s[0].Engines != 1 || s[1].Engines != 1 {
		t.Fatalf("threads %+v, want one per engine", s)
	}
	src, dst := p.a.NewBuf(pd, 0, 8), p.b.NewBuf(pd, abi.AccessAll, 8)
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	p.a.Close()
	p.b.Close()
	if s := c.Stats(); len(s) != 0 {
		t.Fatalf("threads %+v left after every Stop", s)
	}
}

// TestCoresIdlePollingEnginesAreCheap: engines that poll while idle
// (SetIdlePoll) sharing one dedicated thread rescan on their own
// deadlines without the thread spinning between them: the bound of
// TestIdlePollingEnginesAreCheap, for ten engines on their own threads.
func TestCoresIdlePollingEnginesAreCheap(t *testing.T) {
	c := dedicatedCores(t, engine.CoresConfig{Threads: 1})
	gs := idlePollingGuests(t)
	moveTo(t, c, gs...)
	checkIdlePolling(t, gs, "10 idle-polling engines on one dedicated thread")
}

// TestCoresDefaultNeedsSpareCores: the default threads are dedicated
// only where the host has cores to spare beside them, however many
// processors GOMAXPROCS gives: a spinning thread on an oversubscribed
// host holds a core the kernel's network path waits for. An explicit
// thread count needs only the processors.
func TestCoresDefaultNeedsSpareCores(t *testing.T) {
	p := runtime.GOMAXPROCS(runtime.NumCPU() + 8)
	t.Cleanup(func() { runtime.GOMAXPROCS(p) })
	c, err := engine.NewCores(engine.CoresConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.NumCPU() >= engine.DefaultDataThreads()+2
	if c.Dedicated() != want || c.Mode() != map[bool]string{true: "dedicated", false: "yielding"}[want] {
		t.Fatalf("default threads on %d CPUs with GOMAXPROCS %d: dedicated %v (%s), want %v",
			runtime.NumCPU(), runtime.GOMAXPROCS(0), c.Dedicated(), c.Mode(), want)
	}
	if c := dedicatedCores(t, engine.CoresConfig{Threads: 1}); c.Mode() != "dedicated" {
		t.Fatalf("one explicit thread: %s", c.Mode())
	}
}
