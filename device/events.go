package device

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// eventQueueLen bounds the events waiting for a driver buffer. A driver
// that posts no buffers loses the oldest; the next event delivered says
// how many.
const eventQueueLen = 1024

// eventQueue is a fixed ring of pending events: its memory does not grow
// whatever the engine reports or the driver neglects.
type eventQueue struct {
	mu      sync.Mutex
	buf     [eventQueueLen]abi.Event
	head, n int
	dropped uint32 // lost since the last delivered event (saturating)
}

// push queues e, dropping the oldest event if the queue is full. It
// reports whether one was dropped.
func (q *eventQueue) push(e abi.Event) (dropped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == len(q.buf) {
		q.head = (q.head + 1) % len(q.buf)
		q.n--
		if q.dropped < math.MaxUint32 {
			q.dropped++
		}
		dropped = true
	}
	q.buf[(q.head+q.n)%len(q.buf)] = e
	q.n++
	return dropped
}

// pending reports whether an event waits.
func (q *eventQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n > 0
}

// pop takes the oldest event, carrying the count of events lost before
// it.
func (q *eventQueue) pop() (abi.Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return abi.Event{}, false
	}
	e := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	if sum := uint64(e.Dropped) + uint64(q.dropped); sum > math.MaxUint32 {
		e.Dropped = math.MaxUint32
	} else {
		e.Dropped = uint32(sum)
	}
	q.dropped = 0
	return e, true
}

// clear drops every pending event (a reset: they name dead objects).
func (q *eventQueue) clear() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.head, q.n, q.dropped = 0, 0, 0
}

// dropMatching removes the pending events match selects, keeping the
// others in order. They are not counted as lost: nobody should see them.
func (q *eventQueue) dropMatching(match func(abi.Event) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := 0
	for i := range q.n {
		e := q.buf[(q.head+i)%len(q.buf)]
		if !match(e) {
			q.buf[(q.head+kept)%len(q.buf)] = e
			kept++
		}
	}
	q.n = kept
}

// dropCQEvents and dropQPEvents forget the pending events of a destroyed
// CQ or QP. Its number may name a new object later, which must not be
// told of the old one's completions or errors. (Events already written
// into the driver's buffers are the driver's to sort out.)
func (q *eventQueue) dropCQEvents(cqn uint32) {
	q.dropMatching(func(e abi.Event) bool {
		return e.Handle == cqn && (e.Type == abi.EventCQComp || e.Type == abi.EventCQErr)
	})
}

func (q *eventQueue) dropQPEvents(qpn uint32) {
	q.dropMatching(func(e abi.Event) bool {
		switch e.Type {
		case abi.EventQPFatal, abi.EventQPReqErr, abi.EventQPAccessErr, abi.EventSQDrained, abi.EventQPLastWQE:
			return e.Handle == qpn
		}
		return false
	})
}

func (q *eventQueue) dropSRQEvents(srqn uint32) {
	q.dropMatching(func(e abi.Event) bool {
		return e.Handle == srqn && (e.Type == abi.EventSRQLimit || e.Type == abi.EventSRQErr)
	})
}

// len is the number of pending events.
func (q *eventQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// postEvent is the engine's Config.Events: it queues e and asks the
// Backend to run the event queue, which delivers it if the driver has a
// buffer posted. Any goroutine; never blocks.
func (d *Device) postEvent(e abi.Event) {
	d.stats.eventsQueued.Add(1)
	if d.ev.push(e) {
		d.stats.eventsDropped.Add(1)
	}
	if env := d.env.Load(); env != nil {
		(*env).Schedule(abi.QueueEvent)
	}
}

// processEvents writes pending events into the buffers the driver posted
// on the event queue, one event per buffer. Buffers stay posted while
// nothing is pending. A buffer too small for an event is given back with
// nothing written and the event waits for the next. Without
// FeatureEventQueue nothing is consumed.
func (d *Device) processEvents(ctx context.Context, q *virtio.DeviceQueue) error {
	if !d.events.Load() {
		return nil
	}
	var (
		chain virtio.Chain
		rec   [abi.EventSize]byte
	)
	for d.active.Load() && ctx.Err() == nil && d.ev.pending() {
		ok, err := q.PopInto(&chain)
		if err != nil {
			d.stats.badChains.Add(1)
			return fmt.Errorf("device %q: event queue: %w", d.name, err)
		}
		if !ok {
			return nil
		}
		if chain.WritableLen < abi.EventSize {
			d.stats.shortEventBuffers.Add(1)
			q.Push(chain.Head, 0)
			continue
		}
		e, ok := d.ev.pop()
		if !ok {
			// A reset emptied the queue since pending.
			q.Push(chain.Head, 0)
			continue
		}
		e.Put(rec[:])
		q.Push(chain.Head, chain.WriteAll(rec[:]))
		d.stats.eventsDelivered.Add(1)
	}
	return nil
}
