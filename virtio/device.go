package virtio

import (
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
)

// DeviceQueue is the device's end of one split virtqueue in guest memory.
//
// It is not safe for concurrent use: one goroutine (the queue's worker)
// owns it at a time. Guest memory it points into is shared with the guest,
// which is why everything read from it is validated before use.
type DeviceQueue struct {
	mem      *guestmem.Table
	size     uint16
	addrs    RingAddrs
	eventIdx bool
	r        ringViews

	nextAvail uint16 // next avail->ring slot the device will consume (free-running)
	usedIdx   uint16 // value of used->idx the device has published

	// signalled is usedIdx at the last NeedsNotify call: the device owes
	// the driver a decision about the entries pushed since then.
	signalled uint16
	// notify is whether the device currently wants kicks (EnableNotify /
	// DisableNotify); with EVENT_IDX, Pop keeps avail_event current only
	// while it is set.
	notify bool

	// busy[head] is set while a chain with that head is popped and not yet
	// pushed. A driver that offers a head the device still owns breaks the
	// rules (and would make two requests share descriptors).
	busy []bool

	inflight *inflightLog

	scratch []rawDesc // reused by walkChain
}

// NewDeviceQueue validates the queue size (a power of two up to
// MaxQueueSize) and the ring addresses (alignment, each ring wholly inside
// one region of mem) and returns a queue ready to Pop.
//
// The device starts consuming at avail index 0 (SetNextAvail changes that,
// for vhost-user SET_VRING_BASE) and continues the used ring from the
// used->idx it finds in guest memory: after a back-end reconnect the ring is
// not empty, and the driver expects the next used entry where the previous
// back-end left off (rust-vmm's set_vring_addr, libvhost-user's
// vu_set_vring_addr_exec).
//
// With eventIdx (VIRTIO_F_EVENT_IDX negotiated) notification suppression
// uses used_event/avail_event; otherwise the ring flags.
//
// Notifications from the driver start enabled.
func NewDeviceQueue(mem *guestmem.Table, size uint16, addrs RingAddrs, eventIdx bool) (*DeviceQueue, error) {
	r, err := mapRings(mem, size, addrs)
	if err != nil {
		return nil, fmt.Errorf("virtio: device queue: %w", err)
	}
	q := &DeviceQueue{
		mem:      mem,
		size:     size,
		addrs:    addrs,
		eventIdx: eventIdx,
		r:        r,
		busy:     make([]bool, size),
		notify:   true,
	}
	q.usedIdx = r.used.LoadUint16Acquire(ringOffIdx)
	q.signalled = q.usedIdx
	return q, nil
}

// SetMemory re-translates the rings against a new memory table (memory
// hot-add or hot-remove). On error the queue keeps its old table and views.
// Chains popped earlier keep views into the old mappings: the caller must
// finish or drop them before unmapping anything the old table held.
func (q *DeviceQueue) SetMemory(mem *guestmem.Table) error {
	r, err := mapRings(mem, q.size, q.addrs)
	if err != nil {
		return fmt.Errorf("virtio: device queue: new memory table: %w", err)
	}
	q.mem, q.r = mem, r
	return nil
}

// Size is the queue size.
func (q *DeviceQueue) Size() uint16 { return q.size }

// Addrs returns the ring addresses the queue was created with.
func (q *DeviceQueue) Addrs() RingAddrs { return q.addrs }

// NextAvail is the free-running index of the next avail entry the device
// will consume (the value GET_VRING_BASE returns).
func (q *DeviceQueue) NextAvail() uint16 { return q.nextAvail }

// SetNextAvail sets the next avail entry to consume (SET_VRING_BASE). Call
// it before SetInflight, which may override it when it recovers in-flight
// requests.
func (q *DeviceQueue) SetNextAvail(idx uint16) { q.nextAvail = idx }

// UsedIdx is the used->idx the device has published.
func (q *DeviceQueue) UsedIdx() uint16 { return q.usedIdx }

// UsedElem is one completion for PushBatch.
type UsedElem struct {
	Head uint16
	Len  uint32 // bytes written into the chain's writable buffers
}

// Push returns the chain with the given head to the driver, reporting that
// written bytes were written into its writable buffers. It writes the used
// element, then publishes used->idx with release ordering, so the driver
// never sees the index before the element (and the data before either).
// Pushing a head that was not popped is a caller bug; the used entry is
// written anyway (the driver will treat it as a device error), and the
// inflight bookkeeping is skipped for heads outside the queue.
func (q *DeviceQueue) Push(head uint16, written uint32) {
	e := [1]UsedElem{{Head: head, Len: written}}
	q.PushBatch(e[:])
}

// PushBatch returns several chains with one used->idx update.
func (q *DeviceQueue) PushBatch(elems []UsedElem) {
	if len(elems) == 0 {
		return
	}
	// Inflight: link the batch (desc[i].next = last_batch_head,
	// last_batch_head = i) before the used ring moves, so a crash between
	// the two leaves enough to repair the batch.
	q.inflightPrePut(elems)
	idx := q.usedIdx
	mask := q.size - 1
	for _, e := range elems {
		off := usedRingOff(idx & mask)
		q.r.used.PutUint32(off, uint32(e.Head))
		q.r.used.PutUint32(off+4, e.Len)
		idx++
		if e.Head < q.size {
			q.busy[e.Head] = false
		}
	}
	q.dropPending(elems)
	q.usedIdx = idx
	q.r.used.StoreUint16Release(ringOffIdx, idx)
	q.inflightPostPut(elems)
}

// NeedsNotify reports whether the driver must be sent a used-buffer
// notification (the call eventfd) for the entries pushed since the previous
// call. Call it after a Push or a batch of them.
//
// With EVENT_IDX this is the spec's rule: notify iff used_event lies in
// [old, new), where old is used->idx at the previous call (Linux's
// vring_need_event). Without it the driver's VIRTQ_AVAIL_F_NO_INTERRUPT
// flag decides. Nothing pushed means no notification.
//
// The used->idx store in Push and the load of used_event / avail->flags
// here are both sequentially consistent atomics, which is the full barrier
// the spec needs so the decision cannot miss a driver that re-enabled
// interrupts concurrently.
//
// After a back-end reconnect the previous instance may have pushed entries
// it never signalled; the vhost layer should signal the call eventfd once
// when it is (re)installed, as libvhost-user does.
func (q *DeviceQueue) NeedsNotify() bool {
	old, cur := q.signalled, q.usedIdx
	if old == cur {
		return false
	}
	q.signalled = cur
	if q.eventIdx {
		ev := q.r.avail.LoadUint16Acquire(availUsedEventOff(q.size))
		return deviceNeedEvent(ev, cur, old)
	}
	return q.r.avail.LoadUint16Acquire(ringOffFlags)&AvailFNoInterrupt == 0
}

// deviceNeedEvent is vring_need_event: has the index moved from old to cur
// across event, i.e. is event in [old, cur) modulo 2^16? (Kept separate from
// the driver side's copy on purpose; see the package doc.)
func deviceNeedEvent(event, cur, old uint16) bool {
	return cur-event-1 < cur-old
}

// DisableNotify tells the driver that the device does not need kicks (it
// is polling or already busy). Without EVENT_IDX this sets
// VIRTQ_USED_F_NO_NOTIFY; with it the device simply stops advancing
// avail_event, so at most one more kick arrives. Either way it is only a
// hint: spurious kicks must be tolerated.
func (q *DeviceQueue) DisableNotify() {
	q.notify = false
	if !q.eventIdx {
		q.r.used.StoreUint16Release(ringOffFlags, UsedFNoNotify)
	}
}

// EnableNotify asks the driver to kick again and reports whether buffers
// became available in the meantime (avail->idx != NextAvail). A worker that
// sees true must keep popping instead of sleeping: the driver may have
// published them while kicks were off and will not kick for them.
//
// With EVENT_IDX it sets avail_event to NextAvail (kick when the entry the
// device wants next is published); otherwise it clears
// VIRTQ_USED_F_NO_NOTIFY. The store and the following load of avail->idx
// are sequentially consistent, the full barrier libvhost-user and Linux
// put here.
func (q *DeviceQueue) EnableNotify() (pending bool) {
	q.notify = true
	if q.eventIdx {
		q.r.used.StoreUint16Release(usedAvailEventOff(q.size), q.nextAvail)
	} else {
		q.r.used.StoreUint16Release(ringOffFlags, 0)
	}
	return q.r.avail.LoadUint16Acquire(ringOffIdx) != q.nextAvail
}

// Pending reports whether the driver has made chains available that the
// device has not popped yet (one acquire load).
func (q *DeviceQueue) Pending() bool {
	return q.r.avail.LoadUint16Acquire(ringOffIdx) != q.nextAvail
}
