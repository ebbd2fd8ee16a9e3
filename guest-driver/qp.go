package guestdriver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// QPCap are a QP's queue sizes and per-WQE limits. Sizes are rounded up to
// powers of two.
type QPCap struct {
	SQSize     uint32 // send WQEs
	RQSize     uint32 // receive WQEs
	MaxSendSGE uint32
	MaxRecvSGE uint32
	MaxInline  uint32 // inline bytes per send WQE
}

// QPInit describes a QP to create.
type QPInit struct {
	Type   abi.QPType // zero means abi.QPTypeRC
	SendCQ *CQ
	RecvCQ *CQ
	Cap    QPCap
	// SigAll makes every send WQE complete with a CQE, signalled or not.
	SigAll bool
	// SRQ, if set, is where the QP's receives come from: it has no
	// receive ring of its own (Cap.RQSize and MaxRecvSGE are ignored) and
	// PostRecv is refused. The SRQ must be of the same PD.
	SRQ *SRQ
}

// QP is a queue pair: a send and a receive ring in guest memory, the
// doorbell record the driver rings, and the state the device keeps.
// PostSend and PostRecv may be called concurrently with each other (each
// ring has its own lock) and with Poll on the CQs.
type QP struct {
	pd     *PD
	qpn    uint32
	typ    abi.QPType
	psn    uint32 // first send PSN, drawn at creation
	inline uint32
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	db     *doorbells
	rec    guestmem.View // doorbell record
	sq     workQueue
	rq     workQueue // disabled on an SRQ

	mu        sync.Mutex // Destroy
	destroyed bool
}

// workQueue is one ring and the driver's producer state.
type workQueue struct {
	mu       sync.Mutex
	rec      guestmem.View // the doorbell record its indices are in
	ring     Buffer
	size     uint32 // WQE slots, a power of two
	stride   uint32 // bytes per slot
	maxSGE   uint32
	prod     uint32 // WQEs posted (free-running)
	cons     uint32 // last consumer index read from the device
	prodOff  uint64 // producer index offset in the doorbell record
	consOff  uint64 // consumer index offset
	disabled bool   // destroyed
}

// CreateQP creates a QP on pd (CREATE_QP), allocating its rings: SQSize
// slots of abi.SendWQEStride(MaxSendSGE, MaxInline) bytes and RQSize slots
// of abi.RecvWQEStride(MaxRecvSGE), each aligned to its stride. The QP
// starts in RESET; Connect (or Modify) brings it up.
func (pd *PD) CreateQP(ctx context.Context, init QPInit) (*QP, error) {
	d := pd.d
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("guestdriver: CreateQP needs a send and a receive CQ: %w", abi.ErrBadValue)
	}
	if init.Type == 0 {
		init.Type = abi.QPTypeRC
	}
	c := init.Cap
	lim := d.Limits()
	// Bounded before any arithmetic: the device enforces its own limits,
	// the driver only keeps the ring sizes from overflowing.
	if c.SQSize > abi.CeilingLimits.MaxQPWR || c.RQSize > abi.CeilingLimits.MaxQPWR ||
		c.MaxSendSGE > abi.CeilingLimits.MaxSGE || c.MaxRecvSGE > abi.CeilingLimits.MaxSGE ||
		c.MaxInline > abi.CeilingLimits.MaxInlineData {
		return nil, fmt.Errorf("guestdriver: QP caps %+v beyond the ABI's ceilings (device: %d WRs, %d SGEs, %d inline): %w",
			c, lim.MaxQPWR, lim.MaxSGE, lim.MaxInlineData, abi.ErrBadValue)
	}
	db, err := d.doorbells(ctx)
	if err != nil {
		return nil, err
	}
	sqSize, rqSize := pow2(c.SQSize), pow2(c.RQSize)
	sqStride, rqStride := abi.SendWQEStride(c.MaxSendSGE, c.MaxInline), abi.RecvWQEStride(c.MaxRecvSGE)
	var srqn uint32
	if init.SRQ != nil {
		rqSize, rqStride, c.MaxRecvSGE, srqn = 0, 0, 0, init.SRQ.srqn
	}
	sq, err := d.mem.alloc(uint64(sqSize)*uint64(sqStride), uint64(sqStride))
	if err != nil {
		return nil, err
	}
	var rq Buffer
	if init.SRQ == nil {
		if rq, err = d.mem.alloc(uint64(rqSize)*uint64(rqStride), uint64(rqStride)); err != nil {
			d.mem.release(sq)
			return nil, err
		}
	}
	req := abi.CreateQPReq{
		PDN: pd.pdn, Type: init.Type, SendCQN: init.SendCQ.cqn, RecvCQN: init.RecvCQ.cqn, SRQN: srqn,
		SQSize: sqSize, RQSize: rqSize, MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: c.MaxRecvSGE,
		MaxInlineData: c.MaxInline, SQAddr: sq.GPA, RQAddr: rq.GPA,
	}
	if init.SigAll {
		req.SigAll = 1
	}
	var r abi.CreateQPResp
	if err := d.call(ctx, abi.OpCreateQP, &req, &r); err != nil {
		d.mem.release(sq)
		d.mem.release(rq)
		return nil, err
	}
	rec, err := db.record(r.DoorbellIndex)
	if err == nil && (r.SQStride != sqStride || r.RQStride != rqStride) {
		err = fmt.Errorf("strides %d/%d, laid out %d/%d: %w", r.SQStride, r.RQStride, sqStride, rqStride, ErrDevice)
	}
	if err != nil {
		d.call(ctx, abi.OpDestroyQP, &abi.HandleReq{Handle: r.QPN}, nil)
		d.mem.release(sq)
		d.mem.release(rq)
		return nil, fmt.Errorf("guestdriver: QP %d: %w", r.QPN, err)
	}
	qp := &QP{
		pd: pd, qpn: r.QPN, typ: init.Type, psn: randomPSN(), inline: c.MaxInline, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, db: db, rec: rec,
		sq: workQueue{rec: rec, ring: sq, size: sqSize, stride: sqStride, maxSGE: c.MaxSendSGE,
			prodOff: abi.QPDoorbellOffSQProd, consOff: abi.QPDoorbellOffSQCons},
		rq: workQueue{rec: rec, ring: rq, size: rqSize, stride: rqStride, maxSGE: c.MaxRecvSGE,
			prodOff: abi.QPDoorbellOffRQProd, consOff: abi.QPDoorbellOffRQCons, disabled: init.SRQ != nil},
	}
	// The device hands out a cleared record; counters start at zero.
	qp.sq.cons = rec.LoadUint32Acquire(abi.QPDoorbellOffSQCons)
	qp.rq.cons = rec.LoadUint32Acquire(abi.QPDoorbellOffRQCons)
	qp.sq.prod, qp.rq.prod = qp.sq.cons, qp.rq.cons
	return qp, nil
}

// maxInline is the inline capacity the QP was created with (the device
// checks against it, not against the room the stride leaves).
func (qp *QP) maxInline() uint32 { return qp.inline }

// Num is the QP number the device assigned.
func (qp *QP) Num() uint32 { return qp.qpn }

// PSN is the QP's first send PSN: drawn at random when the QP is created
// (24 bits), as libibverbs applications draw theirs, so that a QP number
// reused for a new connection starts a new packet stream whose packets
// and tokens the old one's stragglers do not match (docs/wire.md).
func (qp *QP) PSN() uint32 { return qp.psn }

// randomPSN draws a 24-bit PSN from math/rand/v2's generator (ChaCha8,
// seeded from the OS): unpredictable enough for a sequence number, which
// authenticates nothing (the connection token does).
func randomPSN() uint32 { return rand.Uint32() & (1<<24 - 1) }

// Type is the QP's transport type.
func (qp *QP) Type() abi.QPType { return qp.typ }

// PD is the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// SendCQ and RecvCQ are the QP's CQs.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// DoorbellRecord is the QP's doorbell record, for tests that ring it by
// hand (a producer index running ahead of the ring, say).
func (qp *QP) DoorbellRecord() guestmem.View { return qp.rec }

// Modify changes the QP's state and attributes (MODIFY_QP); mask selects
// which fields of attr apply. The device checks the transition against
// the IB state machine (abi.StatusBadState, abi.StatusInvalidArgument).
// A move to RESET empties both rings: the device zeroes the QP's doorbell
// record, and the driver starts its counters again at 0 to match (else
// its next post would hand the device the old WQEs too). Posting while
// such a Modify runs is a caller's race, as in IB.
func (qp *QP) Modify(ctx context.Context, mask abi.QPAttrMask, attr abi.QPAttr) error {
	err := qp.pd.d.call(ctx, abi.OpModifyQP, &abi.ModifyQPReq{QPN: qp.qpn, AttrMask: mask, Attr: attr}, nil)
	if err == nil && mask&abi.QPAttrState != 0 && attr.State == abi.QPStateReset {
		for _, wq := range []*workQueue{&qp.sq, &qp.rq} {
			wq.mu.Lock()
			wq.prod, wq.cons = 0, 0
			wq.mu.Unlock()
		}
	}
	return err
}

// Query returns the QP's attributes and capabilities (QUERY_QP).
func (qp *QP) Query(ctx context.Context) (abi.QueryQPResp, error) {
	var r abi.QueryQPResp
	err := qp.pd.d.call(ctx, abi.OpQueryQP, &abi.HandleReq{Handle: qp.qpn}, &r)
	return r, err
}

// State is the QP's current state, as QUERY_QP reports it.
func (qp *QP) State(ctx context.Context) (abi.QPState, error) {
	r, err := qp.Query(ctx)
	return r.Attr.State, err
}

// Destroy destroys the QP (DESTROY_QP) and frees its rings. Outstanding
// work requests are dropped without completions.
func (qp *QP) Destroy(ctx context.Context) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		// Not sent: the number may name a newer QP by now.
		return fmt.Errorf("guestdriver: QP %d: %w", qp.qpn, ErrDestroyed)
	}
	if err := qp.pd.d.call(ctx, abi.OpDestroyQP, &abi.HandleReq{Handle: qp.qpn}, nil); err != nil {
		return err
	}
	qp.destroyed = true
	// The device no longer reads the rings; stop posting into them
	// before they are reused.
	for _, wq := range []*workQueue{&qp.sq, &qp.rq} {
		wq.mu.Lock()
		wq.disabled = true
		if wq.ring.Len() != 0 {
			qp.pd.d.mem.release(wq.ring)
		}
		wq.ring = Buffer{}
		wq.mu.Unlock()
	}
	return nil
}

// SRQ is the shared receive queue the QP was created on, or nil.
func (qp *QP) SRQ() *SRQ { return qp.srq }
