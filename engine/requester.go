package engine

import (
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The requester runs on the engine goroutine with the gate held shared.
// One request per QP is in flight at a time (stop and wait): RC completes
// in order anyway, the local fabric answers before Post returns, and an
// RNR or retry then simply keeps the WQE at the head of the queue.

// serveSQ starts, retries or finishes up to sqBudget send WQEs of q, which
// is in RTS or SQD. It reports whether it made progress: a WQE fetched or
// completed, or a guest error handled. A retry that only ends in another
// RNR NAK or transport retry is no progress (see run).
func (q *qp) serveSQ() (work bool) {
	e := q.e
	for range sqBudget {
		st := q.state.get()
		if st != abi.QPStateRTS && st != abi.QPStateSQD {
			return work
		}
		if q.inflight.Load() {
			o := q.outcome.Load()
			if o == 0 {
				return work // an asynchronous fabric still has it
			}
			q.inflight.Store(false)
			q.finish(fabric.Outcome(o - 1))
			if q.waitUntil != 0 {
				return work
			}
			work = true
			continue
		}
		fresh := !q.head
		if fresh {
			if st == abi.QPStateSQD {
				// Drained: no new WQEs start in SQD.
				if q.sqdNotify.Swap(false) {
					e.event(abi.EventSQDrained, q.qpn, 0)
				}
				return work
			}
			prod := q.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd)
			if prod == q.sqCons {
				return work
			}
			if prod-q.sqCons > q.sqSize {
				q.badProducer("sq_prod", prod, q.sqCons)
				return true
			}
			if !q.fetchHead() {
				work = true
				continue
			}
		}
		q.post()
		if fresh || !q.head {
			work = true
		}
		if q.waitUntil != 0 || q.inflight.Load() {
			return work
		}
	}
	return work
}

// fetchHead copies the WQE at sq_cons out of guest memory and decodes the
// copy, so the guest cannot change it between check and use. A malformed
// WQE completes at once with LOC_QP_OP_ERR; fetchHead then returns false.
func (q *qp) fetchHead() bool {
	e := q.e
	copyEntry(q.wqeBuf.Bytes(), q.sq, q.sqCons, q.sqSize, q.sqStride)
	e.st.wqes.Add(1)
	w, err := abi.DecodeSendWQE(q.wqeBuf.Bytes(), q.maxSendSGE, q.maxInline)
	q.wqe = w
	q.setHead(true)
	a := q.attr.Load()
	q.retries, q.rnrs, q.rnrNaks, q.busySince = a.RetryCnt, a.RNRRetry, 0, 0
	if err != nil {
		e.st.badWQEs.Add(1)
		e.log.Debug("bad send WQE", "qpn", q.qpn, "index", q.sqCons, "err", err)
		q.retire(abi.WCLocQPOpErr, 0)
		return false
	}
	return true
}

// post builds the head WQE's request and hands it to the fabric. The
// views are translated again on every attempt: between an RNR and its
// retry the guest may have deregistered the MR or the memory moved.
func (q *qp) post() {
	e := q.e
	if st := q.buildRequest(); st != abi.WCSuccess {
		q.hold.Release()
		q.retire(st, 0)
		return
	}
	q.outcome.Store(0)
	q.inflight.Store(true)
	// A completion while Post runs is picked up right below; posting
	// tells Complete not to kick the engine for it, which would wake a
	// sleeping engine for nothing after every retry it makes (see
	// Complete for why no completion is missed).
	q.posting.Store(true)
	if e.cfg.Fabric == nil {
		q.Complete(&q.req, fabric.OutcomeUnreachable) // a device without a fabric reaches no one
	} else {
		e.cfg.Fabric.Post(&q.req, q)
	}
	q.posting.Store(false)
	if o := q.outcome.Load(); o != 0 {
		q.inflight.Store(false)
		q.finish(fabric.Outcome(o - 1))
	}
}

// fabricOp maps a send opcode to its fabric operation. An opcode the
// ABI defines but the engine does not carry (the ABI may grow before the
// engine does) is not one: the WQE completes with LOC_QP_OP_ERR rather
// than taking the daemon down.
func fabricOp(op abi.WROpcode) (fabric.Op, bool) {
	switch op {
	case abi.WRRDMAWrite:
		return fabric.OpWrite, true
	case abi.WRRDMAWriteWithImm:
		return fabric.OpWriteImm, true
	case abi.WRSend:
		return fabric.OpSend, true
	case abi.WRSendWithImm:
		return fabric.OpSendImm, true
	case abi.WRRDMARead:
		return fabric.OpRead, true
	case abi.WRAtomicCmpSwap:
		return fabric.OpCmpSwap, true
	case abi.WRAtomicFetchAdd:
		return fabric.OpFetchAdd, true
	}
	return 0, false
}

// buildRequest fills q.req for the decoded head WQE, reusing its view
// slice (no allocation in steady state).
func (q *qp) buildRequest() abi.WCStatus {
	e := q.e
	w := &q.wqe
	a := q.attr.Load()
	r := &q.req
	op, ok := fabricOp(w.Opcode)
	if !ok {
		return abi.WCLocQPOpErr
	}
	src, ok := e.sourceGID(a.AH.SGIDIndex)
	if !ok {
		// The guest deleted the GID its QP sends from.
		return abi.WCLocQPOpErr
	}
	*r = fabric.Request{
		Op:         op,
		Src:        fabric.Addr{GID: src, QPN: q.qpn},
		Dst:        fabric.Addr{GID: a.AH.DGID, QPN: a.DestQPN},
		RemoteAddr: w.RemoteAddr,
		RKey:       w.RKey,
		Imm:        w.Imm,
		Solicited:  w.Flags&abi.SendSolicited != 0,
		Token:      uint64(q.sqCons),
		Local:      q.views[:0],
	}
	switch w.Opcode {
	case abi.WRAtomicCmpSwap:
		r.Compare, r.SwapAdd = w.CompareAdd, w.Swap
	case abi.WRAtomicFetchAdd:
		r.SwapAdd = w.CompareAdd
	}
	if w.Flags&abi.SendInline != 0 {
		// DecodeSendWQE checked that the payload fits the slot.
		if w.InlineLen > 0 {
			v, err := q.wqeBuf.Sub(abi.SendWQEHeaderSize, uint64(w.InlineLen))
			if err != nil {
				return abi.WCLocQPOpErr
			}
			r.Local = append(r.Local, v)
		}
		r.Len = uint64(w.InlineLen)
	} else {
		var need abi.Access
		if w.Opcode == abi.WRRDMARead || w.Opcode.IsAtomic() {
			need = abi.AccessLocalWrite // the local buffer is written
		}
		payload := q.wqeBuf.Bytes()[abi.SendWQEHeaderSize:]
		views, n, st := gatherSGEs(e.cfg.MTT, &q.hold, r.Local, payload, int(w.NumSGE), q.pdn, need)
		q.views = views[:0] // keep a grown array for the next WQE
		if st != abi.WCSuccess {
			return st
		}
		r.Local, r.Len = views, n
	}
	if w.Opcode.IsAtomic() && r.Len != 8 {
		return abi.WCLocLenErr
	}
	if r.Len > maxMessage {
		return abi.WCLocLenErr
	}
	return abi.WCSuccess
}

// finish acts on the outcome of the head WQE's request.
func (q *qp) finish(o fabric.Outcome) {
	e := q.e
	// The request's buffers are done with: a retry translates (and pins)
	// them again.
	q.hold.Release()
	a := q.attr.Load()
	if o != fabric.OutcomeBusy {
		q.busySince = 0 // a run of busy answers is over
	}
	switch o {
	case fabric.OutcomeOK:
		switch q.req.Op {
		case fabric.OpRead, fabric.OpCmpSwap, fabric.OpFetchAdd:
			e.st.bytesReceived.Add(q.req.Len)
		default:
			e.st.bytesSent.Add(q.req.Len)
		}
		q.retire(abi.WCSuccess, uint32(q.req.Len))
	case fabric.OutcomeRNR:
		e.st.rnrNaks.Add(1)
		if q.rnrs == 0 {
			q.retire(abi.WCRNRRetryExcErr, 0)
			return
		}
		if q.rnrs != 7 { // 7: retry for ever
			q.rnrs--
		}
		timer := a.MinRNRTimer
		if q.req.HasRNRTimer {
			timer = q.req.RNRTimer
		}
		q.rnrNaks++
		q.waitUntil = e.now() + int64(rnrWait(timer, q.rnrNaks))
	case fabric.OutcomeBusy:
		now := e.now()
		if q.busySince == 0 {
			q.busySince = now
		}
		if now-q.busySince < int64(ackTimeout(a.Timeout)) {
			q.waitUntil = now + int64(busyRetryDelay)
			return
		}
		// Busy for a whole timeout: that is a retry like any other.
		q.busySince = 0
		fallthrough
	case fabric.OutcomeRetry, fabric.OutcomeUnreachable:
		e.st.retries.Add(1)
		if q.retries == 0 {
			q.retire(abi.WCRetryExcErr, 0)
			return
		}
		q.retries--
		q.waitUntil = e.now() + int64(ackTimeout(a.Timeout))
	case fabric.OutcomeRemoteAccess:
		q.retire(abi.WCRemAccessErr, 0)
	case fabric.OutcomeInvalidRequest:
		q.retire(abi.WCRemInvReqErr, 0)
	case fabric.OutcomeRemoteOp:
		q.retire(abi.WCRemOpErr, 0)
	// A fabric that retries on our behalf reports only the end: count it
	// as one retry (or RNR NAK), since at least one happened.
	case fabric.OutcomeRetryExceeded:
		e.st.retries.Add(1)
		q.retire(abi.WCRetryExcErr, 0)
	case fabric.OutcomeRNRExceeded:
		e.st.rnrNaks.Add(1)
		q.retire(abi.WCRNRRetryExcErr, 0)
	case fabric.OutcomeFlushed:
		q.retire(abi.WCWRFlushErr, 0)
	case fabric.OutcomeLocalError:
		// Our own memory behind the request went away mid-transfer.
		q.retire(abi.WCLocProtErr, 0)
	default:
		q.retire(abi.WCBadRespErr, 0)
	}
}

// retire completes the head WQE with status st: sq_cons moves past it,
// then a CQE if it failed or was signalled (or the QP signals all). In
// that order, so that a driver that reposts as soon as it polls the
// completion finds the slot free (the WQE was copied out long before). A
// failed WQE moves the QP to ERR, and the rest of the queue is flushed
// later.
func (q *qp) retire(st abi.WCStatus, byteLen uint32) {
	e := q.e
	w := &q.wqe
	signal := st != abi.WCSuccess || w.Flags&abi.SendSignaled != 0 || q.sigAll
	cqe := abi.CQE{WRID: w.WRID, Status: st, Opcode: abi.WCOpcodeFor(w.Opcode), ByteLen: byteLen, QPN: q.qpn}
	q.setHead(false)
	q.waitUntil = 0
	q.sqCons++
	q.rec.StoreUint32Release(abi.QPDoorbellOffSQCons, q.sqCons)
	if signal {
		e.push(q, q.scq, &cqe, false)
	}
	if st != abi.WCSuccess {
		q.fail(st)
	}
}

// badProducer handles a producer index more than a ring ahead of the
// consumer: a guest bug that breaks only this QP.
func (q *qp) badProducer(which string, prod, cons uint32) {
	e := q.e
	e.st.badWQEs.Add(1)
	e.log.Warn("producer index runs past the ring", "qpn", q.qpn, "index", which, "prod", prod, "cons", cons)
	q.fail(abi.WCLocQPOpErr)
}

// ackTimeout is the transport retry delay for the IB timeout exponent t:
// 4.096 us << t, at least 1 ms (a local fabric answers "retry" only while
// a device is stopping or changing memory, which takes that long), and
// 100 ms for t = 0 (infinite in IB, which would hang the QP).
func ackTimeout(t uint8) time.Duration {
	if t == 0 {
		return 100 * time.Millisecond
	}
	d := 4096 * time.Nanosecond << (t & 31)
	return max(d, time.Millisecond)
}

// busyRetryDelay is how soon a request the responder answered busy is
// tried again: a control change holds a device's data path for
// microseconds.
const busyRetryDelay = 20 * time.Microsecond

// rnrDelay is the RNR retry delay for the min_rnr_timer encoding t.
func rnrDelay(t uint8) time.Duration {
	return time.Duration(abi.RNRTimerMicros[t&31]) * time.Microsecond
}

const (
	// rnrExactTries RNR NAKs of one WQE are retried after exactly the
	// responder's timer: that covers every finite rnr_retry (at most 6
	// retries), so RNR_RETRY_EXC_ERR comes when IB says it does.
	rnrExactTries = 7
	// rnrSlowFloor is the least delay after that, which only rnr_retry 7
	// (for ever) reaches: a peer that has not posted a receive in seven
	// tries is not about to, and retrying every 10 us would keep a core
	// busy for it. The timer is a minimum in IB, so waiting longer is
	// within the rules.
	rnrSlowFloor = time.Millisecond
)

// rnrWait is how long the requester waits after the n-th RNR NAK (from
// 1) of its head WQE, whose responder sent timer encoding t.
func rnrWait(t uint8, n uint32) time.Duration {
	d := rnrDelay(t)
	if n > rnrExactTries {
		d = max(d, rnrSlowFloor)
	}
	return d
}

// sourceGID is the GID a QP whose address vector names sgid index sends
// from.
func (e *Engine) sourceGID(index uint8) (abi.GID, bool) {
	if e.cfg.SourceGID != nil {
		return e.cfg.SourceGID(index)
	}
	return e.cfg.GID, index == 0
}
