//go:build linux

package virtiopci

import (
	"context"
	"fmt"
	"sync"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// queue is one virtqueue: the split-ring driver over DMA memory and
// what the transport keeps beside it.
type queue struct {
	mu        sync.Mutex // serialises use of dq
	index     uint16
	dq        *virtio.DriverQueue
	notifyOff uint64 // in the notify area

	// Command's buffer (control queue), and the heads of commands whose
	// caller gave up: their completions are skipped, their buffers never
	// reused.
	scratch   guestdriver.Buffer
	abandoned map[uint16]bool
	// posted is the buffer behind each outstanding head (event queue).
	posted []guestdriver.Buffer
}

// scratchSize bounds one command: request and response together.
const scratchSize = 64 << 10

func (t *Transport) queue(i int) (*queue, error) {
	if i < 0 || i >= len(t.queues) {
		return nil, fmt.Errorf("virtiopci: no queue %d", i)
	}
	return t.queues[i], nil
}

// kick notifies the device of queue q: its index written to its notify
// address (without VIRTIO_F_NOTIFICATION_DATA).
func (t *Transport) kick(q *queue) { t.notify.MMIOWrite16(q.notifyOff, q.index) }

// wake returns the channel the next interrupt closes (nil when polling).
func (t *Transport) wake() <-chan struct{} {
	if t.irq == nil {
		return nil
	}
	return t.irq.next()
}

// sleep waits for wake, the poll interval or ctx, whichever comes first.
func (t *Transport) sleep(ctx context.Context, wake <-chan struct{}) error {
	timer := time.NewTimer(t.poll)
	defer timer.Stop()
	select {
	case <-wake:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Command implements guestdriver.Transport: one chain on the control
// queue (req readable, respLen bytes writable), kicked if the device
// asks, then a wait for its completion.
func (t *Transport) Command(ctx context.Context, req []byte, respLen uint32) ([]byte, error) {
	if len(req) == 0 || uint64(len(req))+uint64(respLen) > scratchSize {
		return nil, fmt.Errorf("virtiopci: command of %d+%d bytes (max %d together)", len(req), respLen, scratchSize)
	}
	q, err := t.queue(abi.QueueControl)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.scratch.Len() == 0 {
		if q.scratch, err = t.dma.alloc(scratchSize, 4096); err != nil {
			return nil, err
		}
	}
	buf := q.scratch
	buf.View.CopyIn(0, req)
	respGPA := buf.GPA + uint64(len(req))
	rd := []virtio.Buffer{{Addr: buf.GPA, Len: uint32(len(req))}}
	var wr []virtio.Buffer
	if respLen > 0 {
		wr = []virtio.Buffer{{Addr: respGPA, Len: respLen}}
	}
	head, err := q.dq.Add(rd, wr)
	if err != nil {
		return nil, fmt.Errorf("virtiopci: control queue: %w", err)
	}
	if q.dq.Publish() {
		t.kick(q)
	}
	for {
		wake := t.wake()
		h, written, ok := q.dq.GetUsed()
		switch {
		case ok && q.abandoned[h]:
			delete(q.abandoned, h)
			continue
		case ok && h != head:
			return nil, fmt.Errorf("virtiopci: control queue: device completed head %d, expected %d", h, head)
		case ok && written > respLen:
			return nil, fmt.Errorf("virtiopci: control queue: device claims %d bytes written into %d", written, respLen)
		case ok:
			out := make([]byte, written)
			buf.View.CopyOut(out, uint64(len(req)))
			return out, nil
		}
		if err := q.dq.Err(); err != nil {
			return nil, fmt.Errorf("virtiopci: control queue: %w", err)
		}
		if q.dq.EnableInterrupts() {
			continue
		}
		if err := t.sleep(ctx, wake); err != nil {
			// The device may still complete the chain and write the
			// response: skip it then, and never reuse this buffer.
			if q.abandoned == nil {
				q.abandoned = map[uint16]bool{}
			}
			q.abandoned[head] = true
			q.scratch = guestdriver.Buffer{}
			return nil, fmt.Errorf("virtiopci: control queue: %w", err)
		}
	}
}

// NotifyWakeup implements guestdriver.Transport.
func (t *Transport) NotifyWakeup() error {
	q, err := t.queue(abi.QueueWakeup)
	if err != nil {
		return err
	}
	t.kick(q)
	return nil
}

// PostEventBuffers implements guestdriver.Transport: one device-writable
// descriptor per buffer, published together, kicked if the device asks.
func (t *Transport) PostEventBuffers(bufs ...guestdriver.Buffer) error {
	q, err := t.queue(abi.QueueEvent)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var addErr error
	for _, b := range bufs {
		if b.Len() == 0 || b.Len() > 1<<31 {
			addErr = fmt.Errorf("virtiopci: event buffer of %d bytes", b.Len())
			break
		}
		head, err := q.dq.Add(nil, []virtio.Buffer{{Addr: b.GPA, Len: uint32(b.Len())}})
		if err != nil {
			addErr = fmt.Errorf("virtiopci: event queue: %w", err)
			break
		}
		q.posted[head] = b
	}
	if q.dq.Publish() {
		t.kick(q)
	}
	return addErr
}

// PostedEventBuffers implements guestdriver.Transport. The event queue
// is laid out afresh by Open, so only this transport's buffers count.
func (t *Transport) PostedEventBuffers() (int, error) {
	q, err := t.queue(abi.QueueEvent)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return int(q.dq.Size()) - q.dq.NumFree(), nil
}

// TakeEvent implements guestdriver.Transport.
func (t *Transport) TakeEvent() (guestdriver.Buffer, uint32, bool, error) {
	q, err := t.queue(abi.QueueEvent)
	if err != nil {
		return guestdriver.Buffer{}, 0, false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	head, written, ok := q.dq.GetUsed()
	if !ok {
		if err := q.dq.Err(); err != nil {
			return guestdriver.Buffer{}, 0, false, fmt.Errorf("virtiopci: event queue: %w", err)
		}
		return guestdriver.Buffer{}, 0, false, nil
	}
	b := q.posted[head]
	q.posted[head] = guestdriver.Buffer{}
	if uint64(written) > b.Len() {
		return guestdriver.Buffer{}, 0, false, fmt.Errorf("virtiopci: event queue: device claims %d bytes written into %d", written, b.Len())
	}
	return b, written, true, nil
}

// WaitEvents implements guestdriver.Transport: it returns once the event
// queue has a used buffer, after an interrupt or a poll interval (the
// caller loops on TakeEvent), or when ctx ends.
func (t *Transport) WaitEvents(ctx context.Context) error {
	q, err := t.queue(abi.QueueEvent)
	if err != nil {
		return err
	}
	wake := t.wake()
	q.mu.Lock()
	pending := q.dq.EnableInterrupts()
	q.mu.Unlock()
	if pending {
		return nil
	}
	if err := t.sleep(ctx, wake); err != nil {
		return fmt.Errorf("virtiopci: event queue: %w", err)
	}
	return nil
}
