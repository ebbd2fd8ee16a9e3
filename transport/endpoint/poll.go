package endpoint

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Polling mode: the loop runs on an OS thread of its own
// (runtime.LockOSThread), like the engines' dedicated data-path threads
// (engine.Cores), and instead of blocking in the socket read between
// rounds it polls: the socket (udp.Conn.TryReadBatch), the submission
// ring, wake-ups and the next timer. Each hand-off it saves (a netpoller
// wake-up, a goroutine switch, a scheduler that may place the loop on
// another thread) costs microseconds on the round trip. After spinFor
// without work it falls back to the blocking read, whose wake-up
// protocol is the default mode's, so an idle endpoint burns no CPU.
// Whether the host has a core for it is the caller's call (the daemon
// polls exactly when its engines' threads are dedicated).

// spinFor is how long the loop polls after the last work before it
// blocks: the engines' (engine spinFor), long enough to cover a request
// and its response across hosts, so ping-pong traffic does not pay a
// wake-up per message.
const spinFor = 100 * time.Microsecond

// Polling configures Run's polling mode (Options.Poll).
type Polling struct {
	// Pin pins the loop's thread to CPU (sched_setaffinity).
	Pin bool
	CPU int
}

// Options are NewWith's optional settings.
type Options struct {
	// Poll, if not nil, makes Run busy-poll from an OS thread of its own
	// (see Polling); nil: Run blocks in the socket read between rounds.
	Poll *Polling
}

// spinState is the polling loop's idle policy and its account of the
// CPU it burns: busy spells run from a wake-up (or Run's start) to the
// next blocked read.
type spinState struct {
	last int64 // Endpoint clock of the last work found
	// busy sums the ended busy spells (ns); since is the wall clock
	// (UnixNano) the current one began, 0 while blocked.
	busy, since atomic.Int64
}

// wake starts a busy spell at now (Endpoint clock), after a blocked
// read; with work, the spin's time starts now, else it is already used
// up.
func (s *spinState) wake(now int64, work bool) {
	s.last = now
	if !work {
		s.last -= int64(spinFor)
	}
	s.since.Store(time.Now().UnixNano())
}

// sleep ends a busy spell.
func (s *spinState) sleep() {
	if t := s.since.Swap(0); t != 0 {
		s.busy.Add(max(time.Now().UnixNano()-t, 0))
	}
}

// total is the busy time up to now.
func (s *spinState) total() time.Duration {
	b := s.busy.Load()
	if t := s.since.Load(); t != 0 {
		b += max(time.Now().UnixNano()-t, 0)
	}
	return time.Duration(b)
}

// Busy is the time the polling loop spent running and polling, not
// blocked: the CPU its thread burned. 0 in the default mode.
func (e *Endpoint) Busy() time.Duration { return e.spun.total() }

// Polling reports whether Run polls (Options.Poll) and the CPU its
// thread is pinned to (-1: none).
func (e *Endpoint) Polling() (on bool, cpu int) {
	if e.poll == nil {
		return false, -1
	}
	if !e.poll.Pin {
		return true, -1
	}
	return true, e.poll.CPU
}

// runPolling runs the loop on a locked OS thread, pinned if asked. The
// goroutine ends locked, which ends the thread: a thread whose affinity
// changed never runs other goroutines.
func (e *Endpoint) runPolling(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if e.poll.Pin {
			var set unix.CPUSet
			set.Set(e.poll.CPU)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				e.log.Warn("endpoint: polling thread not pinned", "cpu", e.poll.CPU, "err", err)
			}
		}
		e.spun.wake(e.Now(), true)
		defer e.spun.sleep()
		errc <- e.run(ctx)
	}()
	return <-errc
}

// spin polls until there is work for a round, returning the datagrams it
// read (maybe 0), or -1 after spinFor without any: the loop then blocks.
func (e *Endpoint) spin(ctx context.Context) (int, error) {
	e.armDeadline(false)
	for {
		n, err := e.sock.TryReadBatch(e.in)
		if err != nil {
			if ctx.Err() != nil {
				return 0, nil // the loop sees ctx and stops
			}
			return 0, fmt.Errorf("endpoint: read: %w", err)
		}
		now := e.Now()
		if n > 0 || e.subs.ready() || e.spilling.Load() || e.woken.Load() || now >= e.armed.Load() || ctx.Err() != nil {
			e.spun.last = now
			return n, nil
		}
		if now-e.spun.last >= int64(spinFor) {
			return -1, nil
		}
	}
}
