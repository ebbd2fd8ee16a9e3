package guestdriver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Event delivery. The device writes asynchronous events (CQ notifications,
// CQ overflow, QP errors, port changes) into buffers the driver keeps
// posted on abi.QueueEvent. One goroutine per Device (the pump) sleeps on
// the queue's interrupt, decodes every filled buffer, re-posts it at once
// so the device always has somewhere to write, and routes the event: CQ
// notifications to their CQ (CQ.Wait), everything else to a bounded queue
// that WaitEvent reads.
//
// A driver cannot take back the buffers it posted, so those of a closed
// Device stay posted for the next one on the transport. Open tops the
// queue up to eventBuffers rather than adding eventBuffers each time
// (which would fill the queue after a few Opens). Its area has room for
// eventBuffers records anyway: each predecessor's buffer that comes back
// is read, not re-posted (it is not this Device's memory), and one of the
// spare records takes its place.

const (
	// eventBuffers is how many event records stay posted. The device
	// queues events that find no buffer (and counts what it must drop),
	// so this only needs to cover a burst between two pump wake-ups.
	eventBuffers = 64
	// asyncBacklog bounds the events waiting for WaitEvent; beyond it the
	// oldest are dropped and counted (EventsLost).
	asyncBacklog = 256
)

type eventPump struct {
	d    *Device
	area Buffer // eventBuffers records of abi.EventSize bytes
	// spare are the records of area not posted yet, each waiting for a
	// predecessor's buffer to come back. Only the pump touches it.
	spare  []Buffer
	async  chan abi.Event
	lost   atomic.Uint64
	bad    atomic.Uint64
	cancel context.CancelFunc
	done   chan struct{}
	cause  error // why the pump stopped; written before done is closed
	once   sync.Once
}

// startEvents tops the posted event buffers up to eventBuffers and starts
// the pump, which lives until stop: it keeps ctx's values, not its end
// (ctx is Open's, which may bound only the opening).
func startEvents(ctx context.Context, d *Device) (*eventPump, error) {
	posted, err := d.t.PostedEventBuffers()
	if err != nil {
		return nil, err
	}
	area, err := d.mem.alloc(eventBuffers*abi.EventSize, abi.EventSize)
	if err != nil {
		return nil, fmt.Errorf("guestdriver: event buffers: %w", err)
	}
	bufs := make([]Buffer, eventBuffers)
	for i := range bufs {
		bufs[i], _ = area.Slice(uint64(i)*abi.EventSize, abi.EventSize)
	}
	n := max(eventBuffers-posted, 0)
	if n > 0 {
		if err := d.t.PostEventBuffers(bufs[:n]...); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &eventPump{d: d, area: area, spare: bufs[n:], async: make(chan abi.Event, asyncBacklog),
		cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p, nil
}

func (p *eventPump) stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}

// err is why the pump stopped (valid once done is closed).
func (p *eventPump) err() error { return p.cause }

func (p *eventPump) run(ctx context.Context) {
	defer close(p.done)
	t := p.d.t
	for {
		for {
			buf, n, ok, err := t.TakeEvent()
			if err != nil {
				p.fail(ctx, err)
				return
			}
			if !ok {
				break
			}
			p.handle(buf, n)
		}
		if err := t.WaitEvents(ctx); err != nil {
			p.fail(ctx, err)
			return
		}
	}
}

func (p *eventPump) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		p.cause = ErrClosed
		return
	}
	// Usually the VM or device going away underneath an open Device.
	p.cause = fmt.Errorf("guestdriver: event queue stopped: %w", err)
	p.d.log.Debug("event delivery stopped", "err", err)
}

// handle decodes one filled buffer, re-posts it if it is one of ours (a
// buffer a previous driver of this device posted is read but not
// re-posted: a spare record of ours, if any is left, takes its place),
// and routes the event.
func (p *eventPump) handle(buf Buffer, n uint32) {
	var ev abi.Event
	var decodeErr error
	if uint64(n) > buf.Len() {
		decodeErr = fmt.Errorf("%d bytes written into %d: %w", n, buf.Len(), ErrDevice)
	} else {
		ev, decodeErr = abi.DecodeEvent(buf.Bytes()[:n])
	}
	if off := buf.GPA - p.area.GPA; buf.GPA >= p.area.GPA && off < p.area.Len() && off%abi.EventSize == 0 {
		slot, _ := p.area.Slice(off, abi.EventSize)
		if err := p.d.t.PostEventBuffers(slot); err != nil {
			p.d.log.Debug("re-posting an event buffer", "err", err)
		}
	} else if k := len(p.spare) - 1; k >= 0 {
		if err := p.d.t.PostEventBuffers(p.spare[k]); err != nil {
			p.d.log.Debug("posting a spare event buffer", "err", err)
		} else {
			p.spare = p.spare[:k]
		}
	}
	if decodeErr != nil {
		p.bad.Add(1)
		p.d.log.Debug("malformed event", "err", decodeErr)
		return
	}
	p.dispatch(ev)
}

func (p *eventPump) dispatch(ev abi.Event) {
	if ev.Dropped > 0 {
		p.lost.Add(uint64(ev.Dropped))
	}
	if ev.Type == abi.EventCQComp || ev.Type == abi.EventCQErr {
		p.d.mu.Lock()
		cq := p.d.cqs[ev.Handle]
		p.d.mu.Unlock()
		if cq != nil {
			cq.event(ev.Type)
			if ev.Type == abi.EventCQComp {
				return // CQ.Wait's business only
			}
		}
	}
	for {
		select {
		case p.async <- ev:
			return
		default:
		}
		select {
		case <-p.async: // drop the oldest
			p.lost.Add(1)
		default:
		}
	}
}

// WaitEvent returns the next asynchronous event: QP errors, CQ errors,
// port and GID changes, and CQ notifications for CQs this driver does not
// know (those for its CQs go to CQ.Wait). Events that arrived before the
// Device was closed are still returned.
func (d *Device) WaitEvent(ctx context.Context) (abi.Event, error) {
	p := d.ev
	select {
	case ev := <-p.async:
		return ev, nil
	default:
	}
	select {
	case ev := <-p.async:
		return ev, nil
	case <-ctx.Done():
		return abi.Event{}, fmt.Errorf("guestdriver: waiting for an event: %w", ctx.Err())
	case <-p.done:
		select {
		case ev := <-p.async:
			return ev, nil
		default:
		}
		return abi.Event{}, p.err()
	}
}

// EventsLost is the number of events dropped: by the device (its queue
// overflowed while no buffer was posted) and by the driver (nobody called
// WaitEvent for asyncBacklog events).
func (d *Device) EventsLost() uint64 { return d.ev.lost.Load() }
