package device

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// ProcessQueue implements vhost.Device.
//
//   - QueueControl: every available chain is a command; see
//     processControl.
//   - QueueEvent: the driver posts device-writable buffers that the device
//     fills with asynchronous events. The device has no event sources yet
//     (they arrive with QPs and CQs), so the buffers stay posted; nothing is
//     consumed.
//   - QueueWakeup: the idle-engine kick. The data-path engine does not
//     exist yet, so a kick has nothing to wake; nothing is consumed.
func (d *Device) ProcessQueue(ctx context.Context, idx int, q *virtio.DeviceQueue, mem *guestmem.Table) error {
	switch idx {
	case abi.QueueControl:
		d.run.RLock()
		defer d.run.RUnlock()
		return d.processControl(ctx, q)
	case abi.QueueEvent, abi.QueueWakeup:
		return nil
	}
	return fmt.Errorf("device %q: queue %d: %w", d.name, idx, ErrNoSuchQueue)
}

// processControl answers every available command. It stops early (leaving
// the rest in the ring for the next call) when ctx ends or the device is
// deactivated. A Pop error means the guest broke the ring; it is returned
// so the Backend marks the queue broken.
func (d *Device) processControl(ctx context.Context, q *virtio.DeviceQueue) error {
	var (
		chain virtio.Chain
		req   = make([]byte, abi.MaxRequestSize)
		resp  = make([]byte, 0, abi.ResponseHeaderSize+abi.MaxResponseSize)
	)
	for d.active.Load() && ctx.Err() == nil {
		ok, err := q.PopInto(&chain)
		if err != nil {
			d.stats.badChains.Add(1)
			return fmt.Errorf("device %q: control queue: %w", d.name, err)
		}
		if !ok {
			return nil
		}
		written := d.handleCommand(&chain, req, &resp)
		q.Push(chain.Head, written)
	}
	return nil
}

// handleCommand answers one control chain and returns the number of bytes
// written into its writable part.
func (d *Device) handleCommand(c *virtio.Chain, reqBuf []byte, resp *[]byte) uint32 {
	d.stats.commands.Add(1)
	if c.WritableLen < abi.ResponseHeaderSize {
		// Nowhere to put even a status: give the chain back untouched.
		d.stats.dropped.Add(1)
		d.log.Debug("control chain without room for a response", "head", c.Head,
			"readable", c.ReadableLen, "writable", c.WritableLen)
		return 0
	}
	op, status, payload := d.decodeAndExecute(c, reqBuf)
	d.stats.count(op, status)
	if status != abi.StatusOK {
		payload = nil
		d.log.Debug("control command failed", "op", op.String(), "status", status.String(), "head", c.Head)
	}
	*resp = abi.AppendResponse((*resp)[:0], status, payload)
	return c.WriteAll(*resp)
}

// decodeAndExecute copies the request out of guest memory, validates it
// and runs it. It returns the opcode (0 when none could be read), the
// status and, for OK, the response payload.
func (d *Device) decodeAndExecute(c *virtio.Chain, reqBuf []byte) (abi.Opcode, abi.Status, []byte) {
	if c.ReadableLen > abi.MaxRequestSize {
		d.stats.malformed.Add(1)
		return 0, abi.StatusInvalidArgument, nil
	}
	// Copy first, then validate: the guest can rewrite its buffers at any
	// time, and must not be able to change a request between check and use.
	buf := reqBuf[:c.ReadAll(reqBuf[:c.ReadableLen])]
	req, err := abi.DecodeRequest(buf)
	op := req.Header.Opcode
	if err != nil {
		d.stats.malformed.Add(1)
		return op, abi.StatusFor(err), nil
	}
	if n, ok := op.ResponseSize(); ok && uint64(c.WritableLen) < uint64(abi.ResponseHeaderSize+n) {
		// Refuse before executing, so nothing is created whose handle
		// the guest could not receive.
		return op, abi.StatusResponseTooSmall, nil
	}
	status, payload := d.execute(op, req.Payload)
	return op, status, payload
}

// execute runs one well-framed command.
func (d *Device) execute(op abi.Opcode, payload []byte) (abi.Status, []byte) {
	switch op {
	case abi.OpQueryDevice:
		// DecodeRequest checked the (empty) payload.
		return abi.StatusOK, d.attr
	case abi.OpResetState:
		d.resetState()
		return abi.StatusOK, nil
	}
	// Defined by the ABI, not implemented by this device yet.
	return abi.StatusNotSupported, nil
}
