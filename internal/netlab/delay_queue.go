//go:build linux

package netlab

import (
	"encoding/binary"
	"time"
)

// frameQueue is the delay line's FIFO: frames with the time they are due
// to leave, on a clock of the caller's choosing. Due times never decrease,
// so the line never reorders: a frame queued after a delay reduction waits
// for the frames ahead of it rather than overtaking them (as a shorter
// cable would not let it). It is used by one goroutine only.
type frameQueue struct {
	ring    []queuedFrame
	head, n int
	bytes   int           // sum of len(buf) of queued frames
	limit   int           // bytes; a frame that would exceed it is refused
	lastDue time.Duration // due time of the newest frame ever queued
	free    [][]byte      // spare buffers, so a steady flow allocates nothing
}

type queuedFrame struct {
	due time.Duration
	buf []byte
}

func newFrameQueue(limit int) *frameQueue {
	return &frameQueue{limit: limit}
}

// buffer returns a buffer of at least size bytes for the next frame.
func (q *frameQueue) buffer(size int) []byte {
	if k := len(q.free); k > 0 {
		b := q.free[k-1]
		q.free = q.free[:k-1]
		if cap(b) >= size {
			return b[:size]
		}
	}
	return make([]byte, size)
}

// recycle returns a buffer obtained from buffer or pop.
func (q *frameQueue) recycle(b []byte) {
	if len(q.free) < 1024 {
		q.free = append(q.free, b[:cap(b)])
	}
}

// push queues frame (which it keeps) to leave at now+delay, or later if
// an earlier frame is due later. It reports false, keeping nothing, when
// the frame does not fit in the byte limit.
func (q *frameQueue) push(now, delay time.Duration, frame []byte) bool {
	if q.bytes+len(frame) > q.limit {
		return false
	}
	due := max(now+delay, q.lastDue)
	q.lastDue = due
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)%len(q.ring)] = queuedFrame{due: due, buf: frame}
	q.n++
	q.bytes += len(frame)
	return true
}

func (q *frameQueue) grow() {
	ring := make([]queuedFrame, max(64, 2*len(q.ring)))
	for i := range q.n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// next reports when the oldest frame is due; ok is false if none is queued.
func (q *frameQueue) next() (due time.Duration, ok bool) {
	if q.n == 0 {
		return 0, false
	}
	return q.ring[q.head].due, true
}

// pop removes and returns the oldest frame if it is due at now.
func (q *frameQueue) pop(now time.Duration) ([]byte, bool) {
	if q.n == 0 || q.ring[q.head].due > now {
		return nil, false
	}
	f := q.ring[q.head]
	q.ring[q.head] = queuedFrame{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	q.bytes -= len(f.buf)
	return f.buf, true
}

// len is the number of queued frames.
func (q *frameQueue) len() int { return q.n }

// departureTimer decides when the line's thread wakes for the next frame.
// A timer fires late by the platform's wake-up latency (here about 70 µs,
// a VM; a few µs on bare metal), which would add to every delay. So the
// thread wakes early by the lateness it has been seeing and spins through
// the rest, keeping departures on time, never early. Spinning is capped
// at 1/spinShare of the thread's time; past that it sleeps to the due time
// and is late instead, so a busy line costs at most that much extra CPU.
type departureTimer struct {
	lead   time.Duration // how early to wake: the timer's recent lateness
	budget time.Duration // spin time available
	last   time.Duration // when budget was last topped up
}

const (
	// maxLead bounds the early wake-up (and so one spin).
	maxLead = 250 * time.Microsecond
	// spinShare: at most 1/spinShare of the time is spent spinning.
	spinShare = 4
	// maxSpinBudget is the most spin time saved up while idle.
	maxSpinBudget = 2 * time.Millisecond
)

// wakeAt returns when to wake for a frame due at due (due > now): early
// by lead if the budget allows spinning that long.
func (d *departureTimer) wakeAt(due, now time.Duration) time.Duration {
	d.refill(now)
	if d.budget < d.lead {
		return due
	}
	return due - d.lead
}

// spinFor reports whether the thread may spin for s and charges it.
func (d *departureTimer) spinFor(s, now time.Duration) bool {
	d.refill(now)
	if d.budget < s {
		return false
	}
	d.budget -= s
	return true
}

func (d *departureTimer) refill(now time.Duration) {
	if now > d.last {
		d.budget = min(maxSpinBudget, d.budget+(now-d.last)/spinShare)
		d.last = now
	}
}

// observe records that a timer set for target fired at woke. The lead
// follows the lateness up quickly and down slowly, settling near a high
// percentile of it (the 80th for a uniform spread), so most wake-ups are
// early enough; samples are capped so one long stall does not make later
// wake-ups spin long.
func (d *departureTimer) observe(target, woke time.Duration) {
	late := min(max(woke-target, 0), 2*maxLead)
	if late > d.lead {
		d.lead += (late - d.lead) / 4
	} else {
		d.lead -= (d.lead - late) / 64
	}
	d.lead = min(maxLead, d.lead)
}

// stampShift sets the unit of the entry stamp: 2^12 ns = 4.096 µs. Of the
// 2^16 values a stamp's age can take, the lower half (up to 134 ms of
// waiting to be read) counts as age, the upper half as a stamp from the
// future: a clock offset that is a little off, read as "just now".
const stampShift = 12

// ethP8021AD is the TPID of the entry stamp's tag (802.1ad; bpf_skb_vlan_push
// takes only it or 802.1Q, and a bed never carries 802.1ad frames).
const ethP8021AD = 0x88a8

// readStamp takes the entry stamp (delayProgram's tag: CLOCK_MONOTONIC in
// 2^stampShift ns units, modulo 2^16) out of a frame read from the line,
// in place, and returns the frame without it and when it entered the line
// on the line's clock, given now and monoOffset (CLOCK_MONOTONIC minus the
// line's clock, rounded down). Every way it can be wrong makes the entry
// later, never earlier, so a frame is never due early: the age is rounded
// down by a unit for the truncations, a stamp from the future reads as
// "now", and one older than 134 ms as younger than it is. A frame without
// a stamp entered now.
func readStamp(frame []byte, now time.Duration, monoOffset int64) ([]byte, time.Duration) {
	if len(frame) < 18 || binary.BigEndian.Uint16(frame[12:]) != ethP8021AD {
		return frame, now
	}
	stamp := binary.BigEndian.Uint16(frame[14:])
	nowUnits := uint16((int64(now) + monoOffset) >> stampShift)
	entered := now
	if age := nowUnits - stamp; age > 1 && age < 1<<15 {
		entered = now - time.Duration(age-1)<<stampShift
	}
	copy(frame[12:], frame[16:])
	return frame[:len(frame)-4], entered
}
