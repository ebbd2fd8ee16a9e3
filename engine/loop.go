package engine

import (
	"runtime"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

const (
	// spinFor is how long the engine keeps polling after the last work
	// before it goes idle. Long enough to cover a request/response round
	// trip between two guests (so ping-pong traffic never waits for a
	// kick), short enough that an idle device sleeps almost at once.
	spinFor = 100 * time.Microsecond
	// sqBudget bounds the send WQEs one QP may start per pass, and
	// flushBudget the WQEs flushed per queue per pass, so one busy QP
	// cannot starve the others of the engine.
	sqBudget    = 16
	flushBudget = 64
)

// run is the engine goroutine. It polls while there is work, spins for
// spinFor after the last work (yielding the processor between polls), and
// then sleeps following the doorbell wake-up protocol until Wake, a
// completion, a retry timer or Stop.
//
// Only progress counts as work: a WQE fetched, completed or flushed, an
// error handled. A retry that ends in another RNR NAK or transport retry
// is not, so a QP retrying for ever (rnr_retry 7 against a peer that
// never posts a receive) lets the engine sleep on the retry timer instead
// of spinning; see sleep.
func (e *Engine) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	lastWork := e.now()
	for {
		select {
		case <-stop:
			return
		default:
		}
		// Retry deadlines need no handling here: each pass retries what is
		// due, and sleep arms its timer for what is not.
		work, _ := e.safePass()
		now := e.now()
		if work {
			lastWork = now
			continue
		}
		if now-lastWork < int64(spinFor) {
			runtime.Gosched()
			continue
		}
		e.sleep(stop, timer)
		// sleep returns only for a reason to expect more work soon (a
		// kick, a completion, work its scans found) or for Stop.
		lastWork = e.now()
	}
}

// sleep runs the engine's half of the wake-up protocol: announce
// EngineIdle, scan once more (a doorbell rung before the driver could see
// the flag is found here), and only then block, with a timer for the
// earliest retry deadline and the idle poll (SetIdlePoll). A timer that
// fires is not a wake-up: the engine rescans with EngineIdle still
// announced (so the protocol holds: a doorbell rung meanwhile is either
// seen by the scan or kicked) and, finding nothing but more waiting, goes
// straight back to sleep. It returns, clearing EngineIdle, once a scan
// finds work, on a kick (Wake, a fabric completion, a control change) or
// on Stop.
func (e *Engine) sleep(stop <-chan struct{}, timer *time.Timer) {
	e.sleeping.Store(true)
	e.writePage(abi.EngineIdle, 0)
	// Drop a wake-up left over from while the engine was busy: the scan
	// below sees whatever it was for, and a kick from now on lands in
	// the channel again. Without this an idle engine wakes once for
	// nothing.
	select {
	case <-e.wakeCh:
	default:
	}
	for polls := 0; ; polls++ {
		work, deadline := e.safePass()
		if work {
			break
		}
		if poll := e.nextIdlePoll(polls); poll != 0 && (deadline == 0 || poll < deadline) {
			deadline = poll
		}
		if deadline != 0 {
			timer.Reset(time.Duration(max(deadline-e.now(), 0)))
		}
		e.st.sleeps.Add(1)
		fired := false
		select {
		case <-stop:
		case <-e.wakeCh:
		case <-timer.C:
			fired = true
		}
		if !fired {
			timer.Stop()
			break
		}
	}
	e.sleeping.Store(false)
	e.writePage(0, e.st.wakeups.Add(1))
}

// idlePollBackoff bounds the idle-poll back-off: the period doubles with
// every rescan that finds nothing, up to 16 times the configured one.
const idlePollBackoff = 4

// nextIdlePoll returns when (engine clock) a sleeping engine next rescans
// on its own, or 0 if it does not (SetIdlePoll). polls is the number of
// rescans this sleep has already done for nothing: a device idle for long
// is rescanned less and less often, so a thousand idle guests that never
// kick cost little, while one that just went quiet is still found fast.
func (e *Engine) nextIdlePoll(polls int) int64 {
	if p := e.idlePoll.Load(); p > 0 {
		return e.now() + p<<min(polls, idlePollBackoff)
	}
	return 0
}

// writePage stores the device page's engine flags and, if wakeups is not
// 0, the wakeup counter the driver may read for statistics.
func (e *Engine) writePage(flags uint32, wakeups uint64) {
	if e.broken.Load() {
		return // the page may be what faulted
	}
	e.gate.RLock()
	defer e.gate.RUnlock()
	if !e.running {
		return
	}
	e.guard(func() {
		e.page.StoreUint32Release(abi.DevPageOffEngineFlags, flags)
		if wakeups != 0 {
			e.page.StoreUint64Release(abi.DevPageOffWakeups, wakeups)
		}
	})
}

// safePass runs one pass over the QPs with the gate held shared.
func (e *Engine) safePass() (work bool, deadline int64) {
	e.gate.RLock()
	defer e.gate.RUnlock()
	if e.broken.Load() || !e.running {
		return false, 0
	}
	e.guard(func() { work, deadline = e.pass() })
	return work, deadline
}

// guard runs fn, which touches guest memory, and turns a fault (a guest
// that truncated its memory file under us) into a broken device: every QP
// goes to ERR (QP_FATAL) and the engine stops touching guest memory until
// Start, SetMemory or Reset.
func (e *Engine) guard(fn func()) {
	if err := guestmem.Guard(func() error { fn(); return nil }); err != nil {
		e.memoryFaulted(err.Error())
	}
}

// memoryFaulted marks the device broken after a fault on its guest
// memory: every QP goes to ERR (QP_FATAL) and the data path stops
// touching guest memory until Start, SetMemory or Reset. Lock-free.
func (e *Engine) memoryFaulted(why string) {
	e.broken.Store(true)
	e.log.Error("guest memory fault: device data path stopped", "err", why)
	for _, q := range *e.live.Load() {
		e.qpFailed(q, abi.WCFatalErr)
	}
}

// pass gives every QP one turn. It reports whether it made progress (see
// run) and the earliest pending retry deadline.
func (e *Engine) pass() (work bool, deadline int64) {
	var now int64 // read lazily: most passes need no clock
	for _, q := range *e.live.Load() {
		if !q.recOK || !q.ringsOK || q.closing.Load() {
			continue
		}
		switch q.getState() {
		case abi.QPStateRTS, abi.QPStateSQD:
			if q.waitUntil != 0 && !q.inflight.Load() {
				if now == 0 {
					now = e.now()
				}
				if now < q.waitUntil {
					if deadline == 0 || q.waitUntil < deadline {
						deadline = q.waitUntil
					}
					continue
				}
				q.waitUntil = 0
			}
			if e.serveSQ(q) {
				work = true
			}
			// serveSQ may have left the head waiting for a retry.
			if w := q.waitUntil; w != 0 && (deadline == 0 || w < deadline) {
				deadline = w
			}
		case abi.QPStateErr:
			if e.flushQP(q) {
				work = true
			}
		}
	}
	return work, deadline
}
