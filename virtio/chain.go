package virtio

import (
	"fmt"
	"math"

	"github.com/vstellar/vstellar/guestmem"
)

// Chain is a validated descriptor chain: views of the device-readable
// buffers followed by the device-writable ones, in chain order.
// Zero-length descriptors are accepted and contribute no view.
//
// The views alias guest memory, which the guest can change at any time:
// copy what you must validate before validating it (ReadAll does).
type Chain struct {
	Head        uint16
	Readable    []guestmem.View
	Writable    []guestmem.View
	ReadableLen uint32 // sum of the readable lengths
	WritableLen uint32 // sum of the writable lengths
}

// Reset empties c, keeping its slices' capacity for reuse by PopInto.
func (c *Chain) Reset() {
	c.Head = 0
	clear(c.Readable)
	clear(c.Writable)
	c.Readable = c.Readable[:0]
	c.Writable = c.Writable[:0]
	c.ReadableLen, c.WritableLen = 0, 0
}

// ReadAll gathers the readable part of the chain into dst, from its start,
// and returns the number of bytes copied: min(len(dst), ReadableLen).
func (c *Chain) ReadAll(dst []byte) int { return c.CopyOut(dst, 0) }

// CopyOut gathers readable bytes starting off bytes into the readable part
// into dst and returns the number copied.
func (c *Chain) CopyOut(dst []byte, off uint64) int {
	return guestmem.CopyOutViews(dst, c.Readable, off)
}

// WriteAll scatters src into the writable part of the chain from its start
// and returns the number of bytes written: min(len(src), WritableLen).
// Report that number (or the total the device wrote) in Push.
func (c *Chain) WriteAll(src []byte) uint32 { return c.WriteAt(src, 0) }

// WriteAt scatters src into the writable part starting off bytes in and
// returns the number of bytes written.
func (c *Chain) WriteAt(src []byte, off uint64) uint32 {
	return uint32(guestmem.CopyInViews(c.Writable, off, src))
}

// Pop returns the next available chain, or ok=false when the driver has
// made nothing new available. The whole chain is validated before Pop
// returns (see walkChain); on error the queue's indices are unchanged,
// nothing has been written to guest memory, and the error wraps ErrBadChain
// (plus guestmem.ErrOutOfRange when an address was outside guest memory).
// A device should then treat the queue as broken (DEVICE_NEEDS_RESET).
//
// Chains a crashed instance left in flight (see SetInflight) come first, in
// the order they were originally popped, so a device resubmits them
// without knowing about inflight tracking.
func (q *DeviceQueue) Pop() (Chain, bool, error) {
	var c Chain
	ok, err := q.PopInto(&c)
	return c, ok, err
}

// PopInto is Pop reusing c's slices, for a worker that pops in a loop
// without allocating.
func (q *DeviceQueue) PopInto(c *Chain) (bool, error) {
	c.Reset()
	if q.inflight != nil && len(q.inflight.pending) > 0 {
		head := q.inflight.pending[0]
		if err := q.walkChain(head, c); err != nil {
			c.Reset()
			return false, fmt.Errorf("resubmitting inflight head %d: %w", head, err)
		}
		q.inflight.pending = q.inflight.pending[1:]
		return true, nil
	}
	// Acquire: the ring entry and the descriptors it names were written
	// before the driver published avail->idx.
	availIdx := q.r.avail.LoadUint16Acquire(ringOffIdx)
	ahead := availIdx - q.nextAvail
	if ahead == 0 {
		return false, nil
	}
	if ahead > q.size {
		return false, fmt.Errorf("avail->idx %d is %d entries ahead of next avail %d, queue size %d: %w",
			availIdx, ahead, q.nextAvail, q.size, ErrBadChain)
	}
	head := q.r.avail.Uint16(availRingOff(q.nextAvail & (q.size - 1)))
	if head >= q.size {
		return false, fmt.Errorf("avail entry %d names head %d, queue size %d: %w", q.nextAvail, head, q.size, ErrBadChain)
	}
	if q.busy[head] {
		return false, fmt.Errorf("avail entry %d names head %d, which the device still owns: %w", q.nextAvail, head, ErrBadChain)
	}
	if err := q.walkChain(head, c); err != nil {
		c.Reset()
		return false, fmt.Errorf("avail entry %d head %d: %w", q.nextAvail, head, err)
	}
	q.nextAvail++
	q.busy[head] = true
	q.inflightGet(head)
	if q.eventIdx && q.notify {
		// Ask for a kick when the driver publishes the entry after this one.
		q.r.used.StoreUint16Release(usedAvailEventOff(q.size), q.nextAvail)
	}
	return true, nil
}

// rawDesc is one buffer descriptor as read from guest memory.
type rawDesc struct {
	addr  uint64
	len   uint32
	write bool
}

// walkChain reads and validates the chain starting at head (< q.size) into
// c. It follows the spec's rules for the device and the driver:
//
//   - next links stay inside the table they index (the ring's descriptor
//     table, or the indirect table);
//   - a chain has at most q.size descriptors in the ring table and at most
//     len/16 in an indirect table (more means a loop);
//   - an indirect descriptor must not also have NEXT; it ends the ring
//     part of the chain, so "zero or more direct descriptors followed by one
//     indirect descriptor" is accepted, as the spec requires of devices
//     (libvhost-user only accepts an indirect head); its WRITE flag is
//     ignored;
//   - an indirect table is non-empty, a multiple of 16 bytes, at most
//     MaxQueueSize entries, inside one region, and holds no INDIRECT
//     descriptor;
//   - no device-readable descriptor follows a device-writable one;
//   - the readable and writable totals each fit in 32 bits (the driver
//     must not add a chain longer than 2^32 bytes);
//   - every buffer translates, wholly inside one region.
//
// The walk has two passes: the first reads every descriptor exactly once
// into q.scratch and checks the structure and the length sums, the second
// translates the buffers. A guest rewriting the table concurrently cannot
// change a value between its check and its use, and structural errors are
// reported as such even when the buffers would not translate either.
//
// Whether VIRTIO_F_INDIRECT_DESC was negotiated is not checked here: an
// indirect chain from a driver that did not negotiate it is handled like
// any other (QEMU does the same, with a log message).
func (q *DeviceQueue) walkChain(head uint16, c *Chain) error {
	c.Head = head
	raw := q.scratch[:0]
	defer func() { q.scratch = raw[:0] }()

	table := q.r.desc
	limit := uint32(q.size)
	i := uint32(head)
	indirect := false
	var seen uint32
	var rlen, wlen uint64
	sawWritable := false
	for {
		seen++
		if seen > limit {
			if indirect {
				return fmt.Errorf("indirect chain longer than its %d-entry table (loop): %w", limit, ErrBadChain)
			}
			return fmt.Errorf("chain longer than queue size %d (loop): %w", limit, ErrBadChain)
		}
		off := uint64(i) * DescSize
		addr := table.Uint64(off + descOffAddr)
		length := table.Uint32(off + descOffLen)
		flags := table.Uint16(off + descOffFlags)
		next := table.Uint16(off + descOffNext)

		if flags&DescFIndirect != 0 {
			switch {
			case indirect:
				return fmt.Errorf("descriptor %d of an indirect table is itself indirect: %w", i, ErrBadChain)
			case flags&DescFNext != 0:
				return fmt.Errorf("descriptor %d has both INDIRECT and NEXT: %w", i, ErrBadChain)
			case length == 0 || length%DescSize != 0:
				return fmt.Errorf("indirect table length %d is not a non-zero multiple of %d: %w", length, DescSize, ErrBadChain)
			case length > MaxQueueSize*DescSize:
				return fmt.Errorf("indirect table length %d exceeds %d entries: %w", length, MaxQueueSize, ErrBadChain)
			}
			t, err := q.mem.Translate(addr, uint64(length))
			if err != nil {
				return fmt.Errorf("indirect table [%#x, +%#x): %w: %w", addr, length, ErrBadChain, err)
			}
			table, limit, i, seen, indirect = t, length/DescSize, 0, 0, true
			continue
		}

		write := flags&DescFWrite != 0
		if write {
			sawWritable = true
			wlen += uint64(length)
			if wlen > math.MaxUint32 {
				return fmt.Errorf("writable length exceeds 2^32-1: %w", ErrBadChain)
			}
		} else {
			if sawWritable {
				return fmt.Errorf("device-readable descriptor %d follows a device-writable one: %w", i, ErrBadChain)
			}
			rlen += uint64(length)
			if rlen > math.MaxUint32 {
				return fmt.Errorf("readable length exceeds 2^32-1: %w", ErrBadChain)
			}
		}
		if length != 0 {
			raw = append(raw, rawDesc{addr: addr, len: length, write: write})
		}

		if flags&DescFNext == 0 {
			break
		}
		if uint32(next) >= limit {
			return fmt.Errorf("descriptor %d links to %d, table has %d entries: %w", i, next, limit, ErrBadChain)
		}
		i = uint32(next)
	}

	for k, d := range raw {
		v, err := q.mem.Translate(d.addr, uint64(d.len))
		if err != nil {
			return fmt.Errorf("buffer %d [%#x, +%#x): %w: %w", k, d.addr, d.len, ErrBadChain, err)
		}
		if d.write {
			c.Writable = append(c.Writable, v)
		} else {
			c.Readable = append(c.Readable, v)
		}
	}
	c.ReadableLen, c.WritableLen = uint32(rlen), uint32(wlen)
	return nil
}
