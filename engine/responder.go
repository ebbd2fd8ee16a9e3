package engine

import (
	"encoding/binary"
	"errors"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// respond executes a request from a peer QP against one of ours. It runs
// on the requester's goroutine (the local fabric calls it synchronously),
// so it must never block on anything another device holds: it only tries
// the gate (a pending control change, Stop or a memory change answers
// OutcomeRetry and the peer comes back later) and otherwise takes only
// this QP's responder lock and CQ locks, which are never held across a
// fabric call.
func (e *Engine) respond(req *fabric.Request) (out fabric.Outcome) {
	if !e.gate.TryRLock() {
		// A control change holds the gate for microseconds: ask the
		// peer to come back soon rather than spend one of its retries.
		return fabric.OutcomeBusy
	}
	defer e.gate.RUnlock()
	if !e.running || e.broken.Load() {
		return fabric.OutcomeRetry
	}
	q := e.lookupQP(req.Dst.QPN)
	if q == nil || !q.recOK || !q.ringsOK {
		return fabric.OutcomeUnreachable
	}
	switch q.getState() {
	case abi.QPStateRTR, abi.QPStateRTS, abi.QPStateSQD:
	default:
		// A QP in RESET, INIT or ERR drops requests; the requester times
		// out, as on a wire.
		return fabric.OutcomeUnreachable
	}
	a := q.attr.Load()
	if a.AH.DGID != req.Src.GID || a.DestQPN != req.Src.QPN {
		// An RC QP talks to exactly the peer it was connected to: nobody
		// else may write into it or consume its receives.
		return fabric.OutcomeUnreachable
	}
	if !localLenOK(req) {
		return fabric.OutcomeInvalidRequest
	}
	// Both guests' memory is touched here. A fault (a guest truncated its
	// memory file) fails this request only; if it was our memory, the
	// engine goroutine will fault on it too and stop this device.
	if err := guestmem.Guard(func() error { out = e.respondOn(q, a, req); return nil }); err != nil {
		e.log.Error("memory fault while responding", "qpn", q.qpn, "op", req.Op, "err", err)
		return fabric.OutcomeRemoteOp
	}
	return out
}

// respondOn carries out a checked request on q under its responder lock.
func (e *Engine) respondOn(q *qp, a *abi.QPAttr, req *fabric.Request) (out fabric.Outcome) {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	defer q.rspHold.Release() // the pins this request's DMA took
	defer q.giveBackHeld()    // a receive taken from the SRQ and not completed
	defer func() {
		if out == fabric.OutcomeRNR {
			// The RNR NAK carries the responder's timer, as in IB.
			req.RNRTimer, req.HasRNRTimer = a.MinRNRTimer, true
		}
	}()
	switch req.Op {
	case fabric.OpWrite:
		return e.respWrite(q, a, req, false)
	case fabric.OpWriteImm:
		return e.respWrite(q, a, req, true)
	case fabric.OpSend, fabric.OpSendImm:
		return e.respSend(q, req)
	case fabric.OpRead:
		return e.respRead(q, a, req)
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		return e.respAtomic(q, a, req)
	}
	return fabric.OutcomeInvalidRequest
}

// localLenOK checks that the requester's buffers hold exactly the message
// length the request claims, so a responder never trusts Len alone.
func localLenOK(req *fabric.Request) bool {
	switch req.Op {
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		return req.Len == 8 && guestmem.ViewsLen(req.Local) == 8
	}
	return req.Len <= maxMessage && guestmem.ViewsLen(req.Local) == req.Len
}

// translateRemote checks an rkey access and returns the views of our
// memory behind it (in q.tviews, reused), pinned until respond returns.
// A refused key, PD, access or range is a remote access error; memory
// that could not be pinned (the budget is held by DMA in flight) is the
// responder's operational error.
func (e *Engine) translateRemote(q *qp, req *fabric.Request, need abi.Access, n uint64) ([]guestmem.View, fabric.Outcome) {
	if e.cfg.MTT == nil {
		return nil, fabric.OutcomeRemoteAccess
	}
	vs, err := e.cfg.MTT.Translate(q.tviews[:0], &q.rspHold, emtt.Key(req.RKey), q.pdn, need, req.RemoteAddr, n)
	q.tviews = vs[:0]
	if err != nil {
		e.log.Debug("remote access refused", "qpn", q.qpn, "op", req.Op, "err", err)
		if errors.Is(err, emtt.ErrPin) {
			return nil, fabric.OutcomeRemoteOp
		}
		return nil, fabric.OutcomeRemoteAccess
	}
	return vs, fabric.OutcomeOK
}

// respWrite serves RDMA WRITE and WRITE_WITH_IMM. The immediate variant
// consumes a receive WQE (without using its buffers) and completes it
// with RECV_RDMA_WITH_IMM; with no receive posted it answers RNR before
// any data lands.
func (e *Engine) respWrite(q *qp, a *abi.QPAttr, req *fabric.Request, imm bool) fabric.Outcome {
	if a.AccessFlags&abi.AccessRemoteWrite == 0 {
		return fabric.OutcomeRemoteAccess
	}
	var rw abi.RecvWQE
	if imm {
		var o fabric.Outcome
		var ok bool
		if rw, o, ok = e.takeRecv(q); !ok {
			return o
		}
	}
	if req.Len > 0 { // a zero-length WRITE checks no key, as on hardware
		dst, o := e.translateRemote(q, req, abi.AccessRemoteWrite, req.Len)
		if o != fabric.OutcomeOK {
			return o
		}
		guestmem.CopyViews(dst, req.Local)
		e.st.bytesReceived.Add(req.Len)
	}
	if imm {
		e.completeRecv(q, &abi.CQE{WRID: rw.WRID, Opcode: abi.WCRecvRDMAWithImm, Flags: abi.WCWithImm,
			ByteLen: uint32(req.Len), Imm: req.Imm}, req.Src.QPN, req.Solicited)
	}
	return fabric.OutcomeOK
}

// respSend serves SEND and SEND_WITH_IMM: the next receive WQE's buffers
// take the message.
func (e *Engine) respSend(q *qp, req *fabric.Request) fabric.Outcome {
	rw, o, ok := e.takeRecv(q)
	if !ok {
		return o
	}
	sges := q.rbuf[abi.RecvWQEHeaderSize:]
	dst, total, st := gatherSGEs(e.cfg.MTT, &q.rspHold, q.rviews[:0], sges, int(rw.NumSGE), q.pdn, abi.AccessLocalWrite)
	q.rviews = dst[:0]
	if st != abi.WCSuccess {
		e.failRecv(q, rw.WRID, st, req)
		return fabric.OutcomeRemoteOp
	}
	if total < req.Len {
		e.failRecv(q, rw.WRID, abi.WCLocLenErr, req)
		return fabric.OutcomeInvalidRequest
	}
	guestmem.CopyViews(dst, req.Local)
	e.st.bytesReceived.Add(req.Len)
	cqe := abi.CQE{WRID: rw.WRID, Opcode: abi.WCRecv, ByteLen: uint32(req.Len)}
	if req.Op == fabric.OpSendImm {
		cqe.Flags, cqe.Imm = abi.WCWithImm, req.Imm
	}
	e.completeRecv(q, &cqe, req.Src.QPN, req.Solicited)
	return fabric.OutcomeOK
}

// takeRecv copies the next receive WQE into q.rbuf and decodes it,
// without consuming it (from an SRQ: taken, and given back unless it
// completes). No WQE: RNR. A malformed one completes with LOC_QP_OP_ERR
// and the QP goes to ERR. Caller holds rmu.
func (e *Engine) takeRecv(q *qp) (abi.RecvWQE, fabric.Outcome, bool) {
	if q.srq != nil {
		if o := e.takeFromSRQ(q, q.rbuf); o != fabric.OutcomeOK {
			return abi.RecvWQE{}, o, false
		}
		q.srqHeld = true
		rw, err := abi.DecodeRecvWQE(q.rbuf, q.srq.maxSGE)
		if err != nil {
			e.badRecvWQE(q, err)
			e.failRecv(q, rw.WRID, abi.WCLocQPOpErr, nil)
			return abi.RecvWQE{}, fabric.OutcomeRemoteOp, false
		}
		return rw, fabric.OutcomeOK, true
	}
	prod := q.rec.LoadUint32Acquire(abi.QPDoorbellOffRQProd)
	if prod == q.rqCons {
		return abi.RecvWQE{}, fabric.OutcomeRNR, false
	}
	if prod-q.rqCons > q.rqSize {
		e.badProducer(q, "rq_prod", prod, q.rqCons)
		return abi.RecvWQE{}, fabric.OutcomeRemoteOp, false
	}
	copyEntry(q.rbuf, q.rq, q.rqCons, q.rqSize, q.rqStride)
	rw, err := abi.DecodeRecvWQE(q.rbuf, q.maxRecvSGE)
	if err != nil {
		e.badRecvWQE(q, err)
		e.failRecv(q, rw.WRID, abi.WCLocQPOpErr, nil) // the decoder fills wr_id even so
		return abi.RecvWQE{}, fabric.OutcomeRemoteOp, false
	}
	return rw, fabric.OutcomeOK, true
}

// badRecvWQE counts and logs a malformed receive WQE. Caller holds rmu.
func (e *Engine) badRecvWQE(q *qp, err error) {
	e.st.badWQEs.Add(1)
	e.log.Debug("bad receive WQE", "qpn", q.qpn, "srqn", q.srqn(), "rq_cons", q.rqCons, "err", err)
}

// takeFromSRQ takes the next WQE of q's SRQ into dst. Empty: RNR. An SRQ
// in error fails q as a runaway rq_prod would, and the requester gets
// REM_OP_ERR.
func (e *Engine) takeFromSRQ(q *qp, dst []byte) fabric.Outcome {
	switch e.take(q.srq, dst) {
	case srqEmpty:
		return fabric.OutcomeRNR
	case srqBroken:
		e.st.badWQEs.Add(1)
		e.qpFailed(q, abi.WCLocQPOpErr)
		return fabric.OutcomeRemoteOp
	}
	return fabric.OutcomeOK
}

// giveBackHeld returns the WQE q took from its SRQ for the request being
// responded to, if that request completed nothing. Caller holds rmu.
func (q *qp) giveBackHeld() {
	if q.srqHeld {
		q.srq.giveBack(q.rbuf)
		q.srqHeld = false
	}
}

// completeRecv consumes the receive WQE being completed (consumeRecv)
// with a successful CQE for a request from srcQPN: rq_cons first, as
// retire does. Caller holds rmu.
func (e *Engine) completeRecv(q *qp, cqe *abi.CQE, srcQPN uint32, solicited bool) {
	cqe.QPN, cqe.SrcQP = q.qpn, srcQPN
	e.consumeRecv(q)
	e.push(q, q.rcq, cqe, solicited)
}

// consumeRecv retires the receive WQE being completed: the one at
// rq_cons, or the one taken from the SRQ (whose slot is free already).
// Caller holds rmu.
func (e *Engine) consumeRecv(q *qp) {
	if q.srq != nil {
		q.srqHeld = false
		return
	}
	q.rqCons++
	q.rec.StoreUint32Release(abi.QPDoorbellOffRQCons, q.rqCons)
}

// failRecv consumes the receive WQE being completed (consumeRecv) with an
// error CQE and moves the QP to ERR. Caller holds rmu.
func (e *Engine) failRecv(q *qp, wrid uint64, st abi.WCStatus, req *fabric.Request) {
	cqe := abi.CQE{WRID: wrid, Status: st, Opcode: abi.WCRecv, QPN: q.qpn}
	if req != nil {
		cqe.SrcQP = req.Src.QPN
	}
	e.consumeRecv(q)
	e.push(q, q.rcq, &cqe, true)
	e.qpFailed(q, st)
}

// respRead serves RDMA READ: our memory into the requester's buffers.
func (e *Engine) respRead(q *qp, a *abi.QPAttr, req *fabric.Request) fabric.Outcome {
	if a.AccessFlags&abi.AccessRemoteRead == 0 {
		return fabric.OutcomeRemoteAccess
	}
	if req.Len == 0 {
		return fabric.OutcomeOK
	}
	src, o := e.translateRemote(q, req, abi.AccessRemoteRead, req.Len)
	if o != fabric.OutcomeOK {
		return o
	}
	guestmem.CopyViews(req.Local, src)
	e.st.bytesSent.Add(req.Len)
	return fabric.OutcomeOK
}

// respAtomic serves CMP_SWAP and FETCH_ADD on an 8-byte aligned word of
// our memory, atomically with respect to the host's other CPUs (and so to
// other requesters), and returns the original value to the requester.
func (e *Engine) respAtomic(q *qp, a *abi.QPAttr, req *fabric.Request) fabric.Outcome {
	if a.AccessFlags&abi.AccessRemoteAtomic == 0 {
		return fabric.OutcomeRemoteAccess
	}
	if req.RemoteAddr%8 != 0 {
		return fabric.OutcomeInvalidRequest
	}
	vs, o := e.translateRemote(q, req, abi.AccessRemoteAtomic, 8)
	if o != fabric.OutcomeOK {
		return o
	}
	if len(vs) != 1 || !vs[0].Aligned(0, 8) {
		// The IOVA is aligned but the host address behind it is not (an
		// MR whose IOVA and guest address disagree modulo 8).
		return fabric.OutcomeInvalidRequest
	}
	var orig uint64
	if req.Op == fabric.OpCmpSwap {
		orig = vs[0].CompareAndSwapUint64(0, req.Compare, req.SwapAdd)
	} else {
		orig = vs[0].AddUint64(0, req.SwapAdd)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], orig)
	off := 0
	for _, v := range req.Local {
		off += v.CopyIn(0, b[off:])
	}
	return fabric.OutcomeOK
}
