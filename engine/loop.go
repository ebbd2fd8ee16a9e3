package engine

import (
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

// The engine's poller is the data-path thread it is placed on (cores.go).
// The thread polls the engine while there is work, keeps polling for
// spinFor after the last work, and then runs the engine's half of the
// doorbell wake-up protocol and stops polling it until Wake, a
// completion, a retry timer or Stop. The methods of polled, the engine's
// state on its thread, are the engine's side of that: each runs on the
// thread, with the gate taken with TryRLock so
// that a control change on one engine never blocks the thread's others
// (a busy gate only means "poll again next round").
//
// Only progress counts as work: a WQE fetched, completed or flushed, an
// error handled. A retry that ends in another RNR NAK or transport retry
// is not, so a QP retrying for ever (rnr_retry 7 against a peer that
// never posts a receive) lets the engine sleep on the retry timer instead
// of spinning; see pollAwake.

// pollAwake gives an awake engine one pass. After spinFor without work it
// falls asleep: it announces EngineIdle, scans once more (a doorbell rung
// before the driver could see the flag is found here) and, finding
// nothing, reports asleep with p.deadline set for the earliest retry
// deadline and the idle poll (SetIdlePoll). Work found by that scan keeps
// it awake, counted as a wake-up.
func (p *polled) pollAwake() (work, asleep bool) {
	e := p.e
	if !e.gate.TryRLock() {
		// A control change holds the gate: poll again next round. Never
		// fall asleep without the protocol's scan.
		return false, false
	}
	if p.clearIdle {
		e.storeFlags(0, p.wakeups)
		p.clearIdle = false
	}
	// Retry deadlines need no handling here: each pass retries what is
	// due, and falling asleep arms the thread's timer for what is not.
	work, _ = e.passLocked()
	now := e.now()
	if work {
		p.lastWork = now
	}
	if work || now-p.lastWork < int64(spinFor) {
		e.gate.RUnlock()
		return work, false
	}
	e.waker.sleeping.Store(true)
	e.storeFlags(abi.EngineIdle, 0)
	// Drop a wake-up left over from while the engine was busy: the scan
	// below sees whatever it was for, and a kick from now on sets it
	// again. Without this an idle engine wakes once for nothing.
	e.waker.pending.Store(false)
	work, deadline := e.passLocked()
	if work {
		e.waker.sleeping.Store(false)
		e.storeFlags(0, e.st.wakeups.Add(1))
		e.gate.RUnlock()
		p.lastWork = e.now()
		return true, false
	}
	e.gate.RUnlock()
	p.polls = 0
	p.deadline = e.waker.rescanAt(e.now(), deadline, 0)
	e.st.sleeps.Add(1)
	p.fallAsleep()
	return false, true
}

// rescanAsleep is a sleeping engine's own rescan when its deadline (a
// retry or the idle poll) passes. It is not a wake-up: EngineIdle stays
// announced (so the protocol holds: a doorbell rung meanwhile is either
// seen by the scan or kicked) and, finding nothing but more waiting, the
// engine goes straight back to sleep. Work wakes it.
func (p *polled) rescanAsleep() {
	e := p.e
	if !e.gate.TryRLock() {
		return // its deadline stays passed: the thread tries again
	}
	p.polls++
	work, deadline := e.passLocked()
	if work {
		e.waker.sleeping.Store(false)
		e.storeFlags(0, e.st.wakeups.Add(1))
		e.gate.RUnlock()
		p.wake(e.now())
		return
	}
	e.gate.RUnlock()
	p.deadline = e.waker.rescanAt(e.now(), deadline, p.polls)
	e.st.sleeps.Add(1)
}

// leaveIdle wakes a sleeping engine that was kicked (Wake, a fabric
// completion, a control change). EngineIdle is cleared by its next pass,
// under the gate, before it scans.
func (p *polled) leaveIdle() {
	e := p.e
	e.waker.sleeping.Store(false)
	p.wakeups = e.st.wakeups.Add(1)
	p.clearIdle = true
	p.wake(e.now())
}

// storeFlags stores the device page's engine flags and, if wakeups is
// not 0, the wakeup counter the driver may read for statistics. Caller
// holds the gate shared.
func (e *Engine) storeFlags(flags uint32, wakeups uint64) {
	if e.broken.Load() || !e.running {
		return // the page may be what faulted
	}
	e.guard(func() {
		e.guest.page.StoreUint32Release(abi.DevPageOffEngineFlags, flags)
		if wakeups != 0 {
			e.guest.page.StoreUint64Release(abi.DevPageOffWakeups, wakeups)
		}
	})
}

// passLocked runs one pass over the QPs. Caller holds the gate shared.
func (e *Engine) passLocked() (work bool, deadline int64) {
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
	for _, q := range e.objs.live() {
		q.fail(abi.WCFatalErr)
	}
}

// pass gives every QP one turn. It reports whether it made progress (see
// run) and the earliest pending retry deadline.
func (e *Engine) pass() (work bool, deadline int64) {
	var now int64 // read lazily: most passes need no clock
	for _, q := range e.objs.live() {
		if !q.recOK || !q.ringsOK || q.closing.Load() {
			continue
		}
		switch q.state.get() {
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
			if q.serveSQ() {
				work = true
			}
			// serveSQ may have left the head waiting for a retry.
			if w := q.waitUntil; w != 0 && (deadline == 0 || w < deadline) {
				deadline = w
			}
		case abi.QPStateErr:
			if q.flush() {
				work = true
			}
		}
	}
	return work, deadline
}
