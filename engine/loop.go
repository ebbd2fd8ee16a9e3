package engine

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

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
func (e *Engine) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	// A guest that truncates its memory file under us makes our accesses
	// fault; turn that into a panic we recover in pass.
	debug.SetPanicOnFault(true)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	lastWork := e.now()
	for {
		select {
		case <-stop:
			return
		default:
		}
		work, deadline := e.safePass()
		now := e.now()
		if work {
			lastWork = now
			continue
		}
		if now-lastWork < int64(spinFor) || (deadline != 0 && deadline-now < int64(spinFor)) {
			runtime.Gosched()
			continue
		}
		e.sleep(stop, timer, deadline)
		lastWork = e.now()
	}
}

// sleep runs the engine's half of the wake-up protocol: announce
// EngineIdle, scan once more (a doorbell rung before the driver could see
// the flag is found here), and only then block. deadline (engine clock, 0
// for none) is the earliest retry timer.
func (e *Engine) sleep(stop <-chan struct{}, timer *time.Timer, deadline int64) {
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
	work, d2 := e.safePass()
	if work {
		e.sleeping.Store(false)
		e.writePage(0, 0)
		return
	}
	if d2 != 0 && (deadline == 0 || d2 < deadline) {
		deadline = d2
	}
	if p := e.idlePoll.Load(); p > 0 {
		if poll := e.now() + p; deadline == 0 || poll < deadline {
			deadline = poll
		}
	}
	if deadline != 0 {
		timer.Reset(time.Duration(max(deadline-e.now(), 0)))
	}
	e.st.sleeps.Add(1)
	select {
	case <-stop:
	case <-e.wakeCh:
	case <-timer.C:
	}
	timer.Stop()
	e.sleeping.Store(false)
	e.writePage(0, e.st.wakeups.Add(1))
}

// writePage stores the device page's engine flags and, if wakeups is not
// 0, the wakeup counter the driver may read for statistics.
func (e *Engine) writePage(flags uint32, wakeups uint64) {
	if e.broken.Load() {
		return // the page may be what faulted
	}
	e.gate.RLock()
	defer e.gate.RUnlock()
	defer e.recoverFault()
	if !e.running {
		return
	}
	e.page.StoreUint32Release(abi.DevPageOffEngineFlags, flags)
	if wakeups != 0 {
		e.page.StoreUint64Release(abi.DevPageOffWakeups, wakeups)
	}
}

// safePass runs one pass over the QPs with the gate held shared.
func (e *Engine) safePass() (work bool, deadline int64) {
	e.gate.RLock()
	defer e.gate.RUnlock()
	defer e.recoverFault()
	if e.broken.Load() || !e.running {
		return false, 0
	}
	return e.pass()
}

// recoverFault turns a memory fault on guest memory into a broken device:
// every QP goes to ERR (QP_FATAL) and the engine stops touching guest
// memory until Start, SetMemory or Reset. Anything else is a bug and
// panics on.
func (e *Engine) recoverFault() {
	r := recover()
	if r == nil {
		return
	}
	if !isMemoryFault(r) {
		panic(r)
	}
	e.broken.Store(true)
	e.log.Error("guest memory fault: device data path stopped", "err", fmt.Sprint(r))
	for _, q := range *e.live.Load() {
		e.qpFailed(q, abi.WCFatalErr)
	}
}

// pass gives every QP one turn. It reports whether it did anything and
// the earliest pending retry deadline.
func (e *Engine) pass() (work bool, deadline int64) {
	var now int64 // read lazily: most passes need no clock
	for _, q := range *e.live.Load() {
		if !q.recOK || !q.ringsOK {
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
		case abi.QPStateErr:
			if e.flushQP(q) {
				work = true
			}
		}
	}
	return work, deadline
}
