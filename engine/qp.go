package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// qp is one RC queue pair. Its fields fall into groups by who may touch
// them; see each group.
type qp struct {
	e *Engine

	// Immutable after creation.
	qpn, pdn           uint32
	sigAll             bool
	scq, rcq           *cq
	dbIndex            uint32
	sqSize, rqSize     uint32
	maxSendSGE         uint32
	maxRecvSGE         uint32
	maxInline          uint32
	sqAddr, rqAddr     uint64
	sqStride, rqStride uint32
	scratch            *guestmem.Mapping // host memory for the WQE copy (and inline payload)
	wqeBuf             guestmem.View     // scratch, sqStride bytes
	srq                *srq              // where receives come from; nil: the RQ

	// Rings and doorbell record: rebound with Engine.gate exclusive, read
	// by the data path under gate shared.
	sq, rq  guestmem.View
	ringsOK bool
	rec     guestmem.View
	recOK   bool
	started bool // record zeroed once
	// ringPins hold the SQ's and RQ's memory while the QP lives (mu).
	ringPins pvdma.Hold

	state qpState // who may change it, and how: qpstate.go
	// attr is an immutable snapshot, replaced whole by ModifyQP, so the
	// data path reads a consistent set without a lock.
	attr      atomic.Pointer[abi.QPAttr]
	sqdNotify atomic.Bool // emit SQ_DRAINED once the SQ is drained in SQD

	sendState // the requester's (requester.go)
	recvState // the responders' (responder.go)

	// gen is bumped, with the gate held exclusively, when the QP is reset
	// or destroyed: its streamed requests check it (stream.go).
	gen uint64
	// closing is set while the control path resets or destroys the QP:
	// passes leave it alone, so that the requests Disconnect flushes do
	// not turn into error completions and events for a QP on its way out.
	closing atomic.Bool
	// conn is the connection last made with the fabric's Connector, if
	// connected (mu).
	conn      fabric.Connection
	connected bool
}

// sendState is a QP's requester state: the engine's thread only (and
// the control path with the gate held exclusively), except the atomics.
// The head WQE, copied and decoded, stays the head through its retries
// until retire; it is the one request in flight (requester.go).
type sendState struct {
	req       fabric.Request
	wqe       abi.SendWQE // decoded head WQE
	sqCons    uint32
	head      bool   // the WQE at sqCons is copied into wqeBuf (set with setHead)
	retries   uint8  // transport retries left for the head WQE
	rnrs      uint8  // RNR retries left (7: infinite)
	rnrNaks   uint32 // RNR NAKs the head WQE got so far (see rnrWait)
	busySince int64  // engine clock of the first of a run of OutcomeBusy; 0 = none
	waitUntil int64  // engine clock; 0 = not waiting
	views     []guestmem.View
	hold      pvdma.Hold    // pins of views while the request is in flight
	inflight  atomic.Bool   // posted, not yet completed (asynchronous fabrics)
	posting   atomic.Bool   // the engine goroutine is inside Fabric.Post (see Complete)
	busy      atomic.Bool   // head, published for QUERY_QP (sq_draining)
	outcome   atomic.Uint32 // fabric.Outcome+1 once completed, 0 before
}

// setHead records whether the WQE at sqCons has been taken, and publishes
// it for the control path.
func (s *sendState) setHead(h bool) {
	s.head = h
	s.busy.Store(h)
}

// onFabric reports whether a request is posted and not completed: the
// fabric may still be copying from or into its memory.
func (s *sendState) onFabric() bool { return s.inflight.Load() && s.outcome.Load() == 0 }

// recvState is a QP's responder state, guarded by rmu: responders for the
// QP may run on several goroutines, and the engine's thread flushes the
// RQ.
type recvState struct {
	rmu    sync.Mutex
	rqCons uint32
	rbuf   []byte // copy of the RQ's receive WQE being looked at
	// lastWQE: QP_LAST_WQE was sent for this stay in ERR (a QP on an SRQ).
	lastWQE bool
	// local is the incoming a local request to this QP is served with,
	// under rmu (see begin).
	local incoming
	// open lists the streamed requests begun on this QP and not yet
	// released (rmu, or the gate held exclusively), so that a reset or
	// destroy can drop their pins.
	open *incoming
	// responses counts the committed READs of peers whose response may
	// still be resent (stream.go, Finish).
	responses atomic.Int32
}

// Complete implements fabric.Completer. It may run on any goroutine,
// before or after Post returns; the engine goroutine picks the outcome up.
// It kicks the engine unless the engine is still inside Post for this
// request: the engine clears posting and then loads outcome, Complete
// stores outcome and then loads posting, so (the atomics being
// sequentially consistent) either the engine sees the outcome or
// Complete sees posting clear and kicks.
func (q *qp) Complete(_ *fabric.Request, o fabric.Outcome) {
	q.outcome.Store(uint32(o) + 1)
	if !q.posting.Load() {
		q.e.waker.kick()
	}
}

// srqn is the number of q's SRQ, 0 if it has its own RQ.
func (q *qp) srqn() uint32 {
	if q.srq == nil {
		return 0
	}
	return q.srq.srqn
}

// fail moves q to ERR because of a data-path error with work
// completion status st and tells the driver with the matching
// asynchronous event: the peer rejected a request (REQ_ERR), a remote
// access error (ACCESS_ERR), or anything else the device detected
// (QP_FATAL). A QP already in ERR (or RESET) is left alone. Lock-free: it
// may run on any goroutine.
func (q *qp) fail(st abi.WCStatus) {
	e := q.e
	if !q.state.fail() {
		return
	}
	t := abi.EventQPFatal
	switch st {
	case abi.WCRemInvReqErr:
		t = abi.EventQPReqErr
	case abi.WCRemAccessErr:
		t = abi.EventQPAccessErr
	}
	e.event(t, q.qpn, uint32(st))
	e.waker.kick() // the engine flushes the QP's queues
}

// createQP implements CreateQP.
func (e *Engine) createQP(s QPSpec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := &e.limits
	switch {
	case s.QPN < 2 || uint64(s.QPN)-2 >= uint64(len(e.objs.qps)):
		return statusErr(abi.StatusInvalidArgument, "qpn %d outside 2..%d", s.QPN, len(e.objs.qps)+1)
	case e.objs.qp(s.QPN) != nil:
		return statusErr(abi.StatusBusy, "qp %d exists", s.QPN)
	case s.Type == abi.QPTypeUD:
		return statusErr(abi.StatusNotSupported, "qp %d: UD QPs are not implemented", s.QPN)
	case s.Type != abi.QPTypeRC:
		return statusErr(abi.StatusInvalidArgument, "qp %d: type %v", s.QPN, s.Type)
	case s.PDN == 0:
		return statusErr(abi.StatusInvalidArgument, "qp %d: pd 0", s.QPN)
	}
	if err := l.CheckQPCaps(s.SQSize, s.RQSize, s.MaxSendSGE, s.MaxRecvSGE, s.MaxInlineData, s.SRQN != 0); err != nil {
		return wrapStatus(err, "qp %d", s.QPN)
	}
	var sr *srq
	if s.SRQN != 0 {
		switch sr = e.objs.srq(s.SRQN); {
		case sr == nil:
			return statusErr(abi.StatusNotFound, "qp %d: srq %d", s.QPN, s.SRQN)
		case sr.pdn != s.PDN:
			return statusErr(abi.StatusPermission, "qp %d in pd %d: srq %d is in pd %d", s.QPN, s.PDN, s.SRQN, sr.pdn)
		case s.RQAddr != 0:
			return statusErr(abi.StatusInvalidArgument, "qp %d on srq %d with an RQ at %#x", s.QPN, s.SRQN, s.RQAddr)
		}
	}
	scq, rcq := e.objs.cq(s.SendCQN), e.objs.cq(s.RecvCQN)
	if scq == nil || rcq == nil {
		return statusErr(abi.StatusNotFound, "qp %d: cq %d or %d", s.QPN, s.SendCQN, s.RecvCQN)
	}
	if scq.isBroken() || rcq.isBroken() {
		// Its completions would be lost from the start.
		return statusErr(abi.StatusBadState, "qp %d: cq %d or %d is in error", s.QPN, s.SendCQN, s.RecvCQN)
	}
	if err := e.checkDoorbell(s.Doorbell); err != nil {
		return err
	}
	sqStride := abi.SendWQEStride(s.MaxSendSGE, s.MaxInlineData)
	rqStride := abi.RecvWQEStride(s.MaxRecvSGE)
	sq, err := e.guest.checkRing("send queue", s.SQAddr, s.SQSize, sqStride)
	if err != nil {
		return err
	}
	var rq guestmem.View
	if sr == nil {
		if rq, err = e.guest.checkRing("receive queue", s.RQAddr, s.RQSize, rqStride); err != nil {
			return err
		}
	}
	// The WQE is copied into engine-owned host memory before it is
	// decoded; an anonymous mapping (not the Go heap) so that an inline
	// payload can travel as a guestmem.View like any other buffer.
	var ringPins pvdma.Hold
	if err := e.guest.pinRing(&ringPins, "send queue", s.SQAddr, uint64(s.SQSize)*uint64(sqStride)); err != nil {
		return err
	}
	if sr == nil {
		if err := e.guest.pinRing(&ringPins, "receive queue", s.RQAddr, uint64(s.RQSize)*uint64(rqStride)); err != nil {
			return err
		}
	}
	scratch, err := guestmem.MapAnonymous(uint64(sqStride))
	if err != nil {
		ringPins.Release()
		return statusErr(abi.StatusNoResources, "qp %d: %v", s.QPN, err)
	}
	q := &qp{
		e: e, qpn: s.QPN, pdn: s.PDN, sigAll: s.SigAll, scq: scq, rcq: rcq, dbIndex: s.Doorbell,
		sqSize: s.SQSize, rqSize: s.RQSize, maxSendSGE: s.MaxSendSGE, maxRecvSGE: s.MaxRecvSGE,
		maxInline: s.MaxInlineData, sqAddr: s.SQAddr, rqAddr: s.RQAddr, sqStride: sqStride, rqStride: rqStride,
		scratch: scratch, wqeBuf: scratch.View(), sq: sq, rq: rq, ringsOK: true, srq: sr, ringPins: ringPins,
	}
	q.views = make([]guestmem.View, 0, s.MaxSendSGE+4)
	q.rbuf = make([]byte, rqStride)
	q.attr.Store(&abi.QPAttr{})
	if e.running {
		if err := touchGuest(fmt.Sprintf("qp %d: doorbell record", s.QPN), func() { q.bindRecord() }); err != nil {
			e.memoryFaulted(err.Error())
			q.release()
			return err
		}
	}
	scq.refs++
	rcq.refs++
	if sr != nil {
		sr.refs++
	}
	e.objs.putQP(q)
	return nil
}

// bindRecord binds q to its doorbell record: zeroed the first time,
// afterwards the device-owned consumer indices are rewritten from the
// engine's copy. Caller holds gate exclusively or owns an unpublished q.
func (q *qp) bindRecord() {
	e := q.e
	rec, ok := e.guest.record(q.dbIndex)
	q.rec, q.recOK = rec, ok
	if !ok {
		q.fail(abi.WCFatalErr)
		return
	}
	if !q.started {
		zeroRecord(rec)
		q.started = true
		return
	}
	rec.StoreUint32Release(abi.QPDoorbellOffSQCons, q.sqCons)
	rec.StoreUint32Release(abi.QPDoorbellOffRQCons, q.rqCons)
}

// checkAttrValues checks the values of the attributes mask selects; the
// shape of the request is abi.CheckModify's job.
func (e *Engine) checkAttrValues(mask abi.QPAttrMask, a *abi.QPAttr) error {
	bad := func(format string, args ...any) error { return statusErr(abi.StatusInvalidArgument, format, args...) }
	if mask&abi.QPAttrPathMTU != 0 && !a.PathMTU.Valid() {
		return bad("path_mtu %d", a.PathMTU)
	}
	if mask&abi.QPAttrPort != 0 && a.Port != 1 {
		return bad("port %d (the device has port 1 only)", a.Port)
	}
	if mask&abi.QPAttrAccessFlags != 0 && a.AccessFlags&^abi.AccessAll != 0 {
		return bad("qp_access_flags %#x", uint32(a.AccessFlags))
	}
	if mask&abi.QPAttrRetryCnt != 0 && a.RetryCnt > 7 {
		return bad("retry_cnt %d", a.RetryCnt)
	}
	if mask&abi.QPAttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("rnr_retry %d", a.RNRRetry)
	}
	if mask&abi.QPAttrMaxQPRdAtomic != 0 && uint32(a.MaxRdAtomic) > e.limits.MaxQPRdAtom {
		return bad("max_rd_atomic %d, at most %d", a.MaxRdAtomic, e.limits.MaxQPRdAtom)
	}
	if mask&abi.QPAttrMaxDestRdAtomic != 0 && uint32(a.MaxDestRdAtomic) > e.limits.MaxQPRdAtom {
		return bad("max_dest_rd_atomic %d, at most %d", a.MaxDestRdAtomic, e.limits.MaxQPRdAtom)
	}
	if mask&abi.QPAttrDestQPN != 0 && a.DestQPN >= 1<<24 {
		return bad("dest_qp_num %#x is not 24 bits", a.DestQPN)
	}
	if mask&abi.QPAttrRQPSN != 0 && a.RQPSN >= 1<<24 {
		return bad("rq_psn %#x is not 24 bits", a.RQPSN)
	}
	if mask&abi.QPAttrSQPSN != 0 && a.SQPSN >= 1<<24 {
		return bad("sq_psn %#x is not 24 bits", a.SQPSN)
	}
	if mask&abi.QPAttrTimeout != 0 && a.Timeout > 31 {
		return bad("timeout %d", a.Timeout)
	}
	if mask&abi.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad("min_rnr_timer %d", a.MinRNRTimer)
	}
	if mask&abi.QPAttrAV != 0 {
		if a.AH.Port > 1 {
			return bad("ah port %d", a.AH.Port)
		}
		if uint32(a.AH.SGIDIndex) >= e.limits.MaxGID {
			return bad("ah sgid_index %d, at most %d", a.AH.SGIDIndex, e.limits.MaxGID-1)
		}
	}
	return nil
}

// applyAttrs copies the attributes mask selects from a into dst.
func applyAttrs(dst *abi.QPAttr, mask abi.QPAttrMask, a *abi.QPAttr) {
	set := func(bit abi.QPAttrMask, f func()) {
		if mask&bit != 0 {
			f()
		}
	}
	set(abi.QPAttrAccessFlags, func() { dst.AccessFlags = a.AccessFlags })
	set(abi.QPAttrPKeyIndex, func() { dst.PKeyIndex = a.PKeyIndex })
	set(abi.QPAttrPort, func() { dst.Port = a.Port })
	set(abi.QPAttrQKey, func() { dst.QKey = a.QKey })
	set(abi.QPAttrAV, func() { dst.AH = a.AH })
	set(abi.QPAttrPathMTU, func() { dst.PathMTU = a.PathMTU })
	set(abi.QPAttrTimeout, func() { dst.Timeout = a.Timeout })
	set(abi.QPAttrRetryCnt, func() { dst.RetryCnt = a.RetryCnt })
	set(abi.QPAttrRNRRetry, func() { dst.RNRRetry = a.RNRRetry })
	set(abi.QPAttrRQPSN, func() { dst.RQPSN = a.RQPSN })
	set(abi.QPAttrMaxQPRdAtomic, func() { dst.MaxRdAtomic = a.MaxRdAtomic })
	set(abi.QPAttrMinRNRTimer, func() { dst.MinRNRTimer = a.MinRNRTimer })
	set(abi.QPAttrSQPSN, func() { dst.SQPSN = a.SQPSN })
	set(abi.QPAttrMaxDestRdAtomic, func() { dst.MaxDestRdAtomic = a.MaxDestRdAtomic })
	set(abi.QPAttrDestQPN, func() { dst.DestQPN = a.DestQPN })
}

// modifyQP implements ModifyQP.
func (e *Engine) modifyQP(qpn uint32, mask abi.QPAttrMask, a *abi.QPAttr) error {
	if a == nil {
		return statusErr(abi.StatusInvalidArgument, "qp %d: no attributes", qpn)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.objs.qp(qpn)
	if q == nil {
		return statusErr(abi.StatusNotFound, "qp %d", qpn)
	}
	cur, next, err := q.state.check(mask, a)
	if err != nil {
		return wrapStatus(err, "qp %d", qpn)
	}
	if err := e.checkAttrValues(mask, a); err != nil {
		return err
	}
	if next == abi.QPStateReset {
		e.resetQP(q)
		return nil
	}
	if next != abi.QPStateErr && !q.ringsOK {
		return statusErr(abi.StatusBadAddress, "qp %d: its rings are no longer in guest memory", qpn)
	}
	// The new attributes are published before the new state, so that the
	// data path, once it sees the state, sees the attributes that go with
	// it (a responder seeing RTR finds the AV). If the state change then
	// loses to the data path, they are taken back: a failed MODIFY_QP
	// changes nothing.
	prev := q.attr.Load()
	na := *prev
	applyAttrs(&na, mask, a)
	na.State, na.CurState = 0, 0
	// A fabric with connections learns of the peer before the QP serves
	// it; if it refuses, nothing has changed yet.
	conn, connect, err := q.connection(cur, next, mask, &na)
	if err != nil {
		return err
	}
	if connect {
		if err := q.connect(conn); err != nil {
			return err
		}
	}
	q.attr.Store(&na)
	notify := next == abi.QPStateSQD && mask&abi.QPAttrEnSQDAsyncNotif != 0 && cur != abi.QPStateSQD
	if notify {
		q.sqdNotify.Store(true)
	}
	if e.beforeStateCAS != nil {
		e.beforeStateCAS(qpn)
	}
	if !q.state.move(cur, next) {
		// Only the data path changes the state behind mu's back, and only
		// to ERR; a move to ERR has then happened already.
		now := q.state.get()
		if next == abi.QPStateErr && now == abi.QPStateErr {
			e.waker.kick()
			return nil
		}
		q.attr.Store(prev)
		if notify {
			q.sqdNotify.Store(false)
		}
		if connect {
			q.unconnect(conn)
		}
		return statusErr(abi.StatusBadState, "qp %d: moved to %v meanwhile", qpn, now)
	}
	if connect {
		q.setConnection(conn)
	}
	e.waker.kick()
	return nil
}

// resetQP returns q to RESET: queues emptied without completions, every
// counter and its doorbell record back to 0 (the driver restarts its
// producer counters at 0 as well), attributes cleared. It takes the gate
// exclusively because it rewrites requester and responder state.
func (e *Engine) resetQP(q *qp) {
	e.disconnect([]*qp{q})
	e.lockQuiet(q)
	defer e.gate.Unlock()
	q.rmu.Lock()
	q.state.reset()
	q.attr.Store(&abi.QPAttr{})
	q.sqCons, q.rqCons, q.waitUntil = 0, 0, 0
	q.lastWQE = false
	q.setHead(false)
	q.sqdNotify.Store(false)
	// An outcome no pass picked up yet (an asynchronous fabric completed
	// the head after the QP stopped being served) belongs to a WQE that
	// no longer exists: drop it with its pins, or the QP would retire it
	// once it is back in RTS.
	q.inflight.Store(false)
	q.outcome.Store(0)
	q.hold.Release()
	q.gen++ // its streamed requests are void
	q.dropIncomings()
	q.rmu.Unlock()
	q.closing.Store(false)
	q.started = false // zeroed when next bound, unless zeroed right here
	if e.running && q.recOK && !e.broken.Load() {
		err := touchGuest(fmt.Sprintf("qp %d: reset doorbell record", q.qpn), func() { zeroRecord(q.rec) })
		if err != nil {
			// The QP is in RESET all the same; the device is as broken
			// as the data path would find it.
			e.memoryFaulted(err.Error())
			return
		}
		q.started = true
	}
}

// waitIdle waits until q has no request in flight on an asynchronous
// fabric (the fabric still holds views of its memory then). The local
// fabric completes before Post returns, so this never waits for it.
func (q *qp) waitIdle(deadline time.Time) bool {
	e := q.e
	for q.onFabric() {
		if time.Now().After(deadline) {
			return false
		}
		e.waker.kick()
		sleepBriefly()
	}
	return true
}

// queryQP implements QueryQP.
func (e *Engine) queryQP(qpn uint32) (abi.QueryQPResp, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.objs.qp(qpn)
	if q == nil {
		return abi.QueryQPResp{}, statusErr(abi.StatusNotFound, "qp %d", qpn)
	}
	a := *q.attr.Load()
	a.State = q.state.get()
	a.CurState = a.State
	if a.State == abi.QPStateSQD && q.busy.Load() {
		// The head WQE started before SQD and is not finished: on the
		// fabric, or waiting for an RNR or transport retry.
		a.SQDraining = 1
	}
	var sigAll uint8
	if q.sigAll {
		sigAll = 1
	}
	return abi.QueryQPResp{Attr: a, Cap: abi.QPCap{
		PDN: q.pdn, SendCQN: q.scq.cqn, RecvCQN: q.rcq.cqn, SQSize: q.sqSize, RQSize: q.rqSize,
		MaxSendSGE: q.maxSendSGE, MaxRecvSGE: q.maxRecvSGE, MaxInlineData: q.maxInline,
		Type: abi.QPTypeRC, SigAll: sigAll, SRQN: q.srqn(),
	}}, nil
}

// destroyQP implements DestroyQP.
func (e *Engine) destroyQP(qpn uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.objs.qp(qpn)
	if q == nil {
		return statusErr(abi.StatusNotFound, "qp %d", qpn)
	}
	e.disconnect([]*qp{q})
	e.lockQuiet(q)
	e.objs.dropQP(q)
	q.gen++
	q.dropIncomings()
	e.gate.Unlock()
	// Past the gate no pass and no responder holds q any more.
	q.scq.refs--
	q.rcq.refs--
	if q.srq != nil {
		q.srq.refs--
	}
	q.release()
	return nil
}

// release frees what a destroyed QP still holds: the pins of a request
// whose outcome the engine had not processed yet, and its scratch page.
// Called past the gate, with nothing else using q.
func (q *qp) release() {
	e := q.e
	q.hold.Release()
	q.ringPins.Release()
	if err := q.scratch.Unmap(); err != nil {
		e.log.Warn("unmap qp scratch", "qpn", q.qpn, "err", err)
	}
}

// listQPs implements QPs.
func (e *Engine) listQPs() []QPInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []QPInfo
	for _, q := range e.objs.live() {
		a := q.attr.Load()
		out = append(out, QPInfo{
			QPN: q.qpn, PDN: q.pdn, SendCQN: q.scq.cqn, RecvCQN: q.rcq.cqn,
			SQSize: q.sqSize, RQSize: q.rqSize, State: q.state.get(),
			DestQPN: a.DestQPN, DestGID: a.AH.DGID, PathMTU: a.PathMTU,
		})
	}
	return out
}
