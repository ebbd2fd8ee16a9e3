package guestdriver

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// WC is a work completion: one CQE as the device wrote it.
type WC abi.CQE

// WithImm reports whether Imm holds immediate data.
func (wc *WC) WithImm() bool { return wc.Flags&abi.WCWithImm != 0 }

// Err is nil for a successful completion and the status (an error)
// otherwise.
func (wc *WC) Err() error {
	if wc.Status == abi.WCSuccess {
		return nil
	}
	return wc.Status
}

// CQ is a completion queue: a ring of CQEs in guest memory that the
// device fills and the driver consumes with Poll. Poll, ReqNotify, Resize
// and Destroy serialise on the CQ; Wait may run concurrently with them.
type CQ struct {
	d      *Device
	cqn    uint32
	rec    guestmem.View // doorbell record
	notify chan struct{} // one pending CQ_COMP
	failed atomic.Bool   // CQ_ERR arrived

	mu        sync.Mutex
	ring      Buffer
	entries   uint32
	cons      uint32 // CQEs consumed (free-running)
	armSN     uint32
	broken    error // the device broke the ring protocol
	destroyed bool
}

// maxCQEntries bounds a CQ request before the device sees it, so the
// ring allocation cannot overflow; the device enforces its own max_cqe.
const maxCQEntries = 1 << 22

// pow2 rounds n up to a power of two (at least 1).
func pow2(n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}

// CreateCQ creates a CQ with room for at least entries completions
// (rounded up to a power of two) and allocates its ring in guest memory
// (CREATE_CQ).
func (d *Device) CreateCQ(ctx context.Context, entries int) (*CQ, error) {
	if entries <= 0 || entries > maxCQEntries {
		return nil, fmt.Errorf("guestdriver: CQ of %d entries: %w", entries, abi.ErrBadValue)
	}
	db, err := d.doorbells(ctx)
	if err != nil {
		return nil, err
	}
	n := pow2(uint32(entries))
	ring, err := d.mem.alloc(uint64(n)*abi.CQESize, abi.CQESize)
	if err != nil {
		return nil, err
	}
	var r abi.CreateCQResp
	if err := d.call(ctx, abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: ring.GPA, Entries: n}, &r); err != nil {
		d.mem.release(ring)
		return nil, err
	}
	rec, err := db.record(r.DoorbellIndex)
	if err != nil {
		d.call(ctx, abi.OpDestroyCQ, &abi.HandleReq{Handle: r.CQN}, nil)
		d.mem.release(ring)
		return nil, fmt.Errorf("guestdriver: CQ %d: %w", r.CQN, err)
	}
	cq := &CQ{d: d, cqn: r.CQN, rec: rec, notify: make(chan struct{}, 1), ring: ring, entries: n}
	// The device clears a new CQ's record; start from what it says so a
	// device that counts on from elsewhere is followed, not fought.
	cq.cons = rec.LoadUint32Acquire(abi.CQDoorbellOffProd)
	rec.StoreUint32Release(abi.CQDoorbellOffCons, cq.cons)
	cq.armSN, _ = abi.SplitCQArmWord(rec.LoadUint32Acquire(abi.CQDoorbellOffArm))
	d.mu.Lock()
	d.cqs[cq.cqn] = cq
	d.mu.Unlock()
	return cq, nil
}

// Num is the CQ number the device assigned.
func (cq *CQ) Num() uint32 { return cq.cqn }

// Entries is the ring size.
func (cq *CQ) Entries() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return int(cq.entries)
}

// Poll moves up to len(wcs) completions into wcs and returns how many. It
// reads the device's producer index (acquire: the CQEs before it are
// complete), copies the CQEs out, and stores the new consumer index so
// the device may reuse their slots. It does not allocate.
func (cq *CQ) Poll(wcs []WC) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed || cq.broken != nil || len(wcs) == 0 {
		return 0
	}
	prod := cq.rec.LoadUint32Acquire(abi.CQDoorbellOffProd)
	avail := prod - cq.cons
	if avail > cq.entries {
		// More than a ring's worth: the device overwrote CQEs we never
		// read, or the index is garbage. Nothing in the ring is
		// trustworthy any more.
		cq.broken = fmt.Errorf("guestdriver: CQ %d: producer %d is %d ahead of consumer %d in a %d-entry ring: %w",
			cq.cqn, prod, avail, cq.cons, cq.entries, ErrDevice)
		return 0
	}
	n := min(int(avail), len(wcs))
	ring, mask := cq.ring.Bytes(), cq.entries-1
	for i := range n {
		off := ((cq.cons + uint32(i)) & mask) * abi.CQESize
		wcs[i] = WC(abi.DecodeCQE(ring[off : off+abi.CQESize]))
	}
	if n > 0 {
		cq.cons += uint32(n)
		cq.rec.StoreUint32Release(abi.CQDoorbellOffCons, cq.cons)
	}
	return n
}

// ReqNotify arms the CQ for one notification: the next completion (or,
// with solicitedOnly, the next solicited or error completion) makes the
// device send a CQ_COMP event, which Wait returns on. As in IB verbs,
// completions already in the ring do not trigger it: arm, then Poll, then
// Wait.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		return fmt.Errorf("guestdriver: CQ %d: %w", cq.cqn, ErrDestroyed)
	}
	flags := abi.CQArmNextComp
	if solicitedOnly {
		flags = abi.CQArmSolicited
	}
	// A new sequence number is what arms; it must differ from the last
	// one the device acknowledged, so never wrap onto it.
	cq.armSN = (cq.armSN + 1) & (1<<30 - 1)
	if cq.armSN == 0 {
		cq.armSN = 1
	}
	cq.rec.StoreUint32Release(abi.CQDoorbellOffArm, abi.CQArmWord(cq.armSN, flags))
	return nil
}

// Wait blocks until the CQ's notification arrives (see ReqNotify), ctx
// ends, or the device is closed. A notification that arrived since the
// last Wait returns at once. It returns an error wrapping ErrCQError if
// the device reported the CQ in error (overflow).
func (cq *CQ) Wait(ctx context.Context) error {
	select {
	case <-cq.notify:
		if cq.failed.Load() {
			return fmt.Errorf("guestdriver: CQ %d: %w", cq.cqn, ErrCQError)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("guestdriver: waiting for CQ %d: %w", cq.cqn, ctx.Err())
	case <-cq.d.ev.done:
		return fmt.Errorf("guestdriver: waiting for CQ %d: %w", cq.cqn, cq.d.ev.err())
	}
}

// Err reports whether the CQ is unusable: the device reported it in error
// (ErrCQError) or broke the ring protocol (ErrDevice).
func (cq *CQ) Err() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return errors.Join(cq.broken, cq.failedErr())
}

func (cq *CQ) failedErr() error {
	if cq.failed.Load() {
		return fmt.Errorf("guestdriver: CQ %d: %w", cq.cqn, ErrCQError)
	}
	return nil
}

// event delivers a CQ_COMP or CQ_ERR (from the event pump).
func (cq *CQ) event(t abi.EventType) {
	if t == abi.EventCQErr {
		cq.failed.Store(true)
	}
	select {
	case cq.notify <- struct{}{}:
	default: // one pending notification is as good as several
	}
}

// Resize moves the CQ to a new ring of at least entries completions
// (RESIZE_CQ); unconsumed completions move with it. The old ring is freed.
func (cq *CQ) Resize(ctx context.Context, entries int) error {
	if entries <= 0 || entries > maxCQEntries {
		return fmt.Errorf("guestdriver: CQ of %d entries: %w", entries, abi.ErrBadValue)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		return fmt.Errorf("guestdriver: CQ %d: %w", cq.cqn, ErrDestroyed)
	}
	n := pow2(uint32(entries))
	ring, err := cq.d.mem.alloc(uint64(n)*abi.CQESize, abi.CQESize)
	if err != nil {
		return err
	}
	if err := cq.d.call(ctx, abi.OpResizeCQ, &abi.ResizeCQReq{CQN: cq.cqn, Entries: n, RingAddr: ring.GPA}, nil); err != nil {
		cq.d.mem.release(ring)
		return err
	}
	cq.d.mem.release(cq.ring)
	cq.ring, cq.entries = ring, n
	return nil
}

// Destroy destroys the CQ (DESTROY_CQ) and frees its ring. The device
// refuses while a QP uses it (abi.StatusBusy).
func (cq *CQ) Destroy(ctx context.Context) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		// Not sent: the number may name a newer CQ by now.
		return fmt.Errorf("guestdriver: CQ %d: %w", cq.cqn, ErrDestroyed)
	}
	if err := cq.d.call(ctx, abi.OpDestroyCQ, &abi.HandleReq{Handle: cq.cqn}, nil); err != nil {
		return err
	}
	cq.destroyed = true
	cq.d.mu.Lock()
	if cq.d.cqs[cq.cqn] == cq {
		delete(cq.d.cqs, cq.cqn)
	}
	cq.d.mu.Unlock()
	cq.d.mem.release(cq.ring)
	cq.ring = Buffer{}
	return nil
}
