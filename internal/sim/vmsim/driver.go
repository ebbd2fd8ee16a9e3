package vmsim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/virtio"
)

func (vm *VM) queue(i int) (*queue, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return nil, errors.New("vmsim: closed")
	}
	if i < 0 || i >= len(vm.queues) {
		return nil, fmt.Errorf("vmsim: no queue %d", i)
	}
	return vm.queues[i], nil
}

// Kick notifies queue i the way a guest's MMIO write to the notify area
// does under KVM: it signals the queue's ioeventfd.
func (vm *VM) Kick(i int) error {
	q, err := vm.queue(i)
	if err != nil {
		return err
	}
	if err := signalEventFD(q.kickFD); err != nil {
		return fmt.Errorf("vmsim: kick queue %d: %w", i, err)
	}
	return nil
}

// signalEventFD adds 1 to an eventfd's counter. EAGAIN means the counter
// is saturated: the reader will wake anyway.
func signalEventFD(fd int) error {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := unix.Write(fd, one[:]); err != nil && err != unix.EAGAIN {
		return err
	}
	return nil
}

// WaitInterrupt waits until the back-end signals queue i's call eventfd
// (the irqfd) and consumes the signal.
func (vm *VM) WaitInterrupt(ctx context.Context, i int) error {
	q, err := vm.queue(i)
	if err != nil {
		return err
	}
	// The deadline is cleared on every return, also when ctx fired: a
	// past deadline left behind would fail the next wait at once.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		q.call.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
		q.call.SetReadDeadline(time.Time{})
	}()
	if dl, ok := ctx.Deadline(); ok {
		q.call.SetReadDeadline(dl)
	}
	var b [8]byte
	_, err = q.call.Read(b[:])
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("vmsim: waiting for queue %d interrupt: %w", i, cerr)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("vmsim: waiting for queue %d interrupt: %w", i, context.DeadlineExceeded)
		}
		return fmt.Errorf("vmsim: waiting for queue %d interrupt: %w", i, err)
	}
	return nil
}

// Request is a synchronous driver round trip on queue q: it copies req
// into guest memory, adds one chain (req readable, respLen bytes
// writable), kicks if the device asks for it, waits for the chain to be
// used and returns the bytes the device wrote.
func (vm *VM) Request(ctx context.Context, qi int, req []byte, respLen uint32) ([]byte, error) {
	q, err := vm.queue(qi)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	dq := vm.Queue(qi)
	if dq == nil {
		return nil, fmt.Errorf("vmsim: queue %d is not set up", qi)
	}
	if uint64(len(req))+uint64(respLen) > scratchSize || len(req) == 0 && respLen == 0 {
		return nil, fmt.Errorf("vmsim: request of %d+%d bytes (max %d together)", len(req), respLen, scratchSize)
	}
	mem := vm.ram.table
	var rd, wr []virtio.Buffer
	if len(req) > 0 {
		v, err := mem.Translate(q.scratch, uint64(len(req)))
		if err != nil {
			return nil, err
		}
		v.CopyIn(0, req)
		rd = []virtio.Buffer{{Addr: q.scratch, Len: uint32(len(req))}}
	}
	respGPA := q.scratch + uint64(len(req))
	if respLen > 0 {
		wr = []virtio.Buffer{{Addr: respGPA, Len: respLen}}
	}
	head, err := dq.Add(rd, wr)
	if err != nil {
		return nil, fmt.Errorf("vmsim: queue %d: %w", qi, err)
	}
	if dq.Publish() {
		if err := vm.Kick(qi); err != nil {
			return nil, err
		}
	}
	for {
		if h, written, ok := dq.GetUsed(); ok {
			if h != head {
				return nil, fmt.Errorf("vmsim: queue %d: device completed head %d, expected %d", qi, h, head)
			}
			if written > respLen {
				return nil, fmt.Errorf("vmsim: queue %d: device claims %d bytes written into %d", qi, written, respLen)
			}
			out := make([]byte, written)
			if written > 0 {
				v, err := mem.Translate(respGPA, uint64(written))
				if err != nil {
					return nil, err
				}
				v.CopyOut(out, 0)
			}
			return out, nil
		}
		if err := dq.Err(); err != nil {
			return nil, fmt.Errorf("vmsim: queue %d: %w", qi, err)
		}
		if dq.EnableInterrupts() {
			continue
		}
		if err := vm.WaitInterrupt(ctx, qi); err != nil {
			return nil, err
		}
	}
}
