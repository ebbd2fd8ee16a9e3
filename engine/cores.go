package engine

import (
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Cores is a bounded set of data-path threads that poll engines, the way
// DPDK and SPDK vhost back-ends poll their devices from a few pinned
// cores. A started engine is placed on the thread with the fewest
// engines; the thread polls every awake engine in turn, runs each one's
// half of the wake-up protocol, and blocks only when all of them sleep.
//
// Dedicated threads hold runtime.LockOSThread for their whole life and
// spin without runtime.Gosched. They need spareProcs processors beside
// them, and by default the spare processors must be cores too
// (GOMAXPROCS capped at the CPUs the process may run on); without them
// (a 2-core host), Cores fall back to a goroutine per engine that yields
// between polls. Why, and what each choice measured:
// docs/architecture.md, "Data-path threads".
type Cores struct {
	log       *slog.Logger
	dedicated bool

	mu      sync.Mutex
	threads []*dataThread
}

// CoresConfig configures a set of data-path threads.
type CoresConfig struct {
	// Threads is the number of data-path threads; 0 means
	// DefaultDataThreads. Ignored when CPUs is set.
	Threads int
	// CPUs, if set, gives one thread per CPU, each pinned to its CPU
	// (sched_setaffinity on its locked OS thread). Every CPU must be in
	// the process's affinity mask.
	CPUs []int
	// Shared makes the threads ordinary goroutines that yield between
	// polls instead of holding an OS thread, one per engine (attach
	// says why). Implied when GOMAXPROCS leaves fewer than two
	// processors beside the threads (spareProcs).
	Shared bool
	Log    *slog.Logger
}

// spareProcs is how many processors dedicated threads leave to the rest:
// one for the control path and the vhost rings' workers, and one idle,
// whose M blocks in the network poller and so hears a guest's kick (an
// eventfd) at once (docs/architecture.md, "Data-path threads").
const spareProcs = 2

// DefaultDataThreads is the default number of data-path threads: a
// quarter of the processors the process may use, at least one, so a
// 16-core host polls from 4 threads and a 2-core one from 1.
func DefaultDataThreads() int {
	return max(1, min(runtime.GOMAXPROCS(0), runtime.NumCPU())/4)
}

// NewCores creates the threads' bookkeeping; a thread's goroutine runs
// only while it has engines, so an unused Cores costs nothing and needs
// no Close.
func NewCores(cfg CoresConfig) (*Cores, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	n := cfg.Threads
	if n <= 0 {
		n = DefaultDataThreads()
	}
	cpus := slices.Clone(cfg.CPUs)
	if len(cpus) > 0 {
		n = len(cpus)
		var allowed unix.CPUSet
		if err := unix.SchedGetaffinity(0, &allowed); err != nil {
			return nil, fmt.Errorf("sched_getaffinity: %w", err)
		}
		seen := map[int]bool{}
		for _, cpu := range cpus {
			if cpu < 0 || !allowed.IsSet(cpu) {
				return nil, fmt.Errorf("CPU %d is not one this process may run on", cpu)
			}
			if seen[cpu] {
				return nil, fmt.Errorf("CPU %d is listed twice", cpu)
			}
			seen[cpu] = true
		}
	}
	c := &Cores{log: log, dedicated: !cfg.Shared}
	// An explicit thread count or CPU list is the caller's choice, held
	// to the processors only; the default also to the cores (above).
	explicit := cfg.Threads > 0 || len(cpus) > 0
	procs := runtime.GOMAXPROCS(0)
	if !explicit {
		procs = min(procs, runtime.NumCPU())
	}
	if c.dedicated && procs < n+spareProcs {
		// Only an explicit choice is worth a warning: on a small host
		// the default is expected to fall back.
		say := log.Info
		if explicit {
			say = log.Warn
		}
		say("too few processors for dedicated data-path threads: each engine polls from a yielding goroutine instead",
			"threads", n, "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
		c.dedicated = false
	}
	for i := range n {
		if !c.dedicated {
			break // a thread per engine, made by attach
		}
		cpu := -1
		if len(cpus) > 0 {
			cpu = cpus[i]
		}
		c.threads = append(c.threads, &dataThread{c: c, idx: i, cpu: cpu, notify: make(chan struct{}, 1)})
	}
	return c, nil
}

// privateCores is the thread of an engine created without Cores: an
// ordinary goroutine that yields between polls, as one engine of a test
// or of a program with no data cores expects.
func privateCores(log *slog.Logger) *Cores { return &Cores{log: log} }

// Dedicated reports whether the threads hold OS threads and spin.
func (c *Cores) Dedicated() bool { return c.dedicated }

// Mode names how the threads poll: "dedicated" (spinning on OS threads
// of their own) or "yielding" (a goroutine per engine).
func (c *Cores) Mode() string {
	if c.dedicated {
		return "dedicated"
	}
	return "yielding"
}

// ThreadStats is one data-path thread's account.
type ThreadStats struct {
	// CPU is the CPU the thread is pinned to, or -1.
	CPU int
	// Engines is the number of engines placed on it.
	Engines int
	// Busy is the time it spent polling with at least one engine awake
	// (working or spinning for more): the CPU a dedicated thread burns.
	Busy time.Duration
}

// Stats returns each thread's account: the fixed threads of dedicated
// Cores, or the live per-engine ones of yielding Cores.
func (c *Cores) Stats() []ThreadStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := make([]ThreadStats, len(c.threads))
	for i, t := range c.threads {
		busy := t.busy.Load()
		if since := t.busySince.Load(); since != 0 {
			busy += max(time.Now().UnixNano()-since, 0)
		}
		s[i] = ThreadStats{CPU: t.cpu, Engines: t.count, Busy: time.Duration(busy)}
	}
	return s
}

// attach places e on the least loaded thread, starting its goroutine if
// it has none, and returns it. The thread polls e from its next round.
// Yielding threads are not shared: each engine gets one of its own, as
// the engine's own goroutine used to be, because a yielding poller that
// serves several engines stays runnable while any of them is awake, and
// on a small host whose processors all run spinners that leaves the
// runtime no idle moment to hear a sleeping neighbour's kick.
func (c *Cores) attach(e *Engine) *dataThread {
	c.mu.Lock()
	var t *dataThread
	if c.dedicated {
		t = c.threads[0]
		for _, u := range c.threads[1:] {
			if u.count < t.count {
				t = u
			}
		}
	} else {
		t = &dataThread{c: c, idx: len(c.threads), cpu: -1, notify: make(chan struct{}, 1)}
		c.threads = append(c.threads, t)
	}
	t.count++
	t.ops = append(t.ops, threadOp{e: e})
	t.hasOps.Store(true)
	if !t.running {
		t.running = true
		go t.run()
	}
	c.mu.Unlock()
	t.poke()
	return t
}

// detach takes e off t and returns once t no longer touches it.
func (c *Cores) detach(e *Engine, t *dataThread) {
	done := make(chan struct{})
	c.mu.Lock()
	t.count--
	t.ops = append(t.ops, threadOp{e: e, done: done})
	t.hasOps.Store(true)
	if !c.dedicated {
		c.threads = slices.DeleteFunc(c.threads, func(u *dataThread) bool { return u == t })
	}
	c.mu.Unlock()
	t.poke()
	<-done
}

// A dataThread polls its engines. Fields under Cores.mu: running, count,
// ops. The rest belong to its goroutine, except the atomics.
type dataThread struct {
	c      *Cores
	idx    int
	cpu    int           // pinned to this CPU, or -1
	notify chan struct{} // a token: kicked or ops, for a blocked thread

	running bool
	count   int
	ops     []threadOp

	hasOps atomic.Bool
	kicked atomic.Bool  // some engine of this thread was kicked (waker.wake)
	busy   atomic.Int64 // ns with an engine awake, ended spells
	// busySince is the wall clock (UnixNano) the current busy spell
	// began, 0 while blocked.
	busySince atomic.Int64

	awake  []*polled
	asleep []*polled
	// next is the earliest own-rescan deadline of a sleeping engine, as
	// wall time (0: none).
	next time.Time
}

// threadOp attaches e (done nil) or detaches it (closing done after).
type threadOp struct {
	e    *Engine
	done chan struct{}
}

// polled is an engine's state on its thread; its methods (loop.go) poll
// the engine.
type polled struct {
	e        *Engine
	lastWork int64 // engine clock of the last progress
	// clearIdle: the engine woke but could not yet clear EngineIdle in
	// its page (a control change held the gate); wakeups is the counter
	// to write with it.
	clearIdle bool
	wakeups   uint64
	asleep    bool
	// Asleep only: rescans done for nothing since it fell asleep, and
	// when (engine clock, 0: never) it next rescans on its own.
	polls    int
	deadline int64
}

// fallAsleep marks p asleep and accounts the time it was awake.
func (p *polled) fallAsleep() {
	p.asleep = true
	p.e.waker.asleepAt(p.e.now())
}

// wake marks p awake at now (engine clock).
func (p *polled) wake(now int64) {
	p.asleep = false
	p.lastWork = now
	p.e.waker.awakeFrom(now)
}

// poke tells the thread something changed: a kick or an op.
func (t *dataThread) poke() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// spinPause is how many cheap loads a dedicated thread makes between
// rounds that found nothing: a few tens of nanoseconds that keep it from
// hammering the guests' doorbell lines, far below any wake-up.
const spinPause = 32

func (t *dataThread) run() {
	if t.c.dedicated {
		// Never unlocked: the goroutine ends locked, which ends the OS
		// thread, so a thread whose affinity changed never runs other
		// goroutines.
		runtime.LockOSThread()
		if t.cpu >= 0 {
			var set unix.CPUSet
			set.Set(t.cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				t.c.log.Warn("data-path thread not pinned", "thread", t.idx, "cpu", t.cpu, "err", err)
			}
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer t.idle()
	for {
		if t.hasOps.Load() && !t.applyOps() {
			return
		}
		if t.kicked.Load() || (!t.next.IsZero() && !time.Now().Before(t.next)) {
			t.scanAsleep()
		}
		if len(t.awake) > 0 {
			if t.busySince.Load() == 0 {
				t.busySince.Store(time.Now().UnixNano())
			}
			if !t.round() {
				if t.c.dedicated {
					for range spinPause {
						t.kicked.Load()
					}
				} else {
					runtime.Gosched()
				}
			}
			continue
		}
		t.idle()
		// Every engine sleeps: block until a kick, an op or the first
		// own rescan.
		if !t.next.IsZero() {
			timer.Reset(max(time.Until(t.next), 0))
		}
		select {
		case <-t.notify:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// idle ends a busy spell.
func (t *dataThread) idle() {
	if since := t.busySince.Swap(0); since != 0 {
		t.busy.Add(max(time.Now().UnixNano()-since, 0))
	}
}

// applyOps attaches and detaches engines. It reports false, with the
// thread marked not running, once it has none left: the goroutine ends.
func (t *dataThread) applyOps() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	ops := t.ops
	t.ops = nil
	t.hasOps.Store(false)
	for _, op := range ops {
		if op.done == nil {
			// A started engine begins awake, as its own goroutine did.
			p := &polled{e: op.e}
			p.wake(op.e.now())
			t.awake = append(t.awake, p)
			continue
		}
		gone := func(p *polled) bool {
			if p.e != op.e {
				return false
			}
			if !p.asleep {
				p.fallAsleep() // for its awake time
			}
			return true
		}
		t.awake = slices.DeleteFunc(t.awake, gone)
		t.asleep = slices.DeleteFunc(t.asleep, gone)
		close(op.done)
	}
	if len(t.awake)+len(t.asleep) == 0 && t.count == 0 {
		t.running = false
		return false
	}
	t.recomputeNext()
	return true
}

// round gives every awake engine one pass and moves those that fell
// asleep to the asleep list. It reports whether any made progress.
func (t *dataThread) round() (work bool) {
	fell := false
	for _, p := range t.awake {
		w, asleep := p.pollAwake()
		work = work || w
		if asleep {
			fell = true
		}
	}
	if fell {
		t.awake = slices.DeleteFunc(t.awake, func(p *polled) bool {
			if p.asleep {
				t.asleep = append(t.asleep, p)
			}
			return p.asleep
		})
		t.recomputeNext()
	}
	return work
}

// scanAsleep wakes the sleeping engines that were kicked and rescans
// those whose own deadline passed.
func (t *dataThread) scanAsleep() {
	t.kicked.Store(false) // before the scan: a later kick sets it again
	woke := false
	for _, p := range t.asleep {
		if p.e.waker.woken() {
			p.leaveIdle()
		} else if p.deadline != 0 && p.e.now() >= p.deadline {
			p.rescanAsleep()
		}
		woke = woke || !p.asleep
	}
	if woke {
		t.asleep = slices.DeleteFunc(t.asleep, func(p *polled) bool {
			if !p.asleep {
				t.awake = append(t.awake, p)
			}
			return !p.asleep
		})
	}
	t.recomputeNext()
}

// recomputeNext sets next to the earliest own rescan of a sleeping
// engine.
func (t *dataThread) recomputeNext() {
	t.next = time.Time{}
	for _, p := range t.asleep {
		if p.deadline == 0 {
			continue
		}
		at := p.e.epoch.Add(time.Duration(p.deadline))
		if t.next.IsZero() || at.Before(t.next) {
			t.next = at
		}
	}
}
