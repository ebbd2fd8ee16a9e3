package engine

import (
	"github.com/vstellar/vstellar/virtio/abi"
)

// flush completes the outstanding WQEs of a QP in ERR with WR_FLUSH_ERR,
// up to flushBudget per queue per pass: the head WQE the requester still
// held, then every send and receive WQE the driver has posted (and goes on
// posting). A producer index more than a ring ahead is not flushed: those
// slots were never valid WQEs. Engine goroutine, gate shared.
func (q *qp) flush() (work bool) {
	e := q.e
	if q.inflight.Load() {
		if q.outcome.Load() == 0 {
			return false // wait for the fabric; Complete kicks the engine
		}
		q.inflight.Store(false) // the outcome no longer matters
	}
	for range flushBudget {
		var cqe abi.CQE
		if q.head {
			cqe = abi.CQE{WRID: q.wqe.WRID, Opcode: abi.WCOpcodeFor(q.wqe.Opcode)}
		} else {
			prod := q.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd)
			if prod == q.sqCons || prod-q.sqCons > q.sqSize {
				break
			}
			// Only wr_id and opcode matter; decode them from a copy (into
			// wqeBuf, free while there is no head). The WQE is flushed
			// whether it is valid or not: the decoder fills the header
			// fields either way.
			copyEntry(q.wqeBuf.Bytes(), q.sq, q.sqCons, q.sqSize, q.sqStride)
			w, _ := abi.DecodeSendWQE(q.wqeBuf.Bytes(), q.maxSendSGE, q.maxInline)
			cqe = abi.CQE{WRID: w.WRID, Opcode: abi.WCOpcodeFor(w.Opcode)}
		}
		cqe.Status, cqe.QPN = abi.WCWRFlushErr, q.qpn
		q.setHead(false)
		q.waitUntil = 0
		q.sqCons++
		q.rec.StoreUint32Release(abi.QPDoorbellOffSQCons, q.sqCons)
		e.push(q, q.scq, &cqe, false)
		work = true
	}
	if q.srq != nil {
		if q.flushSRQRecvs() {
			work = true
		}
	} else if q.flushRQ() {
		work = true
	}
	return work
}

// flushSRQRecvs flushes the receives q took from its SRQ and has in
// progress (streamed requests begun and not committed), never the SRQ's
// ring: that serves the SRQ's other QPs. Then it sends QP_LAST_WQE, once
// per stay in ERR. Responders hold rmu while they own a taken WQE.
func (q *qp) flushSRQRecvs() (work bool) {
	e := q.e
	q.rmu.Lock()
	defer q.rmu.Unlock()
	for in := q.open; in != nil; in = in.next {
		if !in.srqTaken {
			continue
		}
		in.srqTaken = false
		e.push(q, q.rcq, &abi.CQE{WRID: in.wrid, Status: abi.WCWRFlushErr, Opcode: abi.WCRecv, QPN: q.qpn}, false)
		work = true
	}
	if !q.lastWQE {
		q.lastWQE = true
		e.event(abi.EventQPLastWQE, q.qpn, 0)
		work = true
	}
	return work
}

// flushRQ flushes posted receive WQEs. Responders consume the RQ too, so
// this holds rmu (unlocked by defer in case guest memory faults).
func (q *qp) flushRQ() (work bool) {
	e := q.e
	q.rmu.Lock()
	defer q.rmu.Unlock()
	for range flushBudget {
		prod := q.rec.LoadUint32Acquire(abi.QPDoorbellOffRQProd)
		if prod == q.rqCons || prod-q.rqCons > q.rqSize {
			break
		}
		// As for the SQ: wr_id from a decoded copy, valid WQE or not.
		copyEntry(q.rbuf, q.rq, q.rqCons, q.rqSize, q.rqStride)
		w, _ := abi.DecodeRecvWQE(q.rbuf, q.maxRecvSGE)
		cqe := abi.CQE{WRID: w.WRID, Status: abi.WCWRFlushErr, Opcode: abi.WCRecv, QPN: q.qpn}
		q.rqCons++
		q.rec.StoreUint32Release(abi.QPDoorbellOffRQCons, q.rqCons)
		e.push(q, q.rcq, &cqe, false)
		work = true
	}
	return work
}
