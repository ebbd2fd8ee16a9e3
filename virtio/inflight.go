package virtio

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vstellar/vstellar/guestmem"
)

// Inflight I/O tracking (vhost-user protocol feature INFLIGHT_SHMFD,
// QEMU docs/interop/vhost-user.rst "Inflight I/O tracking", split queues).
// The back-end keeps, in a memfd the front-end holds on to across back-end
// crashes, which heads it has popped and not yet pushed, so a restarted
// back-end can resubmit them even when it completed requests out of order.
//
// One queue's region:
//
//	struct QueueRegionSplit {          // offset
//	    u64 features;                  //  0
//	    u16 version;                   //  8  1; 0 = uninitialised
//	    u16 desc_num;                  // 10  queue size
//	    u16 last_batch_head;           // 12  head of the last pushed batch's list
//	    u16 used_idx;                  // 14  used->idx after the last completed push
//	    struct DescStateSplit {        // 16 + 16*i
//	        u8  inflight;              //  +0
//	        u8  padding[5];
//	        u16 next;                  //  +6 batch list link
//	        u64 counter;               //  +8 pop order
//	    } desc[desc_num];
//	};
//
// The fields are native-endian in the spec; vstellar only builds on
// little-endian hosts (guestmem), so little-endian accessors are exact.
const (
	inflOffFeatures      = 0
	inflOffVersion       = 8
	inflOffDescNum       = 10
	inflOffLastBatchHead = 12
	inflOffUsedIdx       = 14
	inflHeaderSize       = 16
	inflDescSize         = 16
	inflDescOffInflight  = 0
	inflDescOffNext      = 6
	inflDescOffCounter   = 8

	inflightVersion   = 1
	inflightAlignment = 64 // each queue region is cache-line aligned
)

// InflightQueueSize is the size of one queue's region in the inflight
// buffer, as libvhost-user computes it (vu_inflight_queue_size): the
// descriptor states plus a u16, rounded up to 64 bytes. For every queue
// size that is also >= the 16-byte header plus the states. The buffer for
// GET_INFLIGHT_FD is num_queues times this, queue i at offset i times this.
func InflightQueueSize(queueSize uint16) uint64 {
	n := inflDescSize*uint64(queueSize) + 2
	return (n + inflightAlignment - 1) &^ (inflightAlignment - 1)
}

type inflightLog struct {
	v             guestmem.View
	counter       uint64
	lastBatchHead uint16
	pending       []uint16 // heads to resubmit, in pop (counter) order
}

func inflDescOff(head uint16) uint64 { return inflHeaderSize + inflDescSize*uint64(head) }

// SetInflight attaches this queue's region of the inflight buffer (v must
// be at least InflightQueueSize bytes, 8-byte aligned) and starts tracking
// every Pop and Push in it. Call it after SetNextAvail and before the first
// Pop (vhost-user: at SET_VRING_KICK, as libvhost-user's
// vu_check_queue_inflights).
//
// A fresh region (version 0) is initialised. A region left by a previous
// back-end instance is recovered: if its used_idx lags used->idx, the last
// pushed batch completed but was not yet cleared, so its entries are
// cleared now; every head still marked in flight becomes pending
// resubmission (InflightPending, PopInflight), the pop counter continues
// after the largest one found, and NextAvail becomes used->idx plus the
// number pending (every chain the old instance popped is either used or
// pending).
//
// The region lives in memory the front-end (VMM) holds, and the recovery
// also reads used->idx from guest memory, so both are checked: an
// inconsistent region gives an error wrapping ErrBadInflight, is left as
// it was, and leaves the queue without inflight tracking.
func (q *DeviceQueue) SetInflight(v guestmem.View) error {
	need := inflHeaderSize + inflDescSize*uint64(q.size)
	if v.Len() < need || v.Len() < InflightQueueSize(q.size) {
		return fmt.Errorf("region of %d bytes, queue size %d needs %d: %w", v.Len(), q.size, InflightQueueSize(q.size), ErrBadInflight)
	}
	if !v.Aligned(0, 8) {
		return fmt.Errorf("region is not 8-byte aligned: %w", ErrBadInflight)
	}
	l := &inflightLog{v: v}
	version := v.Uint16(inflOffVersion)
	descNum := v.Uint16(inflOffDescNum)
	if descNum != 0 && descNum != q.size {
		return fmt.Errorf("region is for %d descriptors, queue size is %d: %w", descNum, q.size, ErrBadInflight)
	}
	switch version {
	case 0:
		// Fresh (GET_INFLIGHT_FD zeroed it). Start the used_idx mirror at
		// the ring's value so a crash before the first push recovers
		// nothing spurious.
		v.PutUint16(inflOffDescNum, q.size)
		v.PutUint16(inflOffLastBatchHead, 0)
		v.StoreUint16Release(inflOffUsedIdx, q.usedIdx)
		v.StoreUint16Release(inflOffVersion, inflightVersion)
		q.inflight = l
		return nil
	case inflightVersion:
	default:
		return fmt.Errorf("region version %d, want %d: %w", version, inflightVersion, ErrBadInflight)
	}

	// Repair the last batch: used->idx moved past used_idx, so the batch
	// starting at last_batch_head reached the driver before the crash.
	l.lastBatchHead = v.Uint16(inflOffLastBatchHead)
	logUsed := v.Uint16(inflOffUsedIdx)
	var clearHeads []uint16
	if logUsed != q.usedIdx {
		batch := q.usedIdx - logUsed
		if batch > q.size {
			return fmt.Errorf("used->idx %d is %d past the region's used_idx %d, queue size %d: %w",
				q.usedIdx, batch, logUsed, q.size, ErrBadInflight)
		}
		h := l.lastBatchHead
		for range batch {
			if h >= q.size {
				return fmt.Errorf("last batch list names head %d, queue size %d: %w", h, q.size, ErrBadInflight)
			}
			clearHeads = append(clearHeads, h)
			h = v.Uint16(inflDescOff(h) + inflDescOffNext)
		}
	}

	type rec struct {
		head    uint16
		counter uint64
	}
	var recs []rec
	for h := range q.size {
		off := inflDescOff(h)
		flag := v.Uint16(off+inflDescOffInflight) & 0xff
		if flag > 1 {
			return fmt.Errorf("descriptor state %d has inflight=%d: %w", h, flag, ErrBadInflight)
		}
		if flag == 1 && !slices.Contains(clearHeads, h) {
			recs = append(recs, rec{h, v.Uint64(off + inflDescOffCounter)})
		}
	}
	slices.SortStableFunc(recs, func(a, b rec) int { return cmp.Compare(a.counter, b.counter) })
	if len(recs) > 0 && recs[len(recs)-1].counter == ^uint64(0) {
		return fmt.Errorf("pop counter exhausted: %w", ErrBadInflight)
	}

	// All checks passed: commit.
	if descNum == 0 {
		v.PutUint16(inflOffDescNum, q.size)
	}
	for _, h := range clearHeads {
		v.StoreUint16Release(inflDescOff(h)+inflDescOffInflight, 0)
	}
	v.StoreUint16Release(inflOffUsedIdx, q.usedIdx)
	for _, r := range recs {
		l.pending = append(l.pending, r.head)
		q.busy[r.head] = true
	}
	if len(recs) > 0 {
		l.counter = recs[len(recs)-1].counter + 1
	}
	q.nextAvail = q.usedIdx + uint16(len(recs))
	q.inflight = l
	return nil
}

// InflightPending returns the heads a previous instance left in flight that
// have not been re-popped yet, in the order they were first popped.
// It fails (ErrBadInflight) when no region is attached.
func (q *DeviceQueue) InflightPending() ([]uint16, error) {
	if q.inflight == nil {
		return nil, fmt.Errorf("no inflight region attached: %w", ErrBadInflight)
	}
	return slices.Clone(q.inflight.pending), nil
}

// PopInflight re-walks and validates the chain of a pending head (see
// InflightPending) so the device can resubmit it out of order; Push
// completes it as usual. The head stays marked in flight with its original
// counter. Pop returns pending heads first anyway; PopInflight is for a
// device that wants to pick.
func (q *DeviceQueue) PopInflight(head uint16) (Chain, error) {
	var c Chain
	if q.inflight == nil {
		return c, fmt.Errorf("head %d: no inflight region attached: %w", head, ErrNotInflight)
	}
	i := slices.Index(q.inflight.pending, head)
	if i < 0 {
		return c, fmt.Errorf("head %d: %w", head, ErrNotInflight)
	}
	if err := q.walkChain(head, &c); err != nil {
		c.Reset()
		return c, fmt.Errorf("inflight head %d: %w", head, err)
	}
	q.inflight.pending = slices.Delete(q.inflight.pending, i, i+1)
	return c, nil
}

// inflightGet marks head in flight after a successful Pop: counter first,
// then the flag, so a crash in between leaves the head not in flight (it
// is still in the avail ring past used->idx, hence resubmitted anyway).
func (q *DeviceQueue) inflightGet(head uint16) {
	l := q.inflight
	if l == nil {
		return
	}
	off := inflDescOff(head)
	l.v.StoreUint64Release(off+inflDescOffCounter, l.counter)
	l.counter++
	l.v.StoreUint16Release(off+inflDescOffInflight, 1)
}

// inflightPrePut links the batch into the last-batch list before used->idx
// moves.
func (q *DeviceQueue) inflightPrePut(elems []UsedElem) {
	l := q.inflight
	if l == nil {
		return
	}
	for _, e := range elems {
		if e.Head >= q.size {
			continue
		}
		l.v.StoreUint16Release(inflDescOff(e.Head)+inflDescOffNext, l.lastBatchHead)
		l.lastBatchHead = e.Head
	}
	l.v.StoreUint16Release(inflOffLastBatchHead, l.lastBatchHead)
}

// inflightPostPut clears the batch and records the new used->idx, after
// used->idx moved.
func (q *DeviceQueue) inflightPostPut(elems []UsedElem) {
	l := q.inflight
	if l == nil {
		return
	}
	for _, e := range elems {
		if e.Head < q.size {
			l.v.StoreUint16Release(inflDescOff(e.Head)+inflDescOffInflight, 0)
		}
	}
	l.v.StoreUint16Release(inflOffUsedIdx, q.usedIdx)
}

// dropPending forgets pending resubmissions that the caller completed
// without re-popping them.
func (q *DeviceQueue) dropPending(elems []UsedElem) {
	if q.inflight == nil || len(q.inflight.pending) == 0 {
		return
	}
	for _, e := range elems {
		if i := slices.Index(q.inflight.pending, e.Head); i >= 0 {
			q.inflight.pending = slices.Delete(q.inflight.pending, i, i+1)
		}
	}
}
