package guestdriver

import (
	"context"
	"fmt"
	"sync"

	"github.com/vstellar/vstellar/virtio/abi"
)

// SRQInit describes a shared receive queue to create.
type SRQInit struct {
	MaxWR  uint32 // receive WQEs, rounded up to a power of two
	MaxSGE uint32 // SGEs per WQE
	// Limit, if not 0, arms the limit event at once (see ArmLimit).
	Limit uint32
}

// SRQ is a shared receive queue: one ring of receive WQEs that every QP
// created on it takes its receives from, in the order their messages
// arrive (docs/spec.md §10.7). A receive completes on the receive CQ of
// the QP its message arrived at. PostRecv may be called concurrently with
// everything else.
type SRQ struct {
	pd   *PD
	srqn uint32
	wq   workQueue

	mu        sync.Mutex // Destroy
	destroyed bool
}

// CreateSRQ creates an SRQ on pd (CREATE_SRQ) with its ring of MaxWR
// slots of abi.RecvWQEStride(MaxSGE) bytes.
func (pd *PD) CreateSRQ(ctx context.Context, init SRQInit) (*SRQ, error) {
	d := pd.d
	if init.MaxWR > abi.CeilingLimits.MaxSRQWR || init.MaxSGE > abi.CeilingLimits.MaxSRQSGE {
		return nil, fmt.Errorf("guestdriver: SRQ of %d WRs and %d SGEs beyond the ABI's ceilings: %w", init.MaxWR, init.MaxSGE, abi.ErrBadValue)
	}
	db, err := d.doorbells(ctx)
	if err != nil {
		return nil, err
	}
	size, stride := pow2(init.MaxWR), abi.RecvWQEStride(init.MaxSGE)
	ring, err := d.mem.alloc(uint64(size)*uint64(stride), uint64(stride))
	if err != nil {
		return nil, err
	}
	req := abi.CreateSRQReq{PDN: pd.pdn, Size: size, MaxSGE: init.MaxSGE, Limit: init.Limit, RingAddr: ring.GPA}
	var r abi.CreateSRQResp
	if err := d.call(ctx, abi.OpCreateSRQ, &req, &r); err != nil {
		d.mem.release(ring)
		return nil, err
	}
	rec, err := db.record(r.DoorbellIndex)
	if err == nil && r.Stride != stride {
		err = fmt.Errorf("stride %d, laid out %d: %w", r.Stride, stride, ErrDevice)
	}
	if err != nil {
		d.call(ctx, abi.OpDestroySRQ, &abi.HandleReq{Handle: r.SRQN}, nil)
		d.mem.release(ring)
		return nil, fmt.Errorf("guestdriver: SRQ %d: %w", r.SRQN, err)
	}
	s := &SRQ{pd: pd, srqn: r.SRQN, wq: workQueue{rec: rec, ring: ring, size: size, stride: stride, maxSGE: init.MaxSGE,
		prodOff: abi.SRQDoorbellOffProd, consOff: abi.SRQDoorbellOffCons}}
	// The device hands out a cleared record.
	s.wq.cons = rec.LoadUint32Acquire(abi.SRQDoorbellOffCons)
	s.wq.prod = s.wq.cons
	return s, nil
}

// Num is the SRQ number.
func (s *SRQ) Num() uint32 { return s.srqn }

// PD is the protection domain the SRQ (and its QPs) belong to.
func (s *SRQ) PD() *PD { return s.pd }

// PostRecv posts receive work requests to the SRQ. A full ring is
// ErrQueueFull: the device has not taken enough WQEs yet. No kick is
// needed: the device takes receives when messages arrive. It does not
// allocate unless it fails.
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	wq := &s.wq
	wq.mu.Lock()
	defer wq.mu.Unlock()
	if wq.disabled {
		return fmt.Errorf("guestdriver: SRQ %d: %w", s.srqn, ErrDestroyed)
	}
	posted, perr := wq.putRecvs(wrs, "SRQ", s.srqn)
	if posted > 0 {
		wq.rec.StoreUint32Release(wq.prodOff, wq.prod)
	}
	return perr
}

// ArmLimit arms the SRQ's limit event (MODIFY_SRQ): once it holds fewer
// than limit WQEs, the device sends abi.EventSRQLimit (see
// Device.WaitEvent) and disarms it. 0 disarms it.
func (s *SRQ) ArmLimit(ctx context.Context, limit uint32) error {
	return s.pd.d.call(ctx, abi.OpModifySRQ, &abi.ModifySRQReq{SRQN: s.srqn, AttrMask: abi.SRQAttrLimit, Limit: limit}, nil)
}

// Query returns the SRQ's attributes (QUERY_SRQ).
func (s *SRQ) Query(ctx context.Context) (abi.SRQAttr, error) {
	var r abi.SRQAttr
	err := s.pd.d.call(ctx, abi.OpQuerySRQ, &abi.HandleReq{Handle: s.srqn}, &r)
	return r, err
}

// Destroy destroys the SRQ (DESTROY_SRQ) and frees its ring. The device
// refuses while QPs use it; WQEs still posted are dropped without
// completions.
func (s *SRQ) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("guestdriver: SRQ %d: %w", s.srqn, ErrDestroyed)
	}
	if err := s.pd.d.call(ctx, abi.OpDestroySRQ, &abi.HandleReq{Handle: s.srqn}, nil); err != nil {
		return err
	}
	s.destroyed = true
	wq := &s.wq
	wq.mu.Lock()
	wq.disabled = true
	s.pd.d.mem.release(wq.ring)
	wq.ring = Buffer{}
	wq.mu.Unlock()
	return nil
}
