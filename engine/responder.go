package engine

import (
	"encoding/binary"
	"errors"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// A peer's request takes one path, whichever fabric brings it. begin
// checks it (QP, state, peer, length, access, rkey, range; for SEND,
// SEND_IMM and WRITE_IMM the receive WQE it will consume, or RNR) and
// translates and pins its target into an incoming; the incoming's place
// puts the payload straight into guest memory, commit makes the request
// take effect (the receive consumed and its CQE written, an atomic
// performed) and release lets go (stream.go). The cross-host fabric
// drives these steps as packets come (fabric.StreamResponder); the
// in-process fabric hands over a whole request, and respond drives them
// in one call.

// respond implements Respond. It runs on the requester's goroutine (the
// local fabric calls it synchronously), so it must never block on
// anything another device holds: it only tries the gate (a control
// change answers OutcomeBusy and the peer comes back soon) and otherwise
// takes only this QP's responder lock and CQ locks, which are never held
// across a fabric call. The gate is held from begin to release, so no
// step finds its target gone.
func (e *Engine) respond(req *fabric.Request) (out fabric.Outcome) {
	if !e.gate.TryRLock() {
		return fabric.OutcomeBusy
	}
	defer e.gate.RUnlock()
	// Both guests' memory is touched here. A fault (a guest truncated its
	// memory file) fails this request only; if it was our memory, the
	// engine goroutine will fault on it too and stop this device.
	if err := guestmem.Guard(func() error { out = e.respondWhole(req); return nil }); err != nil {
		e.log.Error("memory fault while responding", "qpn", req.Dst.QPN, "op", req.Op, "err", err)
		return fabric.OutcomeRemoteOp
	}
	return out
}

// respondWhole takes a local request through the steps, inside respond's
// Guard: begin, the payload placed from the requester's memory in one
// copy, commit, and a READ's data or an atomic's original value copied
// back into the requester's memory.
func (e *Engine) respondWhole(req *fabric.Request) fabric.Outcome {
	in, out := e.begin(req, true)
	if out != fabric.OutcomeOK {
		return out
	}
	defer in.release(true) // also after a fault: pins, a WQE taken from an SRQ, rmu
	if !in.op.HasResponse() && !in.placeViews(req.Local) {
		return fabric.OutcomeRemoteOp
	}
	if out = in.commit(); out != fabric.OutcomeOK {
		return out
	}
	switch in.op {
	case fabric.OpRead:
		e.st.bytesSent.Add(guestmem.CopyViews(req.Local, in.views))
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], in.value)
		off := 0
		for _, v := range req.Local {
			off += v.CopyIn(0, b[off:])
		}
	}
	return fabric.OutcomeOK
}

// begin checks req and prepares its target: Begin for a streamed request,
// respond's first step for a local one, whose req.Local holds the payload
// (or takes the answer) and which ends before the gate is let go. Nothing
// of a refused request takes effect, except that a local request whose
// receive WQE cannot take it completes that WQE in error (peekRecv).
// Caller holds the gate shared and guards guest memory (the receive ring
// and the doorbell record).
func (e *Engine) begin(req *fabric.Request, local bool) (*incoming, fabric.Outcome) {
	// Stop waits for the streamed requests begun before it and turns new
	// ones away; a local one ends inside the gate Stop waits for.
	if !e.running || e.broken.Load() || (!local && e.suspending.Load()) {
		return nil, fabric.OutcomeRetry
	}
	q := e.objs.qp(req.Dst.QPN)
	if q == nil || !q.recOK || !q.ringsOK || !q.state.serving() {
		// A QP in RESET, INIT or ERR drops requests; the requester times
		// out, as on a wire.
		return nil, fabric.OutcomeUnreachable
	}
	a := q.attr.Load()
	if a.AH.DGID != req.Src.GID || a.DestQPN != req.Src.QPN {
		// An RC QP talks to exactly the peer it was connected to: nobody
		// else may write into it or consume its receives.
		return nil, fabric.OutcomeUnreachable
	}
	if !lenOK(req, local) {
		return nil, fabric.OutcomeInvalidRequest
	}
	var in *incoming
	if local {
		// A local request holds rmu from here to its release: local
		// requests to q take turns with q's own incoming, and finding,
		// filling and consuming a receive is one step under one lock.
		q.rmu.Lock()
		in = &q.local
	} else {
		in = e.free.get()
	}
	in.e, in.q, in.gen, in.qgen, in.released, in.local = e, q, e.guest.gen, q.gen, false, local
	in.op, in.len, in.srcQPN, in.imm, in.solicited = req.Op, req.Len, req.Src.QPN, req.Imm, req.Solicited
	in.compare, in.swapAdd = req.Compare, req.SwapAdd
	begun := false
	defer func() {
		if !begun { // refused, or guest memory faulted
			in.drop()
		}
	}()
	out := in.prepare(a, req)
	if out != fabric.OutcomeOK {
		if out == fabric.OutcomeRNR {
			// The RNR NAK carries the responder's timer, as in IB.
			req.RNRTimer, req.HasRNRTimer = a.MinRNRTimer, true
		}
		return nil, out
	}
	if !local {
		q.rmu.Lock()
		defer q.rmu.Unlock()
		if in.srqTaken && !q.state.serving() {
			// The QP went to ERR since the take, and its flush may have
			// passed (QP_LAST_WQE sent): nothing of the SRQ may complete
			// on it now, so the WQE goes back rather than into the open
			// list.
			return nil, fabric.OutcomeUnreachable
		}
		q.link(in)
	}
	// A local request is served and released before the gate is let go,
	// so no reset, destroy or Stop needs to find it on the open list, and
	// with rmu held no flush of q runs meanwhile.
	begun = true
	return in, fabric.OutcomeOK
}

// lenOK checks a request's length: 8 bytes for an atomic, at most
// maxMessage otherwise, and for a local request that the requester's
// buffers hold exactly that many, so a responder never trusts Len alone.
func lenOK(req *fabric.Request, local bool) bool {
	switch req.Op {
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		if req.Len != 8 {
			return false
		}
	default:
		if req.Len > maxMessage {
			return false
		}
	}
	return !local || guestmem.ViewsLen(req.Local) == req.Len
}

// prepare checks req's access and translates its target into in.
func (in *incoming) prepare(a *abi.QPAttr, req *fabric.Request) fabric.Outcome {
	switch req.Op {
	case fabric.OpWrite, fabric.OpWriteImm:
		if a.AccessFlags&abi.AccessRemoteWrite == 0 {
			return fabric.OutcomeRemoteAccess
		}
		if req.Op == fabric.OpWriteImm {
			// The receive is found (or RNR answered) before any byte lands.
			if o := in.beginRecv(req.RecvAhead, false); o != fabric.OutcomeOK {
				return o
			}
		}
		if req.Len == 0 {
			return fabric.OutcomeOK // no key is checked, as on hardware
		}
		return in.translate(req, abi.AccessRemoteWrite, req.Len)
	case fabric.OpSend, fabric.OpSendImm:
		return in.beginRecv(req.RecvAhead, true)
	case fabric.OpRead:
		if a.AccessFlags&abi.AccessRemoteRead == 0 {
			return fabric.OutcomeRemoteAccess
		}
		if req.Len == 0 {
			return fabric.OutcomeOK
		}
		return in.translate(req, abi.AccessRemoteRead, req.Len)
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		if a.AccessFlags&abi.AccessRemoteAtomic == 0 {
			return fabric.OutcomeRemoteAccess
		}
		if req.RemoteAddr%8 != 0 {
			return fabric.OutcomeInvalidRequest
		}
		if o := in.translate(req, abi.AccessRemoteAtomic, 8); o != fabric.OutcomeOK {
			return o
		}
		if len(in.views) != 1 || !in.views[0].Aligned(0, 8) {
			// The IOVA is aligned but the host address behind it is not (an
			// MR whose IOVA and guest address disagree modulo 8).
			return fabric.OutcomeInvalidRequest
		}
		return fabric.OutcomeOK
	}
	return fabric.OutcomeInvalidRequest
}

// translate checks an rkey access and translates req's range into
// in.views, pinned by in.hold until release. A refused key, PD, access or
// range is a remote access error; memory that could not be pinned (the
// budget is held by DMA in flight) is the responder's operational error.
func (in *incoming) translate(req *fabric.Request, need abi.Access, n uint64) fabric.Outcome {
	e, q := in.e, in.q
	if e.cfg.MTT == nil {
		return fabric.OutcomeRemoteAccess
	}
	vs, err := e.cfg.MTT.Translate(in.views[:0], &in.hold, emtt.Key(req.RKey), q.pdn, need, req.RemoteAddr, n)
	in.views = vs
	if err != nil {
		e.log.Debug("remote access refused", "qpn", q.qpn, "op", req.Op, "err", err)
		if errors.Is(err, emtt.ErrPin) {
			return fabric.OutcomeRemoteOp
		}
		return fabric.OutcomeRemoteAccess
	}
	return fabric.OutcomeOK
}

// beginRecv finds the receive WQE a request will consume: from q's RQ
// (peekRecv) or its SRQ (takeRecvSRQ). A local request's is the next one:
// local requests to a QP take turns under its rmu, none ahead of another.
func (in *incoming) beginRecv(ahead uint32, buffers bool) fabric.Outcome {
	q := in.q
	if q.srq != nil {
		return in.takeRecvSRQ(buffers)
	}
	if in.local {
		ahead = 0
	}
	return in.peekRecv(ahead, buffers)
}

// takeRecvSRQ takes the next WQE of q's SRQ for in (the SRQ serves its
// QPs in the order their requests begin, so an RQ's "ahead" has no
// meaning here) and, for a SEND (buffers), translates its SGEs into
// in.views. Empty: RNR. Unlike a WQE of an RQ, a taken WQE that is
// malformed, names bad buffers or is too small is not left for the next
// request (it would fail every QP on the SRQ in turn): it completes in
// error on q, which goes to ERR. An SRQ in error fails q as a runaway
// rq_prod would.
func (in *incoming) takeRecvSRQ(buffers bool) fabric.Outcome {
	e, q := in.e, in.q
	if cap(in.wqe) < int(q.srq.stride) {
		in.wqe = make([]byte, q.srq.stride)
	}
	in.wqe = in.wqe[:q.srq.stride]
	switch q.srq.take(in.wqe) {
	case srqEmpty:
		return fabric.OutcomeRNR
	case srqBroken:
		e.st.badWQEs.Add(1)
		q.fail(abi.WCLocQPOpErr)
		return fabric.OutcomeRemoteOp
	}
	rw, err := abi.DecodeRecvWQE(in.wqe, q.srq.maxSGE)
	in.wrid = rw.WRID // the decoder fills wr_id even when the WQE is bad
	if err != nil {
		q.badRecvWQE(0, err)
		in.failRecv(abi.WCLocQPOpErr)
		return fabric.OutcomeRemoteOp
	}
	in.srqTaken = true
	if !buffers {
		return fabric.OutcomeOK
	}
	return in.recvBuffers(in.wqe, rw.NumSGE, true)
}

// peekRecv finds the receive WQE ahead entries past rq_cons without
// consuming it, records it in in and, for a SEND (buffers), translates its
// SGEs into in.views. Not posted yet: RNR.
//
// A WQE that is malformed, names bad buffers or is too small ends the
// request, and so does an rq_prod more than a ring ahead. A local
// request's WQE is the next one, so it completes in error (a runaway
// rq_prod completes nothing) and the QP goes to ERR, as on an RNIC. A
// streamed request's may lie past WQEs that requests before it have yet
// to consume, so it is only refused and nothing changes: the requester
// learns from the NAK, and the engine's next local use of the RQ (a local
// request, a flush) finds the fault again.
func (in *incoming) peekRecv(ahead uint32, buffers bool) fabric.Outcome {
	e, q := in.e, in.q
	if !in.local { // a local request holds rmu already (begin)
		q.rmu.Lock()
		defer q.rmu.Unlock()
	}
	prod := q.rec.LoadUint32Acquire(abi.QPDoorbellOffRQProd)
	if avail := prod - q.rqCons; avail > q.rqSize {
		if in.local {
			q.badProducer("rq_prod", prod, q.rqCons)
		} else {
			e.log.Debug("rq_prod runs past the ring", "qpn", q.qpn, "cons", q.rqCons, "ahead", avail)
		}
		return fabric.OutcomeRemoteOp
	} else if ahead >= avail {
		return fabric.OutcomeRNR
	}
	idx := q.rqCons + ahead
	copyEntry(q.rbuf, q.rq, idx, q.rqSize, q.rqStride)
	rw, err := abi.DecodeRecvWQE(q.rbuf, q.maxRecvSGE)
	in.recvIdx, in.wrid = idx, rw.WRID
	if err != nil {
		q.badRecvWQE(idx, err)
		if in.local {
			in.failRecv(abi.WCLocQPOpErr)
		}
		return fabric.OutcomeRemoteOp
	}
	if !buffers {
		return fabric.OutcomeOK
	}
	return in.recvBuffers(q.rbuf, rw.NumSGE, in.local)
}

// recvBuffers translates the n SGEs of a receive WQE (wqe, a copy) into
// in.views, where a SEND's payload will go. Buffers that are not the
// QP's to write, or too small for the message, end the request; fail
// completes the WQE in error and moves the QP to ERR (see peekRecv and
// takeRecvSRQ for when). For an RQ the caller holds rmu.
func (in *incoming) recvBuffers(wqe []byte, n uint16, fail bool) fabric.Outcome {
	e := in.e
	q := in.q
	dst, total, st := gatherSGEs(e.cfg.MTT, &in.hold, in.views[:0], wqe[abi.RecvWQEHeaderSize:], int(n), q.pdn, abi.AccessLocalWrite)
	in.views = dst
	out := fabric.OutcomeOK
	switch {
	case st != abi.WCSuccess:
		out = fabric.OutcomeRemoteOp
	case total < in.len:
		st, out = abi.WCLocLenErr, fabric.OutcomeInvalidRequest
	}
	if out != fabric.OutcomeOK && fail {
		in.srqTaken = false
		in.failRecv(st)
	}
	return out
}

// badRecvWQE counts and logs a malformed receive WQE: the one at idx of
// q's RQ, or (idx 0) one taken from its SRQ.
func (q *qp) badRecvWQE(idx uint32, err error) {
	e := q.e
	e.st.badWQEs.Add(1)
	e.log.Debug("bad receive WQE", "qpn", q.qpn, "srqn", q.srqn(), "index", idx, "err", err)
}

// failRecv completes the receive WQE in found with error status st and
// moves the QP to ERR: from an RQ the WQE at rq_cons, which it consumes
// (caller holds rmu), from an SRQ the one in took.
func (in *incoming) failRecv(st abi.WCStatus) {
	e := in.e
	q := in.q
	if q.srq == nil {
		q.consumeRecv()
	}
	e.push(q, q.rcq, &abi.CQE{WRID: in.wrid, Status: st, Opcode: abi.WCRecv, QPN: q.qpn, SrcQP: in.srcQPN}, true)
	q.fail(st)
}

// consumeRecv retires the receive WQE at rq_cons (before its CQE is
// written, as retire does for the SQ). Caller holds rmu.
func (q *qp) consumeRecv() {
	q.rqCons++
	q.rec.StoreUint32Release(abi.QPDoorbellOffRQCons, q.rqCons)
}

// commitRecv consumes the receive WQE begin found, which must be at
// rq_cons by now (or taken from the SRQ and still this request's), with a
// successful CQE.
func (in *incoming) commitRecv() fabric.Outcome {
	e := in.e
	q := in.q
	if !in.local { // see peekRecv
		q.rmu.Lock()
		defer q.rmu.Unlock()
	}
	if q.srq != nil {
		if !q.state.serving() || !in.srqTaken {
			return fabric.OutcomeRemoteOp // flushed, or given back at Release
		}
		in.srqTaken = false
	} else {
		if !q.state.serving() || q.rqCons != in.recvIdx {
			// The QP failed (its receives are being flushed) or the fabric
			// committed out of order: the WQE is not ours to take.
			e.log.Debug("receive WQE no longer next", "qpn", q.qpn, "index", in.recvIdx, "rq_cons", q.rqCons)
			return fabric.OutcomeRemoteOp
		}
		q.consumeRecv()
	}
	e.push(q, q.rcq, in.recvCQE(), in.solicited)
	return fabric.OutcomeOK
}

// recvCQE is the successful receive completion of in.
func (in *incoming) recvCQE() *abi.CQE {
	cqe := &abi.CQE{WRID: in.wrid, Opcode: abi.WCRecv, ByteLen: uint32(in.len), QPN: in.q.qpn, SrcQP: in.srcQPN}
	switch in.op {
	case fabric.OpWriteImm:
		cqe.Opcode, cqe.Flags, cqe.Imm = abi.WCRecvRDMAWithImm, abi.WCWithImm, in.imm
	case fabric.OpSendImm:
		cqe.Flags, cqe.Imm = abi.WCWithImm, in.imm
	}
	return cqe
}
