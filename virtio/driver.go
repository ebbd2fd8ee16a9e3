package virtio

import (
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
)

// DriverQueue is the driver's end of a split virtqueue: what a guest's
// virtio driver does. The simulated VMM in tests, the demo and the
// benchmarks use it to feed a DeviceQueue (or the real daemon) through
// guest memory.
//
// It deliberately shares no chain code with DeviceQueue (see the package
// doc). It trusts only its own bookkeeping: the used ring tells it which
// head completed, and it checks that head against what it has outstanding.
// Not safe for concurrent use.
type DriverQueue struct {
	mem      *guestmem.Table
	size     uint16
	addrs    RingAddrs
	eventIdx bool
	desc     guestmem.View
	avail    guestmem.View
	used     guestmem.View

	free     []uint16 // stack of free descriptor indices
	link     []uint16 // link[i]: next descriptor of an outstanding chain (Go-side copy)
	chainLen []uint16 // chainLen[head]: ring descriptors the chain holds; 0 = not outstanding

	availIdx  uint16 // next avail->idx to publish (counts added chains)
	published uint16 // avail->idx as last published
	lastUsed  uint16 // next used entry to consume

	interrupts bool  // driver wants used-buffer notifications
	err        error // first device error seen in the used ring
}

// Buffer is a guest physical buffer for DriverQueue.Add.
type Buffer struct {
	Addr uint64
	Len  uint32
}

// NewDriverQueue lays out a fresh queue at addrs: it zeroes the three rings
// (which also sets used->flags to 0, as the spec requires of the driver)
// and puts every descriptor on the free list. Interrupts start enabled.
func NewDriverQueue(mem *guestmem.Table, size uint16, addrs RingAddrs, eventIdx bool) (*DriverQueue, error) {
	r, err := mapRings(mem, size, addrs)
	if err != nil {
		return nil, fmt.Errorf("virtio: driver queue: %w", err)
	}
	for _, v := range []guestmem.View{r.desc, r.avail, r.used} {
		clear(v.Bytes())
	}
	q := &DriverQueue{
		mem: mem, size: size, addrs: addrs, eventIdx: eventIdx,
		desc: r.desc, avail: r.avail, used: r.used,
		free:       make([]uint16, size),
		link:       make([]uint16, size),
		chainLen:   make([]uint16, size),
		interrupts: true,
	}
	// Hand out low indices first (purely cosmetic: easier to read dumps).
	for i := range q.free {
		q.free[i] = size - 1 - uint16(i)
	}
	return q, nil
}

// Addrs returns the ring addresses.
func (q *DriverQueue) Addrs() RingAddrs { return q.addrs }

// Size is the queue size.
func (q *DriverQueue) Size() uint16 { return q.size }

// NumFree is the number of free ring descriptors.
func (q *DriverQueue) NumFree() int { return len(q.free) }

// Err reports the first device misbehaviour GetUsed saw (a used entry
// naming a head that is not outstanding, or a used->idx running ahead).
// After that GetUsed returns nothing.
func (q *DriverQueue) Err() error { return q.err }

func (q *DriverQueue) putDesc(i uint16, addr uint64, length uint32, flags, next uint16) {
	off := uint64(i) * 16
	q.desc.PutUint64(off, addr)
	q.desc.PutUint32(off+8, length)
	q.desc.PutUint16(off+12, flags)
	q.desc.PutUint16(off+14, next)
}

// Add places a chain of direct descriptors, readable buffers first, and
// queues its head for the next Publish. It needs len(readable) +
// len(writable) free descriptors (ErrQueueFull otherwise).
func (q *DriverQueue) Add(readable, writable []Buffer) (head uint16, err error) {
	n := len(readable) + len(writable)
	if n == 0 {
		return 0, fmt.Errorf("virtio: driver queue: empty chain")
	}
	if n > len(q.free) {
		return 0, fmt.Errorf("virtio: driver queue: chain of %d, %d free: %w", n, len(q.free), ErrQueueFull)
	}
	ids := q.free[len(q.free)-n:]
	// Build back to front so each descriptor's next is known.
	for k := n - 1; k >= 0; k-- {
		var b Buffer
		var flags uint16
		if k < len(readable) {
			b = readable[k]
		} else {
			b = writable[k-len(readable)]
			flags = 2 // VIRTQ_DESC_F_WRITE
		}
		var next uint16
		if k < n-1 {
			flags |= 1 // VIRTQ_DESC_F_NEXT
			next = ids[k+1]
			q.link[ids[k]] = next
		}
		q.putDesc(ids[k], b.Addr, b.Len, flags, next)
	}
	head = ids[0]
	q.free = q.free[:len(q.free)-n]
	q.chainLen[head] = uint16(n)
	q.queueHead(head)
	return head, nil
}

// AddIndirect writes readable then writable buffers as an indirect
// descriptor table at guest physical table (16 bytes per buffer, memory the
// caller owns until the chain is used) and queues one ring descriptor
// pointing at it.
func (q *DriverQueue) AddIndirect(table uint64, readable, writable []Buffer) (head uint16, err error) {
	n := len(readable) + len(writable)
	if n == 0 || n > MaxQueueSize {
		return 0, fmt.Errorf("virtio: driver queue: indirect table of %d entries", n)
	}
	if len(q.free) == 0 {
		return 0, fmt.Errorf("virtio: driver queue: no free descriptor: %w", ErrQueueFull)
	}
	t, err := q.mem.Translate(table, 16*uint64(n))
	if err != nil {
		return 0, fmt.Errorf("virtio: driver queue: indirect table: %w", err)
	}
	for k := range n {
		var b Buffer
		var flags uint16
		if k < len(readable) {
			b = readable[k]
		} else {
			b = writable[k-len(readable)]
			flags = 2
		}
		var next uint16
		if k < n-1 {
			flags |= 1
			next = uint16(k + 1)
		}
		off := uint64(k) * 16
		t.PutUint64(off, b.Addr)
		t.PutUint32(off+8, b.Len)
		t.PutUint16(off+12, flags)
		t.PutUint16(off+14, next)
	}
	head = q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.putDesc(head, table, uint32(16*n), 4 /* VIRTQ_DESC_F_INDIRECT */, 0)
	q.chainLen[head] = 1
	q.queueHead(head)
	return head, nil
}

func (q *DriverQueue) queueHead(head uint16) {
	q.avail.PutUint16(4+2*uint64(q.availIdx&(q.size-1)), head)
	q.availIdx++
}

// Publish makes every chain added since the last Publish available, by
// storing avail->idx with release ordering, and reports whether the device
// asked for a kick: with EVENT_IDX iff avail_event lies in [old, new) of
// avail->idx; otherwise iff VIRTQ_USED_F_NO_NOTIFY is clear. The store and
// the load of the device's field are sequentially consistent (the full
// barrier Linux's virtqueue_kick_prepare has).
func (q *DriverQueue) Publish() (kick bool) {
	old, cur := q.published, q.availIdx
	if old == cur {
		return false
	}
	q.avail.StoreUint16Release(2, cur)
	q.published = cur
	if q.eventIdx {
		ev := q.used.LoadUint16Acquire(4 + 8*uint64(q.size))
		// vring_need_event(ev, cur, old)
		return uint16(cur-ev-1) < uint16(cur-old)
	}
	return q.used.LoadUint16Acquire(0)&1 == 0
}

// GetUsed reclaims the next used chain: its head and the length the device
// reported written. ok=false when the device has returned nothing new (or
// has misbehaved; see Err). While interrupts are enabled with EVENT_IDX it
// moves used_event along, asking for an interrupt at the next completion.
func (q *DriverQueue) GetUsed() (head uint16, written uint32, ok bool) {
	if q.err != nil {
		return 0, 0, false
	}
	usedIdx := q.used.LoadUint16Acquire(2)
	if usedIdx == q.lastUsed {
		return 0, 0, false
	}
	outstanding := q.size - uint16(len(q.free))
	if uint16(usedIdx-q.lastUsed) > outstanding {
		q.err = fmt.Errorf("virtio: driver queue: used->idx %d is %d past %d with %d outstanding", usedIdx, usedIdx-q.lastUsed, q.lastUsed, outstanding)
		return 0, 0, false
	}
	off := 4 + 8*uint64(q.lastUsed&(q.size-1))
	id := q.used.Uint32(off)
	written = q.used.Uint32(off + 4)
	if id >= uint32(q.size) || q.chainLen[id] == 0 {
		q.err = fmt.Errorf("virtio: driver queue: used entry %d names head %d, which is not outstanding", q.lastUsed, id)
		return 0, 0, false
	}
	head = uint16(id)
	i := head
	for k := q.chainLen[head]; k > 0; k-- {
		q.free = append(q.free, i)
		i = q.link[i]
	}
	q.chainLen[head] = 0
	q.lastUsed++
	if q.eventIdx && q.interrupts {
		q.avail.StoreUint16Release(4+2*uint64(q.size), q.lastUsed)
	}
	return head, written, true
}

// DisableInterrupts asks the device not to send used-buffer notifications:
// VIRTQ_AVAIL_F_NO_INTERRUPT, or with EVENT_IDX a used_event the device
// will not reach before the driver catches up (one behind what it has
// consumed, i.e. a full 16-bit wrap away). Only a hint.
func (q *DriverQueue) DisableInterrupts() {
	q.interrupts = false
	if q.eventIdx {
		q.avail.StoreUint16Release(4+2*uint64(q.size), q.lastUsed-1)
	} else {
		q.avail.StoreUint16Release(0, 1)
	}
}

// EnableInterrupts asks for a notification at the next completion and
// reports whether completions are already waiting (the driver must then
// call GetUsed rather than sleep).
func (q *DriverQueue) EnableInterrupts() (pending bool) {
	q.interrupts = true
	if q.eventIdx {
		q.avail.StoreUint16Release(4+2*uint64(q.size), q.lastUsed)
	} else {
		q.avail.StoreUint16Release(0, 0)
	}
	return q.used.LoadUint16Acquire(2) != q.lastUsed
}
