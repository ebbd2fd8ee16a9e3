package engine

import (
	"sync/atomic"
	"time"
)

// waker is the engine's side of the sleep and wake-up protocol between
// it and its poller (docs/spec.md §6.6 for the driver's part). Its
// invariant: a sleeping engine never misses work. Whoever makes work for
// it (the driver, ringing a doorbell; an asynchronous fabric completing;
// a control change) kicks after making it, and the poller marks the
// engine sleeping before its last scan: so either that scan sees the
// work, or the kick sees sleeping and wakes the engine (pending, then a
// poke of its thread). A kick costs one atomic load while the engine is
// awake.
type waker struct {
	thread   atomic.Pointer[dataThread] // the engine's, while started
	sleeping atomic.Bool                // the poller has (or is about to have) stopped polling the engine
	pending  atomic.Bool                // a wake-up since the engine last fell asleep
	idlePoll atomic.Int64               // if > 0, a sleeping engine rescans this often (ns): see SetIdlePoll
	// awakeSince is the engine clock + 1 when the poller last woke the
	// engine, 0 while it sleeps; awakeNs sums the ended awake spells.
	awakeSince, awakeNs atomic.Int64
}

// kick wakes the engine if its poller stopped polling it (or is about
// to).
func (w *waker) kick() {
	if w.sleeping.Load() {
		w.wake()
	}
}

// wake marks a wake-up pending and tells the engine's thread, which
// clears EngineIdle and polls the engine again. Safe at any time (also
// while stopped: Start begins awake, and the first sleep drops it).
func (w *waker) wake() {
	w.pending.Store(true)
	if t := w.thread.Load(); t != nil {
		t.kicked.Store(true)
		t.poke()
	}
}

// woken reports whether a wake-up is pending, and takes it.
func (w *waker) woken() bool { return w.pending.Swap(false) }

// awakeFrom starts an awake spell at now (engine clock).
func (w *waker) awakeFrom(now int64) { w.awakeSince.Store(now + 1) }

// asleepAt ends the awake spell at now.
func (w *waker) asleepAt(now int64) {
	if s := w.awakeSince.Swap(0); s != 0 {
		w.awakeNs.Add(now + 1 - s)
	}
}

// awake is the time (ns) the engine has been polled up to now: ended
// spells and the current one.
func (w *waker) awake(now int64) int64 {
	n := w.awakeNs.Load()
	if s := w.awakeSince.Load(); s != 0 {
		n += max(now+1-s, 0)
	}
	return n
}

// idlePollBackoff bounds the idle-poll back-off: the period doubles with
// every rescan that finds nothing, up to 16 times the configured one.
const idlePollBackoff = 4

// rescanAt is when (engine clock, 0: never) a sleeping engine rescans on
// its own: at deadline, its earliest retry, or at its idle poll after
// polls rescans for nothing, whichever is first. A device idle for long
// is rescanned less and less often, so a thousand idle guests that never
// kick cost little, while one that just went quiet is still found fast.
func (w *waker) rescanAt(now, deadline int64, polls int) int64 {
	p := w.idlePoll.Load()
	if p <= 0 {
		return deadline
	}
	if poll := now + p<<min(polls, idlePollBackoff); deadline == 0 || poll < deadline {
		return poll
	}
	return deadline
}

// setIdlePoll sets the idle poll's period (SetIdlePoll).
func (w *waker) setIdlePoll(d time.Duration) {
	w.idlePoll.Store(max(int64(d), 0))
	w.kick()
}
