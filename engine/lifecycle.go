package engine

import (
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// start implements Start.
func (e *Engine) start(mem *guestmem.Table, doorbells guestmem.View, layout abi.DoorbellLayout) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		return statusErr(abi.StatusBadState, "already started")
	}
	if mem == nil {
		return statusErr(abi.StatusBadAddress, "no guest memory")
	}
	if err := layout.Validate(); err != nil {
		return wrapStatus(err, "doorbell layout")
	}
	if doorbells.Len() < layout.Size() {
		return statusErr(abi.StatusBadAddress, "doorbell region of %d bytes, layout needs %d", doorbells.Len(), layout.Size())
	}
	if !doorbells.Aligned(0, 64) {
		// Records are accessed with 32- and 64-bit atomics.
		return statusErr(abi.StatusBadAddress, "doorbell region is not 64-byte aligned")
	}
	page, err := doorbells.Sub(0, uint64(layout.RecordsOffset))
	if err != nil {
		return statusErr(abi.StatusBadAddress, "device page: %v", err)
	}
	// Stopped: no pass runs and Stop left nothing in flight.
	e.gate.Lock()
	defer e.gate.Unlock()
	e.guest.db, e.guest.page, e.guest.layout = doorbells, page, layout
	e.broken.Store(false)
	e.rebindMemory(mem)
	// The doorbell region is guest memory in the fallback mode, and a
	// front-end may have truncated it: a fault fails Start instead of
	// killing the daemon.
	err = touchGuest("start: doorbell region", func() {
		e.objs.forEachCQ((*cq).bindRecord)
		e.objs.forEachSRQ((*srq).bindRecord)
		for _, q := range e.objs.live() {
			q.bindRecord()
		}
		// A busy engine needs no kick; the flag is set again before
		// sleeping.
		page.StoreUint32Release(abi.DevPageOffEngineFlags, 0)
	})
	if err != nil {
		e.log.Error("guest memory fault while starting", "err", err)
		e.unbindRegion()
		return err
	}
	e.running = true
	// The thread's first pass waits for the gate (its TryRLock fails
	// until we return).
	e.waker.thread.Store(e.cores.attach(e))
	return nil
}

// unbindRegion forgets the doorbell region and every record in it.
// Caller holds gate exclusively.
func (e *Engine) unbindRegion() {
	e.guest.gen++
	e.guest.db, e.guest.page = guestmem.View{}, guestmem.View{}
	e.objs.forEachCQ(func(c *cq) { c.rec, c.recOK = guestmem.View{}, false })
	e.objs.forEachSRQ(func(s *srq) { s.rec, s.recOK = guestmem.View{}, false })
	for _, q := range e.objs.live() {
		q.rec, q.recOK = guestmem.View{}, false
	}
}

// stop implements Stop.
func (e *Engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return
	}
	e.cores.detach(e, e.waker.thread.Swap(nil))
	e.waker.sleeping.Store(false) // it may have left it asleep
	// Exclusive gate with nothing in flight either way: every responder
	// still inside has left, and later ones see !running and answer
	// OutcomeRetry.
	e.lockSuspended()
	defer e.gate.Unlock()
	e.running = false
	e.unbindRegion()
}

// setMemory implements SetMemory.
func (e *Engine) setMemory(mem *guestmem.Table) error {
	if mem == nil {
		return statusErr(abi.StatusBadAddress, "no guest memory")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lockQuiet(nil)
	defer e.gate.Unlock()
	// Nothing here touches guest memory (rings are only translated), so
	// no fault guard is needed.
	e.broken.Store(false)
	e.rebindMemory(mem)
	e.waker.kick()
	return nil
}

// rebindMemory moves the rings and the MTT onto mem. A ring that is no
// longer inside guest RAM puts its CQ into error, or its QP into ERR.
// Caller holds mu and gate exclusively, so no view from the old table is
// in use and none survives.
func (e *Engine) rebindMemory(mem *guestmem.Table) {
	e.guest.gen++ // streamed requests hold views of the old table
	e.guest.mem = mem
	if e.cfg.MTT != nil {
		if n := e.cfg.MTT.Rebind(mem); n > 0 {
			e.log.Warn("memory regions lost their guest memory", "count", n)
		}
	}
	e.objs.forEachCQ(func(c *cq) {
		v, err := e.guest.translateRing("cq ring", c.addr, uint64(c.entries)*abi.CQESize)
		c.ring, c.ringOK = v, err == nil
		if err != nil && !c.broken {
			c.broken = true
			e.cqFailed(c, err.Error())
		}
		c.ringPins.Release()
		if err == nil {
			e.repinRing(&c.ringPins, "cq ring", c.addr, uint64(c.entries)*abi.CQESize)
		}
	})
	e.objs.forEachSRQ((*srq).rebind)
	for _, q := range e.objs.live() {
		sq, err1 := e.guest.translateRing("send queue", q.sqAddr, uint64(q.sqSize)*uint64(q.sqStride))
		var rq guestmem.View
		var err2 error
		if q.srq == nil {
			rq, err2 = e.guest.translateRing("receive queue", q.rqAddr, uint64(q.rqSize)*uint64(q.rqStride))
		}
		q.sq, q.rq, q.ringsOK = sq, rq, err1 == nil && err2 == nil
		q.ringPins.Release()
		if !q.ringsOK {
			e.log.Warn("qp rings left guest memory", "qpn", q.qpn)
			q.fail(abi.WCFatalErr)
			continue
		}
		e.repinRing(&q.ringPins, "send queue", q.sqAddr, uint64(q.sqSize)*uint64(q.sqStride))
		if q.srq == nil {
			e.repinRing(&q.ringPins, "receive queue", q.rqAddr, uint64(q.rqSize)*uint64(q.rqStride))
		}
	}
}

// repinRing pins a ring again where the memory now is. If the budget
// says no the ring stays usable, unpinned, and the engine says so.
func (e *Engine) repinRing(h *pvdma.Hold, what string, gpa, size uint64) {
	if err := e.guest.pinRing(h, what, gpa, size); err != nil {
		e.log.Warn("ring not pinned after a memory change", "ring", what, "err", err)
	}
}

// reset implements Reset.
func (e *Engine) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.objs.live()
	e.disconnect(old)
	e.lockQuiet(nil)
	e.guest.gen++
	for _, q := range old {
		q.gen++
		q.dropIncomings()
	}
	e.objs.forEachCQ(func(c *cq) { c.ringPins.Release() })
	e.objs.forEachSRQ(func(s *srq) { s.ringPins.Release() })
	e.objs.clear()
	e.broken.Store(false)
	e.gate.Unlock()
	for _, q := range old {
		q.release()
	}
}

// lockQuiet takes the gate exclusively with no request in flight on the
// fabric (which may still be copying from or into the requester's memory)
// for QP only, or for any QP if only is nil. Waiting first and locking
// second is not enough with an asynchronous fabric: a pass could post a
// new request in between. So it checks again with the gate held, where no
// pass runs and so nothing new is posted, and if something slipped in,
// lets go and waits again. Caller holds mu.
//
// It waits at most QuiesceTimeout: a QP still busy then is abandoned
// (abandon), so a dead peer or a receiver that never posts cannot hang
// the control path.
func (e *Engine) lockQuiet(only *qp) {
	deadline := time.Now().Add(e.quiesce)
	for {
		e.gate.Lock()
		busy := e.busyQP(only)
		if busy == nil {
			if e.quiet != nil {
				e.quiet()
			}
			return
		}
		e.gate.Unlock()
		if !busy.waitIdle(deadline) {
			e.abandon(busy)
		}
	}
}

// lockSuspended is lockQuiet for Stop, which must also let the requests
// peers have begun on our QPs end: a VMM stops a device to pause the VM,
// and a WRITE cut half placed would fail the peer's QP (REMOTE_OP) for a
// pause of ours. Meanwhile new requests are told to retry (begin). It
// waits at most QuiesceTimeout for them; one still open then is cut, as
// by a memory change. Caller holds mu.
func (e *Engine) lockSuspended() {
	e.suspending.Store(true)
	defer e.suspending.Store(false)
	deadline := time.Now().Add(e.quiesce)
	for {
		for e.openIncoming() && time.Now().Before(deadline) {
			sleepBriefly()
		}
		e.lockQuiet(nil)
		if !e.openIncoming() {
			return
		}
		if !time.Now().Before(deadline) {
			e.log.Warn("peer requests under way outlived the quiesce timeout: cut", "timeout", e.quiesce)
			return
		}
		// One began before it saw suspending.
		e.gate.Unlock()
	}
}

// openIncoming reports whether a peer's request is between Begin and its
// Release on any QP, or a READ's response may still be resent (between
// Commit and Finish): a resend after the pause would find the memory gone.
func (e *Engine) openIncoming() bool {
	for _, q := range e.objs.live() {
		q.rmu.Lock()
		open := q.open != nil
		q.rmu.Unlock()
		if open || q.responses.Load() > 0 {
			return true
		}
	}
	return false
}

// abandon gives up on q's request in flight: q goes to ERR (QP_FATAL) so
// no pass starts another, and ending its connection makes the fabric
// complete the request (flushed) before Disconnect returns. Caller holds
// mu, not the gate.
func (e *Engine) abandon(q *qp) {
	e.log.Warn("request in flight outlived the quiesce timeout: qp to error", "qpn", q.qpn, "timeout", e.quiesce)
	e.st.abandoned.Add(1)
	q.fail(abi.WCWRFlushErr)
	if e.connector != nil && q.connected {
		e.endConnections([]*qp{q})
	}
}

// busyQP returns only (or, if only is nil, any QP) if it has a request in
// flight (posted, not completed), else nil.
func (e *Engine) busyQP(only *qp) *qp {
	if only != nil {
		if only.onFabric() {
			return only
		}
		return nil
	}
	for _, q := range e.objs.live() {
		if q.onFabric() {
			return q
		}
	}
	return nil
}

// sleepBriefly is the back-off of control-path waits for asynchronous
// completions.
func sleepBriefly() { time.Sleep(50 * time.Microsecond) }
