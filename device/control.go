package device

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// ProcessQueue implements vhost.Device.
//
//   - QueueControl: every available chain is a command; see
//     control.serve.
//   - QueueEvent: the driver posts device-writable buffers that the device
//     fills with asynchronous events; see processEvents.
//   - QueueWakeup: the idle-engine kick of the wake-up protocol. No buffer
//     is posted (buffers a driver posts anyway stay posted); the kick wakes
//     the engine.
func (d *Device) ProcessQueue(ctx context.Context, idx int, q *virtio.DeviceQueue, mem *guestmem.Table) error {
	switch idx {
	case abi.QueueControl:
		d.run.RLock()
		defer d.run.RUnlock()
		return d.ctl.serve(ctx, d, q, mem)
	case abi.QueueEvent:
		d.run.RLock()
		defer d.run.RUnlock()
		return d.processEvents(ctx, q)
	case abi.QueueWakeup:
		if d.active.Load() {
			d.eng.Wake()
		}
		return nil
	}
	return fmt.Errorf("device %q: queue %d: %w", d.name, idx, ErrNoSuchQueue)
}

// control is the control queue's side of the device: its buffers, its
// counters and the dispatch of every command to its handler.
//
// Invariants:
//   - One command at a time (the lock), in buffers allocated once with the
//     device rather than per kick.
//   - A request is copied out of guest memory, bounded by
//     abi.MaxRequestSize, before it is looked at: the guest can rewrite
//     its buffers at any time, and must not be able to change a request
//     between check and use.
//   - Every popped chain is pushed back exactly once, with a response
//     when the writable part can hold at least a response header, with
//     written=0 otherwise.
//   - A command whose response would not fit is refused before it runs,
//     so nothing is created whose handle the guest could not receive.
type control struct {
	sync.Mutex
	req  [abi.MaxRequestSize]byte
	resp [abi.ResponseHeaderSize + abi.MaxResponseSize]byte
	cmd  cmd

	stats controlStats
}

// serve answers every available command. It stops early (leaving the rest
// in the ring for the next call) when ctx ends or the device is
// deactivated. A Pop error means the guest broke the ring; it is returned
// so the Backend marks the queue broken.
func (ctl *control) serve(ctx context.Context, d *Device, q *virtio.DeviceQueue, mem *guestmem.Table) error {
	ctl.Lock()
	defer ctl.Unlock()
	var chain virtio.Chain
	for d.active.Load() && ctx.Err() == nil {
		ok, err := q.PopInto(&chain)
		if err != nil {
			d.stats.badChains.Add(1)
			return fmt.Errorf("device %q: control queue: %w", d.name, err)
		}
		if !ok {
			return nil
		}
		written := ctl.answer(d, &chain, mem)
		q.Push(chain.Head, written)
	}
	return nil
}

// answer answers one control chain and returns the number of bytes
// written into its writable part.
func (ctl *control) answer(d *Device, c *virtio.Chain, mem *guestmem.Table) uint32 {
	ctl.stats.commands.Add(1)
	if c.WritableLen < abi.ResponseHeaderSize {
		// Nowhere to put even a status: give the chain back untouched.
		ctl.stats.dropped.Add(1)
		d.log.Debug("control chain without room for a response", "head", c.Head,
			"readable", c.ReadableLen, "writable", c.WritableLen)
		return 0
	}
	resp := ctl.resp[:]
	t0 := time.Now()
	op, status, n := ctl.decodeAndExecute(d, c, mem, resp[abi.ResponseHeaderSize:abi.ResponseHeaderSize])
	ctl.stats.count(op, status, time.Since(t0))
	if status != abi.StatusOK {
		n = 0
	}
	abi.AppendResponse(resp[:0], status, nil)
	return c.WriteAll(resp[:abi.ResponseHeaderSize+n])
}

// decodeAndExecute copies the request out of guest memory, validates it
// and runs it, encoding the response payload into out (which has room
// for abi.MaxResponseSize bytes). It returns the opcode (0 when none could
// be read), the status and the payload length.
func (ctl *control) decodeAndExecute(d *Device, c *virtio.Chain, mem *guestmem.Table, out []byte) (abi.Opcode, abi.Status, int) {
	if c.ReadableLen > abi.MaxRequestSize {
		ctl.stats.malformed.Add(1)
		return 0, abi.StatusInvalidArgument, 0
	}
	buf := ctl.req[:c.ReadAll(ctl.req[:c.ReadableLen])]
	req, err := abi.DecodeRequest(buf)
	op := req.Header.Opcode
	if err != nil {
		ctl.stats.malformed.Add(1)
		return op, abi.StatusFor(err), 0
	}
	if n, ok := op.ResponseSize(); ok && uint64(c.WritableLen) < uint64(abi.ResponseHeaderSize+n) {
		return op, abi.StatusResponseTooSmall, 0
	}
	payload, err := ctl.execute(d, op, req.Payload, mem, out)
	st := abi.StatusFor(err)
	if err != nil {
		d.log.Debug("control command failed", "op", op.String(), "status", st.String(), "head", c.Head, "err", err)
		return op, st, 0
	}
	// Handlers append to out; one that returns another slice (a fixed
	// payload) is copied into place.
	n := copy(out[:cap(out)], payload)
	return op, st, n
}

// execute runs one well-framed command with the object tables locked.
func (ctl *control) execute(d *Device, op abi.Opcode, payload []byte, mem *guestmem.Table, out []byte) ([]byte, error) {
	if int(op) >= len(handlers) || handlers[op] == nil {
		return nil, fmt.Errorf("%v: %w", op, abi.StatusNotSupported)
	}
	d.omu.Lock()
	defer d.omu.Unlock()
	if d.o.closed {
		return nil, fmt.Errorf("device closed: %w", abi.StatusBadState)
	}
	c := &ctl.cmd
	*c = cmd{mem: mem, out: out}
	return handlers[op](d, c, payload)
}

// cmd is what a handler works with: the guest memory the command may
// read and the buffer its response payload is appended to.
type cmd struct {
	mem *guestmem.Table
	out []byte
}

// handler executes one decoded command. Its error wraps the abi.Status
// the guest gets (abi.StatusFor maps it); the rest of the error is for
// the log.
type handler func(d *Device, c *cmd, payload []byte) ([]byte, error)

// handlers maps each opcode to its handler: a method of the part of the
// device whose state the command is about.
var handlers = [...]handler{
	abi.OpQueryDevice:     (*Device).queryDevice,
	abi.OpQueryPort:       (*Device).queryPort,
	abi.OpQueryGID:        onGIDs((*gidTable).queryGID),
	abi.OpAddGID:          onGIDs((*gidTable).addGID),
	abi.OpDelGID:          onGIDs((*gidTable).delGID),
	abi.OpAllocPD:         onObjects((*objects).allocPD),
	abi.OpDeallocPD:       onObjects((*objects).deallocPD),
	abi.OpCreateCQ:        onObjects((*objects).createCQ),
	abi.OpResizeCQ:        onObjects((*objects).resizeCQ),
	abi.OpDestroyCQ:       onObjects((*objects).destroyCQ),
	abi.OpCreateQP:        onObjects((*objects).createQP),
	abi.OpModifyQP:        onObjects((*objects).modifyQP),
	abi.OpQueryQP:         onObjects((*objects).queryQP),
	abi.OpDestroyQP:       onObjects((*objects).destroyQP),
	abi.OpRegMR:           onObjects((*objects).regMR),
	abi.OpDeregMR:         onObjects((*objects).deregMR),
	abi.OpCreateAH:        onObjects((*objects).createAH),
	abi.OpDestroyAH:       onObjects((*objects).destroyAH),
	abi.OpSetDoorbellArea: (*Device).setDoorbellArea,
	abi.OpResetState:      (*Device).resetStateCmd,
	abi.OpCreateSRQ:       onObjects((*objects).createSRQ),
	abi.OpModifySRQ:       onObjects((*objects).modifySRQ),
	abi.OpQuerySRQ:        onObjects((*objects).querySRQ),
	abi.OpDestroySRQ:      onObjects((*objects).destroySRQ),
}

func onObjects(h func(*objects, *cmd, []byte) ([]byte, error)) handler {
	return func(d *Device, c *cmd, payload []byte) ([]byte, error) { return h(&d.o, c, payload) }
}

func onGIDs(h func(*gidTable, *cmd, []byte) ([]byte, error)) handler {
	return func(d *Device, c *cmd, payload []byte) ([]byte, error) { return h(&d.gids, c, payload) }
}

// fail builds a handler error: the message for the log, wrapping the
// status for the guest.
func fail(st abi.Status, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, st)...)
}

// decode decodes a request payload; a malformed one is INVALID_ARGUMENT
// (abi's decoding errors map to it).
func decode[T any](payload []byte, v *T) error { return abi.DecodePayload(payload, v) }

// encode appends a response payload to the command's buffer.
func (c *cmd) encode(v any) []byte { return abi.EncodePayload(c.out, v) }

// mttError gives an emtt error the status the guest gets.
func mttError(err error) error {
	var st abi.Status
	switch {
	case errors.Is(err, emtt.ErrBadAddress), errors.Is(err, emtt.ErrIOMemory):
		st = abi.StatusBadAddress
	case errors.Is(err, emtt.ErrFull), errors.Is(err, emtt.ErrPin):
		// ErrPin: pinning at registration (pvdma.ModeAtRegMR) found the
		// pin budget held by chunks in use.
		st = abi.StatusNoResources
	case errors.Is(err, emtt.ErrNoKey):
		st = abi.StatusNotFound
	case errors.Is(err, emtt.ErrRange):
		st = abi.StatusInvalidArgument
	case errors.Is(err, emtt.ErrPD), errors.Is(err, emtt.ErrAccess):
		st = abi.StatusPermission
	case errors.Is(err, emtt.ErrInvalidated):
		st = abi.StatusBadState
	default:
		return err
	}
	return fmt.Errorf("%w: %w", err, st)
}

// fabricError gives a fabric registration error its status.
func fabricError(err error) error {
	switch {
	case errors.Is(err, fabric.ErrGIDInUse):
		return fmt.Errorf("%w: %w", err, abi.StatusBusy)
	case errors.Is(err, fabric.ErrGIDReserved):
		return fmt.Errorf("%w: %w", err, abi.StatusPermission)
	}
	return err
}
