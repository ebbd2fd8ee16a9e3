package engine

import (
	"fmt"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// cq is one completion queue. The engine goroutine (send completions,
// flushes) and responders on any goroutine (receive completions) write
// CQEs into it concurrently, so every write happens under mu.
type cq struct {
	e       *Engine // for its failure and the doorbell region
	cqn     uint32
	dbIndex uint32
	entries uint32
	addr    uint64

	// refs counts the QPs bound to the CQ (guarded by Engine.mu): a bound
	// CQ cannot be destroyed.
	refs int

	// ring and rec are (re)bound with Engine.gate held exclusively; the
	// data path reads them under gate shared.
	ring    guestmem.View
	ringOK  bool // ring translated against the current memory table
	rec     guestmem.View
	recOK   bool // doorbell record bound (engine running, index in layout)
	started bool // record zeroed once; later Starts keep its counters

	mu     sync.Mutex
	prod   uint32 // CQEs written; the authoritative copy of the record's prod
	armAck uint32 // last arm sequence number that produced an event
	broken bool   // overflowed or lost its ring: completions are dropped
	// ringPins keep the ring's memory pinned while the CQ lives (mu).
	ringPins pvdma.Hold
}

// push writes one CQE of QP q into c (q's send or receive CQ). solicited
// says whether the completion asks for a solicited event (a SEND with the
// SOLICITED flag); an error completion always counts as solicited. On
// overflow the CQ goes into error and its QPs to ERR; the completion is
// lost, as on hardware. A CQ already in error loses the completion too,
// and q goes to ERR: no QP may go on working while its completions
// vanish.
func (e *Engine) push(q *qp, c *cq, cqe *abi.CQE, solicited bool) {
	notify, overflow, lost := c.put(cqe, solicited)
	if !lost {
		e.st.cqes.Add(1)
	}
	if cqe.Status != abi.WCSuccess {
		e.st.errorCQEs.Add(1)
	}
	if notify {
		e.event(abi.EventCQComp, c.cqn, 0)
	}
	if overflow {
		e.st.cqOverflows.Add(1)
		e.cqFailed(c, "overflow")
	}
	if lost {
		q.fail(abi.WCFatalErr)
	}
}

// put writes cqe into the ring and reports whether the driver asked to be
// notified of it, whether it overflowed the ring (and broke the CQ), and
// whether the CQE was lost (overflow, or a CQ already unusable). The
// unlock is deferred so that a fault on guest memory (recovered further
// up) cannot leave the CQ locked.
func (c *cq) put(cqe *abi.CQE, solicited bool) (notify, overflow, lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken || !c.ringOK || !c.recOK {
		return false, false, true
	}
	// A driver that reports more consumed than produced has a bogus cons:
	// prod-cons wraps to a huge number and counts as an overflow too.
	cons := c.rec.LoadUint32Acquire(abi.CQDoorbellOffCons)
	if c.prod-cons >= c.entries {
		c.broken = true
		return false, true, true
	}
	off := uint64(c.prod&(c.entries-1)) * abi.CQESize
	cqe.Put(c.ring.Bytes()[off : off+abi.CQESize])
	c.prod++
	// The CQE is complete before prod says so: the driver loads prod with
	// acquire and then reads the CQE.
	c.rec.StoreUint32Release(abi.CQDoorbellOffProd, c.prod)

	sn, flags := abi.SplitCQArmWord(c.rec.LoadUint32Acquire(abi.CQDoorbellOffArm))
	if sn != c.armAck && (flags&abi.CQArmNextComp != 0 ||
		flags&abi.CQArmSolicited != 0 && (solicited || cqe.Status != abi.WCSuccess)) {
		c.armAck = sn
		c.rec.StoreUint32Release(abi.CQDoorbellOffArmAck, sn)
		notify = true
	}
	return notify, false, false
}

// cqFailed reports a CQ that can no longer take completions (why: it
// overflowed, lost its ring or its doorbell record) and moves every QP
// bound to it to ERR: their completions would be lost, so the guest must
// learn that they are broken.
func (e *Engine) cqFailed(c *cq, why string) {
	e.log.Warn("CQ in error", "cqn", c.cqn, "reason", why)
	e.event(abi.EventCQErr, c.cqn, 0)
	for _, q := range e.objs.live() {
		if q.scq == c || q.rcq == c {
			q.fail(abi.WCFatalErr)
		}
	}
}

// isBroken reports whether c can no longer take completions.
func (c *cq) isBroken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

// createCQ implements CreateCQ. Caller holds nothing.
func (e *Engine) createCQ(s CQSpec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.CQN < 1 || uint64(s.CQN) > uint64(len(e.objs.cqs)) {
		return statusErr(abi.StatusInvalidArgument, "cqn %d outside 1..%d", s.CQN, len(e.objs.cqs))
	}
	if e.objs.cq(s.CQN) != nil {
		return statusErr(abi.StatusBusy, "cq %d exists", s.CQN)
	}
	if err := e.limits.CheckCQEntries(s.Entries); err != nil {
		return wrapStatus(err, "cq %d", s.CQN)
	}
	if err := e.checkDoorbell(s.Doorbell); err != nil {
		return err
	}
	ring, err := e.guest.checkRing("cq ring", s.RingAddr, s.Entries, abi.CQESize)
	if err != nil {
		return err
	}
	c := &cq{e: e, cqn: s.CQN, dbIndex: s.Doorbell, entries: s.Entries, addr: s.RingAddr, ring: ring, ringOK: true}
	if err := e.guest.pinRing(&c.ringPins, "cq ring", s.RingAddr, uint64(s.Entries)*abi.CQESize); err != nil {
		return err
	}
	if e.running {
		// The engine is running, but it only reaches this CQ through a QP
		// created later, after this CQ is published: no gate needed.
		if err := touchGuest(fmt.Sprintf("cq %d: doorbell record", s.CQN), func() { c.bindRecord() }); err != nil {
			e.memoryFaulted(err.Error())
			c.ringPins.Release()
			return err
		}
	}
	e.objs.putCQ(c)
	return nil
}

// bindRecord binds a CQ to its doorbell record in the running layout,
// zeroing the record the first time and otherwise rewriting the
// device-owned fields from the engine's copy (after a restart the region
// may be a fresh mapping of the same file, or the guest may have
// scribbled on it). Caller holds gate exclusively or owns an unpublished
// c.
func (c *cq) bindRecord() {
	e := c.e
	rec, ok := e.guest.record(c.dbIndex)
	c.rec, c.recOK = rec, ok
	if !ok {
		// A layout with fewer records than the last one: the CQ cannot
		// work, and its QPs must not go on without it.
		if !c.broken {
			c.broken = true
			e.cqFailed(c, "doorbell record outside the layout")
		}
		return
	}
	if !c.started {
		zeroRecord(rec)
		c.started = true
		return
	}
	rec.StoreUint32Release(abi.CQDoorbellOffProd, c.prod)
	rec.StoreUint32Release(abi.CQDoorbellOffArmAck, c.armAck)
}

// resizeCQ implements ResizeCQ: under gate (exclusive) it copies the
// unconsumed CQEs to the same indices of the new ring.
func (e *Engine) resizeCQ(cqn, entries uint32, ringAddr uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.objs.cq(cqn)
	if c == nil {
		return statusErr(abi.StatusNotFound, "cq %d", cqn)
	}
	if err := e.limits.CheckCQEntries(entries); err != nil {
		return wrapStatus(err, "cq %d", cqn)
	}
	if !e.running {
		// The unconsumed CQEs are in guest memory, which is only touched
		// while running.
		return statusErr(abi.StatusBadState, "cq %d: resize while the device is stopped", cqn)
	}
	ring, err := e.guest.checkRing("cq ring", ringAddr, entries, abi.CQESize)
	if err != nil {
		return err
	}
	var pins pvdma.Hold
	if err := e.guest.pinRing(&pins, "cq ring", ringAddr, uint64(entries)*abi.CQESize); err != nil {
		return err
	}
	defer func() { pins.Release() }() // the old ring's pins on success
	e.gate.Lock()
	defer e.gate.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.recOK || !c.ringOK {
		return statusErr(abi.StatusBadState, "cq %d has no usable ring or doorbell", cqn)
	}
	var used uint32
	err = touchGuest(fmt.Sprintf("cq %d: resize", cqn), func() {
		cons := c.rec.LoadUint32Acquire(abi.CQDoorbellOffCons)
		used = c.prod - cons
		if used > c.entries || used > entries {
			return
		}
		old := c.ring.Bytes()
		nw := ring.Bytes()
		for i := cons; i != c.prod; i++ {
			so := uint64(i&(c.entries-1)) * abi.CQESize
			do := uint64(i&(entries-1)) * abi.CQESize
			copy(nw[do:do+abi.CQESize], old[so:so+abi.CQESize])
		}
	})
	if err != nil {
		// The CQ keeps its old ring; the device is as broken as the
		// data path would find it.
		e.memoryFaulted(err.Error())
		return err
	}
	if used > c.entries || used > entries {
		return statusErr(abi.StatusInvalidArgument, "cq %d: %d unconsumed CQEs do not fit %d entries", cqn, used, entries)
	}
	c.ring, c.entries, c.addr = ring, entries, ringAddr
	c.ringPins, pins = pins, c.ringPins
	return nil
}

// destroyCQ implements DestroyCQ.
func (e *Engine) destroyCQ(cqn uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.objs.cq(cqn)
	if c == nil {
		return statusErr(abi.StatusNotFound, "cq %d", cqn)
	}
	if c.refs > 0 {
		return statusErr(abi.StatusBusy, "cq %d is bound to %d QPs", cqn, c.refs)
	}
	// No QP refers to c, so the data path cannot reach it; the gate only
	// orders the removal after passes that might still hold it.
	e.gate.Lock()
	e.objs.dropCQ(c)
	e.gate.Unlock()
	c.ringPins.Release()
	return nil
}
