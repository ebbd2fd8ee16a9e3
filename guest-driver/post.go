package guestdriver

import (
	"fmt"

	"github.com/vstellar/vstellar/virtio/abi"
)

// SendWR is a send work request.
type SendWR struct {
	// WRID comes back in the completion.
	WRID   uint64
	Opcode abi.WROpcode
	// SGL is the local memory: the message for SEND and WRITE, the
	// destination for READ, the 8 bytes that receive an atomic's original
	// value.
	SGL []abi.SGE
	// Inline, when non-nil, is the payload of a SEND or WRITE, copied
	// into the WQE itself (at most the QP's MaxInline bytes; SGL must be
	// empty). The buffer may be reused as soon as PostSend returns.
	Inline []byte
	// Signaled asks for a CQE on success (errors always complete).
	Signaled bool
	// Solicited asks for a solicited event at the responder (SEND).
	Solicited bool
	// Fence waits for earlier READs and atomics to complete first.
	Fence bool
	// Imm is the immediate data of the WITH_IMM opcodes.
	Imm uint32
	// RemoteAddr and RKey address the peer's memory (RDMA and atomics).
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_SWAP and the addend of
	// FETCH_ADD; Swap is CMP_SWAP's new value.
	CompareAdd, Swap uint64
}

// RecvWR is a receive work request: where an incoming SEND's payload goes.
type RecvWR struct {
	WRID uint64
	SGL  []abi.SGE
}

// PostSend posts send work requests: each is written into the send ring
// slot at the producer index, then the producer index is published with
// a release store and, if the device's engine is idle, the wakeup queue
// is kicked. On error a *PostError says which request failed; the ones
// before it were posted. A full ring is ErrQueueFull: the device has not
// retired enough WQEs yet (poll the send CQ and retry). It does not
// allocate unless it fails.
func (qp *QP) PostSend(wrs ...SendWR) error {
	wq := &qp.sq
	wq.mu.Lock()
	if wq.disabled {
		wq.mu.Unlock()
		return fmt.Errorf("guestdriver: QP %d: %w", qp.qpn, ErrDestroyed)
	}
	var perr error
	posted := 0
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.checkSend(wr); err != nil {
			perr = &PostError{Index: i, Err: err}
			break
		}
		slot := wq.nextSlot()
		if slot == nil {
			perr = &PostError{Index: i, Err: ErrQueueFull}
			break
		}
		encodeSend(slot, wr)
		wq.prod++
		posted++
	}
	return qp.publish(wq, posted, perr)
}

// PostRecv posts receive work requests, like PostSend on the receive
// ring. A QP on an SRQ has none: post to the SRQ.
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	wq := &qp.rq
	wq.mu.Lock()
	if wq.disabled {
		wq.mu.Unlock()
		if qp.srq != nil {
			return fmt.Errorf("guestdriver: QP %d takes its receives from SRQ %d: %w", qp.qpn, qp.srq.srqn, ErrBadWR)
		}
		return fmt.Errorf("guestdriver: QP %d: %w", qp.qpn, ErrDestroyed)
	}
	posted, perr := wq.putRecvs(wrs, "QP", qp.qpn)
	return qp.publish(wq, posted, perr)
}

// putRecvs writes receive work requests into wq's slots and advances its
// producer index (not yet published). what and num name the queue in
// errors. Called with wq.mu held.
func (wq *workQueue) putRecvs(wrs []RecvWR, what string, num uint32) (posted int, perr error) {
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGL)) > wq.maxSGE {
			return posted, &PostError{Index: i, Err: fmt.Errorf("%d SGEs, %s %d takes %d: %w", len(wr.SGL), what, num, wq.maxSGE, ErrBadWR)}
		}
		slot := wq.nextSlot()
		if slot == nil {
			return posted, &PostError{Index: i, Err: ErrQueueFull}
		}
		abi.RecvWQE{WRID: wr.WRID, NumSGE: uint16(len(wr.SGL))}.Put(slot)
		for j, s := range wr.SGL {
			off := abi.RecvWQEHeaderSize + j*abi.SGESize
			s.Put(slot[off : off+abi.SGESize])
		}
		wq.prod++
		posted++
	}
	return posted, nil
}

// PostRawSend writes slot (at most one send WQE stride; the rest of the
// slot is zeroed) into the next send ring slot as it is and rings the
// doorbell: a way for tests to hand the device a malformed WQE (garbage
// opcode, SGE count beyond the QP's, reserved bits).
func (qp *QP) PostRawSend(slot []byte) error { return qp.postRaw(&qp.sq, slot) }

// PostRawRecv is PostRawSend for the receive ring.
func (qp *QP) PostRawRecv(slot []byte) error { return qp.postRaw(&qp.rq, slot) }

func (qp *QP) postRaw(wq *workQueue, raw []byte) error {
	wq.mu.Lock()
	if wq.disabled {
		wq.mu.Unlock()
		return fmt.Errorf("guestdriver: QP %d: %w", qp.qpn, ErrDestroyed)
	}
	if uint64(len(raw)) > uint64(wq.stride) {
		wq.mu.Unlock()
		return fmt.Errorf("guestdriver: raw WQE of %d bytes in %d-byte slots: %w", len(raw), wq.stride, ErrBadWR)
	}
	slot := wq.nextSlot()
	if slot == nil {
		wq.mu.Unlock()
		return ErrQueueFull
	}
	clear(slot[copy(slot, raw):])
	wq.prod++
	return qp.publish(wq, 1, nil)
}

// nextSlot returns the ring slot at the producer index, or nil when the
// ring is full. The device's consumer index is read (acquire: the device
// is done with the slots before it) only when the cached one says full.
// An index the device left ahead of the producer reads as full, never as
// room. Called with wq.mu held.
func (wq *workQueue) nextSlot() []byte {
	if wq.prod-wq.cons >= wq.size {
		wq.cons = wq.rec.LoadUint32Acquire(wq.consOff)
		if wq.prod-wq.cons >= wq.size {
			return nil
		}
	}
	off := uint64(wq.prod&(wq.size-1)) * uint64(wq.stride)
	return wq.ring.Bytes()[off : off+uint64(wq.stride)]
}

// publish stores the producer index (release: the WQEs before it are
// written), unlocks wq and follows the wake-up protocol.
func (qp *QP) publish(wq *workQueue, posted int, perr error) error {
	if posted == 0 {
		wq.mu.Unlock()
		return perr
	}
	wq.rec.StoreUint32Release(wq.prodOff, wq.prod)
	wq.mu.Unlock()
	if err := qp.db.ring(); err != nil {
		return fmt.Errorf("guestdriver: QP %d: %d work requests posted, wake-up failed: %w", qp.qpn, posted, err)
	}
	return perr
}

// checkSend refuses what the device would only complete with an error
// anyway and what would not fit the QP's slots.
func (qp *QP) checkSend(wr *SendWR) error {
	op := wr.Opcode
	switch {
	case !op.Valid():
		return fmt.Errorf("opcode %v: %w", op, ErrBadWR)
	case wr.Inline != nil:
		if op != abi.WRSend && op != abi.WRSendWithImm && op != abi.WRRDMAWrite && op != abi.WRRDMAWriteWithImm {
			return fmt.Errorf("inline %v: %w", op, ErrBadWR)
		}
		if len(wr.SGL) != 0 {
			return fmt.Errorf("inline data and %d SGEs: %w", len(wr.SGL), ErrBadWR)
		}
		if uint64(len(wr.Inline)) > uint64(qp.maxInline()) {
			return fmt.Errorf("%d inline bytes, QP %d takes %d: %w", len(wr.Inline), qp.qpn, qp.maxInline(), ErrBadWR)
		}
	case uint32(len(wr.SGL)) > qp.sq.maxSGE:
		return fmt.Errorf("%d SGEs, QP %d takes %d: %w", len(wr.SGL), qp.qpn, qp.sq.maxSGE, ErrBadWR)
	}
	if op.IsAtomic() && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8) {
		return fmt.Errorf("%v needs one 8-byte SGE: %w", op, ErrBadWR)
	}
	return nil
}

// encodeSend writes wr into a send slot (checked by checkSend).
func encodeSend(slot []byte, wr *SendWR) {
	var flags uint8
	if wr.Signaled {
		flags |= abi.SendSignaled
	}
	if wr.Solicited {
		flags |= abi.SendSolicited
	}
	if wr.Fence {
		flags |= abi.SendFence
	}
	w := abi.SendWQE{
		WRID: wr.WRID, Opcode: wr.Opcode, NumSGE: uint16(len(wr.SGL)), Imm: wr.Imm,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
	}
	if wr.Inline != nil {
		w.Flags = flags | abi.SendInline
		w.InlineLen = uint32(len(wr.Inline))
		w.Put(slot)
		copy(slot[abi.SendWQEHeaderSize:], wr.Inline)
		return
	}
	w.Flags = flags
	w.Put(slot)
	for j, s := range wr.SGL {
		off := abi.SendWQEHeaderSize + j*abi.SGESize
		s.Put(slot[off : off+abi.SGESize])
	}
}
