package engine

import (
	"errors"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The streaming responder (fabric.StreamResponder): a request from another
// host arrives in packets, so it is taken in steps. Begin checks it and
// translates its target; Place copies each piece straight into guest
// memory; Commit makes it take effect (a receive CQE, an atomic); ReadAt
// serves a READ's response; Release drops the pins.
//
// Every step runs with the gate held shared by the caller (TryEnter or
// Enter; why: docs/architecture.md, "### engine"). Between steps the gate
// may be let go, so each step checks the generations Begin saw (memory,
// bumped whenever the views of guest memory may die; the QP's, bumped
// when it is reset or destroyed) and refuses when either moved.

// maxFreeIncomings bounds the engine's free list of Incomings: more than
// that many open at once (a deep transport window) allocate, and the
// surplus is left to the garbage collector when released.
const maxFreeIncomings = 256

// incoming is one streamed request between Begin and Release
// (fabric.Incoming). Its methods are called from the fabric's loop
// goroutine only, one at a time, so its own fields need no lock; the
// links into its QP's open list are guarded by the QP's rmu (or the gate
// held exclusively).
type incoming struct {
	e *Engine
	q *qp
	// gen and qgen are Engine.memGen and qp.gen at Begin.
	gen, qgen uint64

	op        fabric.Op
	len       uint64
	srcQPN    uint32
	imm       uint32
	solicited bool
	compare   uint64
	swapAdd   uint64
	// recvIdx and wrid name the receive WQE a SEND, SEND_IMM or
	// WRITE_IMM consumes at Commit.
	recvIdx uint32
	wrid    uint64
	// On a QP with an SRQ the WQE is taken at Begin: wqe is its copy and
	// srqTaken says this request still owns it (given back at Release
	// unless committed or flushed). srqTaken is guarded by the QP's rmu
	// once in is listed: a flush of the QP may take the WQE over.
	wqe      []byte
	srqTaken bool

	// views are the target (the MR range of WRITE*, READ and atomics, the
	// receive buffers of SEND*), pinned by hold until Release.
	views []guestmem.View
	hold  pvdma.Hold
	// cur caches where the last copy ended, so in-order pieces find
	// their view at once.
	cur guestmem.Cursor

	placed    uint64
	value     uint64
	dead      bool // a Place failed: nothing more may be placed or committed
	committed bool
	released  bool

	prev, next *incoming // in q.open, while listed
	listed     bool
}

var _ fabric.Incoming = (*incoming)(nil)

// getIncoming takes an Incoming from the free list (or makes one).
func (e *Engine) getIncoming() *incoming {
	e.inMu.Lock()
	n := len(e.inFree)
	if n > 0 {
		in := e.inFree[n-1]
		e.inFree[n-1] = nil
		e.inFree = e.inFree[:n-1]
		e.inMu.Unlock()
		return in
	}
	e.inMu.Unlock()
	return &incoming{views: make([]guestmem.View, 0, 4)}
}

// putIncoming clears in (keeping its grown slices) and returns it to the
// free list. in holds no pins and is not listed. It stays marked
// released, so that a stray call on it before it is reused (a caller's
// bug) is refused rather than touching anything.
func (e *Engine) putIncoming(in *incoming) {
	views := in.views[:0]
	clear(in.views) // no view of guest memory outlives the request
	hold, wqe := in.hold, in.wqe
	*in = incoming{e: e, views: views, hold: hold, wqe: wqe, released: true}
	e.inMu.Lock()
	if len(e.inFree) < maxFreeIncomings {
		e.inFree = append(e.inFree, in)
	}
	e.inMu.Unlock()
}

// begin implements fabric.StreamResponder.Begin: the checks of respond,
// without the payload (req.Local is nil; req.Len is the message length).
// Nothing of a refused request takes effect: a receive WQE that is
// malformed or too small is not consumed, the QP's state is left alone
// (the requester learns from the NAK; the responder's guest sees nothing,
// as when the local fabric refuses before the WQE is taken).
func (e *Engine) begin(req *fabric.Request) (_ fabric.Incoming, out fabric.Outcome) {
	if !e.running || e.broken.Load() || e.suspending.Load() {
		return nil, fabric.OutcomeRetry
	}
	q := e.lookupQP(req.Dst.QPN)
	if q == nil || !q.recOK || !q.ringsOK || !q.serving() {
		return nil, fabric.OutcomeUnreachable
	}
	a := q.attr.Load()
	if a.AH.DGID != req.Src.GID || a.DestQPN != req.Src.QPN {
		return nil, fabric.OutcomeUnreachable // see respond: one peer only
	}
	switch req.Op {
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		if req.Len != 8 {
			return nil, fabric.OutcomeInvalidRequest
		}
	default:
		if req.Len > maxMessage {
			return nil, fabric.OutcomeInvalidRequest
		}
	}
	in := e.getIncoming()
	in.e, in.q, in.gen, in.qgen, in.released = e, q, e.memGen, q.gen, false
	in.op, in.len, in.srcQPN, in.imm, in.solicited = req.Op, req.Len, req.Src.QPN, req.Imm, req.Solicited
	in.compare, in.swapAdd = req.Compare, req.SwapAdd
	// The receive ring and the doorbell record are guest memory.
	if err := guestmem.Guard(func() error { out = e.prepare(in, q, a, req); return nil }); err != nil {
		e.log.Error("memory fault while beginning a request", "qpn", q.qpn, "op", req.Op, "err", err)
		out = fabric.OutcomeRemoteOp
	}
	if out != fabric.OutcomeOK {
		if out == fabric.OutcomeRNR {
			req.RNRTimer, req.HasRNRTimer = a.MinRNRTimer, true
		}
		if in.srqTaken { // refused after the take (the target's key, say)
			q.srq.giveBack(in.wqe)
			in.srqTaken = false
		}
		in.hold.Release()
		e.putIncoming(in)
		return nil, out
	}
	q.rmu.Lock()
	if in.srqTaken && !q.serving() {
		// The QP went to ERR since the take, and its flush may have
		// passed (QP_LAST_WQE sent): nothing of the SRQ may complete on
		// it now, so the WQE goes back rather than into the open list.
		q.srq.giveBack(in.wqe)
		q.rmu.Unlock()
		in.srqTaken = false
		in.hold.Release()
		e.putIncoming(in)
		return nil, fabric.OutcomeUnreachable
	}
	q.link(in)
	q.rmu.Unlock()
	return in, fabric.OutcomeOK
}

// serving reports whether q takes requests: RTR, RTS or SQD.
func (q *qp) serving() bool {
	switch q.getState() {
	case abi.QPStateRTR, abi.QPStateRTS, abi.QPStateSQD:
		return true
	}
	return false
}

// prepare checks req's access and translates its target into in.
func (e *Engine) prepare(in *incoming, q *qp, a *abi.QPAttr, req *fabric.Request) fabric.Outcome {
	switch req.Op {
	case fabric.OpWrite, fabric.OpWriteImm:
		if a.AccessFlags&abi.AccessRemoteWrite == 0 {
			return fabric.OutcomeRemoteAccess
		}
		if req.Op == fabric.OpWriteImm {
			if o := e.beginRecv(q, in, req.RecvAhead, false); o != fabric.OutcomeOK {
				return o
			}
		}
		if req.Len == 0 {
			return fabric.OutcomeOK // no key is checked, as on hardware
		}
		return e.translateIncoming(in, q, req, abi.AccessRemoteWrite, req.Len)
	case fabric.OpSend, fabric.OpSendImm:
		return e.beginRecv(q, in, req.RecvAhead, true)
	case fabric.OpRead:
		if a.AccessFlags&abi.AccessRemoteRead == 0 {
			return fabric.OutcomeRemoteAccess
		}
		if req.Len == 0 {
			return fabric.OutcomeOK
		}
		return e.translateIncoming(in, q, req, abi.AccessRemoteRead, req.Len)
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		if a.AccessFlags&abi.AccessRemoteAtomic == 0 {
			return fabric.OutcomeRemoteAccess
		}
		if req.RemoteAddr%8 != 0 {
			return fabric.OutcomeInvalidRequest
		}
		if o := e.translateIncoming(in, q, req, abi.AccessRemoteAtomic, 8); o != fabric.OutcomeOK {
			return o
		}
		if len(in.views) != 1 || !in.views[0].Aligned(0, 8) {
			return fabric.OutcomeInvalidRequest // see respAtomic
		}
		return fabric.OutcomeOK
	}
	return fabric.OutcomeInvalidRequest
}

// translateIncoming translates req's rkey range into in.views, pinned by
// in.hold (see translateRemote).
func (e *Engine) translateIncoming(in *incoming, q *qp, req *fabric.Request, need abi.Access, n uint64) fabric.Outcome {
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
// (peekRecv) or its SRQ (takeRecvSRQ).
func (e *Engine) beginRecv(q *qp, in *incoming, ahead uint32, buffers bool) fabric.Outcome {
	if q.srq != nil {
		return e.takeRecvSRQ(q, in, buffers)
	}
	return e.peekRecv(q, in, ahead, buffers)
}

// takeRecvSRQ takes the next WQE of q's SRQ for in (the SRQ serves its
// QPs in the order their requests begin, so an RQ's "ahead" has no
// meaning here) and, for a SEND (buffers), translates its SGEs into
// in.views. Empty: RNR. Unlike a WQE of an RQ, a taken WQE that is
// malformed, names bad buffers or is too small is not left for the next
// request (it would fail every QP on the SRQ in turn): it completes in
// error on q, which goes to ERR, as on the local fabric.
func (e *Engine) takeRecvSRQ(q *qp, in *incoming, buffers bool) fabric.Outcome {
	if cap(in.wqe) < int(q.srq.stride) {
		in.wqe = make([]byte, q.srq.stride)
	}
	in.wqe = in.wqe[:q.srq.stride]
	if o := e.takeFromSRQ(q, in.wqe); o != fabric.OutcomeOK {
		return o
	}
	rw, err := abi.DecodeRecvWQE(in.wqe, q.srq.maxSGE)
	if err != nil {
		e.badRecvWQE(q, err)
		e.failTakenRecv(q, rw.WRID, abi.WCLocQPOpErr, in.srcQPN)
		return fabric.OutcomeRemoteOp
	}
	in.wrid, in.srqTaken = rw.WRID, true
	if !buffers {
		return fabric.OutcomeOK
	}
	dst, total, st := gatherSGEs(e.cfg.MTT, &in.hold, in.views[:0], in.wqe[abi.RecvWQEHeaderSize:], int(rw.NumSGE), q.pdn, abi.AccessLocalWrite)
	in.views = dst
	switch {
	case st != abi.WCSuccess:
		in.srqTaken = false
		e.failTakenRecv(q, rw.WRID, st, in.srcQPN)
		return fabric.OutcomeRemoteOp
	case total < in.len:
		in.srqTaken = false
		e.failTakenRecv(q, rw.WRID, abi.WCLocLenErr, in.srcQPN)
		return fabric.OutcomeInvalidRequest
	}
	return fabric.OutcomeOK
}

// failTakenRecv completes a WQE taken from q's SRQ with error status st
// and moves q to ERR.
func (e *Engine) failTakenRecv(q *qp, wrid uint64, st abi.WCStatus, srcQPN uint32) {
	e.push(q, q.rcq, &abi.CQE{WRID: wrid, Status: st, Opcode: abi.WCRecv, QPN: q.qpn, SrcQP: srcQPN}, true)
	e.qpFailed(q, st)
}

// peekRecv finds the receive WQE ahead entries past rq_cons without
// consuming it, records it in in and, for a SEND (buffers), translates its
// SGEs into in.views. Not posted yet: RNR.
func (e *Engine) peekRecv(q *qp, in *incoming, ahead uint32, buffers bool) fabric.Outcome {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	avail := q.rec.LoadUint32Acquire(abi.QPDoorbellOffRQProd) - q.rqCons
	if avail > q.rqSize {
		// A guest bug; respond would fail the QP for it, but a refused
		// Begin must change nothing. The requester's QP fails, and the
		// engine's next local use of the RQ (respond, flush) finds it.
		e.log.Debug("rq_prod runs past the ring", "qpn", q.qpn, "cons", q.rqCons, "ahead", avail)
		return fabric.OutcomeRemoteOp
	}
	if ahead >= avail {
		return fabric.OutcomeRNR
	}
	idx := q.rqCons + ahead
	copyEntry(q.rbuf, q.rq, idx, q.rqSize, q.rqStride)
	rw, err := abi.DecodeRecvWQE(q.rbuf, q.maxRecvSGE)
	if err != nil {
		e.st.badWQEs.Add(1)
		e.log.Debug("bad receive WQE", "qpn", q.qpn, "index", idx, "err", err)
		return fabric.OutcomeRemoteOp
	}
	in.recvIdx, in.wrid = idx, rw.WRID
	if !buffers {
		return fabric.OutcomeOK
	}
	dst, total, st := gatherSGEs(e.cfg.MTT, &in.hold, in.views[:0], q.rbuf[abi.RecvWQEHeaderSize:], int(rw.NumSGE), q.pdn, abi.AccessLocalWrite)
	in.views = dst
	if st != abi.WCSuccess {
		return fabric.OutcomeRemoteOp
	}
	if total < in.len {
		return fabric.OutcomeInvalidRequest
	}
	return fabric.OutcomeOK
}

// live reports whether in's target is still what Begin translated: the
// engine runs on the same memory and the QP was neither reset nor
// destroyed. Caller holds the gate shared.
func (in *incoming) live() bool {
	e := in.e
	return e.running && !e.broken.Load() && e.memGen == in.gen && in.q.gen == in.qgen
}

// guard runs fn, which touches guest memory, and reports false if it
// faulted (see respond).
func (in *incoming) guard(what string, fn func()) bool {
	err := guestmem.Guard(func() error { fn(); return nil })
	if err != nil {
		in.e.log.Error("memory fault on a streamed request", "qpn", in.q.qpn, "op", in.op, "step", what, "err", err)
	}
	return err == nil
}

// Place implements fabric.Incoming.
func (in *incoming) Place(off uint64, b []byte) (ok bool) {
	e := in.e
	switch {
	case in.released || in.dead || in.committed:
		return false
	case in.op.HasResponse():
		in.dead = true // READ and the atomics place nothing
		return false
	case off > in.len || uint64(len(b)) > in.len-off || !in.live():
		in.dead = true
		return false
	}
	var n uint64
	if !in.guard("place", func() { n = uint64(in.cur.CopyIn(in.views, off, b)) }) {
		in.dead = true
		return false
	}
	in.placed += n
	e.st.bytesReceived.Add(n)
	if n != uint64(len(b)) {
		in.dead = true
		return false
	}
	return true
}

// Commit implements fabric.Incoming. A WRITE has taken effect piece by
// piece; Commit checks that all of it was placed. A receive-consuming
// request consumes its WQE, which must be the next one (the fabric
// commits in order), and writes the CQE; an atomic is performed here, on
// a QP still serving. A refusal leaves the receive queue and the word
// untouched.
func (in *incoming) Commit() (out fabric.Outcome) {
	if in.released || in.dead || in.committed || !in.live() {
		return fabric.OutcomeRemoteOp
	}
	if !in.guard("commit", func() { out = in.commit() }) {
		return fabric.OutcomeRemoteOp
	}
	if out == fabric.OutcomeOK {
		in.committed = true
	}
	return out
}

// commit carries out Commit on guest memory.
func (in *incoming) commit() fabric.Outcome {
	e, q := in.e, in.q
	switch in.op {
	case fabric.OpWrite, fabric.OpWriteImm, fabric.OpSend, fabric.OpSendImm:
		if in.placed != in.len {
			e.log.Warn("streamed request committed before all of it was placed", "qpn", q.qpn, "op", in.op, "placed", in.placed, "len", in.len)
			return fabric.OutcomeRemoteOp
		}
		if in.op == fabric.OpWrite {
			return fabric.OutcomeOK
		}
		return e.commitRecv(in)
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		if !q.serving() {
			return fabric.OutcomeRemoteOp
		}
		if in.op == fabric.OpCmpSwap {
			in.value = in.views[0].CompareAndSwapUint64(0, in.compare, in.swapAdd)
		} else {
			in.value = in.views[0].AddUint64(0, in.swapAdd)
		}
	}
	return fabric.OutcomeOK
}

// commitRecv consumes the receive WQE Begin found, which must be at
// rq_cons by now (or taken from the SRQ and still this request's), with a
// successful CQE.
func (e *Engine) commitRecv(in *incoming) fabric.Outcome {
	q := in.q
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.srq != nil {
		if !q.serving() || !in.srqTaken {
			return fabric.OutcomeRemoteOp // flushed, or given back at Release
		}
		in.srqTaken = false
		e.push(q, q.rcq, in.recvCQE(), in.solicited)
		return fabric.OutcomeOK
	}
	if !q.serving() || q.rqCons != in.recvIdx {
		// The QP failed (its receives are being flushed) or the fabric
		// committed out of order: the WQE is not ours to take.
		e.log.Debug("receive WQE no longer next", "qpn", q.qpn, "index", in.recvIdx, "rq_cons", q.rqCons)
		return fabric.OutcomeRemoteOp
	}
	e.completeRecv(q, in.recvCQE(), in.srcQPN, in.solicited)
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

// Value implements fabric.Incoming.
func (in *incoming) Value() uint64 { return in.value }

// ReadAt implements fabric.Incoming: valid for a committed READ, also
// after Release, until the memory or the QP goes away.
func (in *incoming) ReadAt(p []byte, off uint64) (ok bool) {
	e := in.e
	if in.op != fabric.OpRead || !in.committed || off > in.len || uint64(len(p)) > in.len-off || !in.live() {
		return false
	}
	var n uint64
	if !in.guard("read", func() { n = uint64(in.cur.CopyOut(p, in.views, off)) }) {
		return false
	}
	e.st.bytesSent.Add(n)
	return n == uint64(len(p))
}

// Release implements fabric.Incoming. Everything but a READ goes back to
// the engine's free list, so a later call on it is the caller's bug; a
// READ is left to the garbage collector instead, because its ReadAt stays
// valid after Release (a response may be resent) and reusing it could
// hand another request's memory to that resend.
func (in *incoming) Release() {
	e := in.e
	if in.released {
		return
	}
	in.released = true
	if in.listed {
		q := in.q
		q.rmu.Lock()
		q.unlink(in)
		if in.srqTaken {
			// Uncommitted: the WQE goes back for the next request.
			q.srq.giveBack(in.wqe)
			in.srqTaken = false
		}
		q.rmu.Unlock()
	}
	in.hold.Release()
	if in.op != fabric.OpRead {
		e.putIncoming(in)
	}
}

// link adds in to q's open Incomings. Caller holds rmu.
func (q *qp) link(in *incoming) {
	in.prev, in.next, in.listed = nil, q.open, true
	if q.open != nil {
		q.open.prev = in
	}
	q.open = in
}

// unlink removes in from q's open Incomings. Caller holds rmu.
func (q *qp) unlink(in *incoming) {
	if in.prev != nil {
		in.prev.next = in.next
	} else {
		q.open = in.next
	}
	if in.next != nil {
		in.next.prev = in.prev
	}
	in.prev, in.next, in.listed = nil, nil, false
}

// dropIncomings releases the pins of q's open Incomings, which the
// fabric may never release now that their QP is reset or destroyed (the
// generation check refuses every later step of theirs). Caller holds the
// gate exclusively, so no Incoming method runs.
func (q *qp) dropIncomings() {
	for in := q.open; in != nil; {
		next := in.next
		if in.srqTaken {
			q.srq.giveBack(in.wqe)
			in.srqTaken = false
		}
		in.hold.Release()
		in.prev, in.next, in.listed = nil, nil, false
		in = next
	}
	q.open = nil
}
