package vmsim

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/virtio"
)

// Device-writable buffers a guest driver keeps posted on a queue (the way
// a virtio driver stocks an event or receive queue): PostWritable makes
// them available, TakeUsed reclaims the ones the device filled, WaitUsed
// sleeps until there is one. Unlike Request, nothing here waits for a
// particular chain, so a caller can keep many buffers outstanding and
// consume them in whatever order the device returns them. A queue served
// this way must not also be used with Request.

// posted is the guest's bookkeeping for one queue's posted buffers: the
// buffer behind every outstanding head. It belongs to one DriverQueue; a
// Reset makes a new DriverQueue, and the old bookkeeping is dropped with
// the old rings.
type posted struct {
	dq   *virtio.DriverQueue
	bufs []virtio.Buffer // by head
}

// postedFor returns q's bookkeeping for dq, starting afresh if the
// driver's rings were laid out anew since. Called with q.mu held.
func (q *queue) postedFor(dq *virtio.DriverQueue) *posted {
	if q.posted == nil || q.posted.dq != dq {
		q.posted = &posted{dq: dq, bufs: make([]virtio.Buffer, dq.Size())}
	}
	return q.posted
}

// PostWritable adds each buffer as a one-descriptor device-writable chain
// on queue i, publishes them, and kicks the queue if the device asks for
// it. Either every buffer is posted or, on error, those before the one
// that did not fit.
func (vm *VM) PostWritable(i int, bufs ...virtio.Buffer) error {
	q, err := vm.queue(i)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	dq := vm.Queue(i)
	if dq == nil {
		return fmt.Errorf("vmsim: queue %d is not set up", i)
	}
	p := q.postedFor(dq)
	var addErr error
	for _, b := range bufs {
		head, err := dq.Add(nil, []virtio.Buffer{b})
		if err != nil {
			addErr = fmt.Errorf("vmsim: queue %d: %w", i, err)
			break
		}
		p.bufs[head] = b
	}
	if dq.Publish() {
		if err := vm.Kick(i); err != nil {
			return err
		}
	}
	return addErr
}

// TakeUsed reclaims the next chain the device returned on queue i: the
// buffer PostWritable posted for it and the number of bytes the device
// says it wrote (never more than the buffer's length). ok is false when
// nothing new has been returned.
func (vm *VM) TakeUsed(i int) (buf virtio.Buffer, written uint32, ok bool, err error) {
	q, err := vm.queue(i)
	if err != nil {
		return buf, 0, false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	dq := vm.Queue(i)
	if dq == nil {
		return buf, 0, false, fmt.Errorf("vmsim: queue %d is not set up", i)
	}
	head, written, ok := dq.GetUsed()
	if !ok {
		if err := dq.Err(); err != nil {
			return buf, 0, false, fmt.Errorf("vmsim: queue %d: %w", i, err)
		}
		return buf, 0, false, nil
	}
	p := q.postedFor(dq)
	buf = p.bufs[head]
	p.bufs[head] = virtio.Buffer{}
	if buf.Len == 0 {
		// A chain this API did not post (DriverQueue checked the head
		// is outstanding, so someone used Request on this queue).
		return buf, 0, false, fmt.Errorf("vmsim: queue %d: used head %d was not posted by PostWritable", i, head)
	}
	if written > buf.Len {
		return buf, 0, false, fmt.Errorf("vmsim: queue %d: device claims %d bytes written into %d", i, written, buf.Len)
	}
	return buf, written, true, nil
}

// WaitUsed returns once queue i has a used chain to take, asking the
// device for an interrupt and sleeping on it if there is none yet. It may
// return early (a stale interrupt); callers loop on TakeUsed.
func (vm *VM) WaitUsed(ctx context.Context, i int) error {
	q, err := vm.queue(i)
	if err != nil {
		return err
	}
	q.mu.Lock()
	dq := vm.Queue(i)
	if dq == nil {
		q.mu.Unlock()
		return fmt.Errorf("vmsim: queue %d is not set up", i)
	}
	pending := dq.EnableInterrupts()
	q.mu.Unlock()
	if pending {
		return nil
	}
	return vm.WaitInterrupt(ctx, i)
}
