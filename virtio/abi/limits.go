package abi

import (
	"errors"
	"fmt"
)

// Limits are the per-device resource limits. The device advertises them in
// config space and QUERY_DEVICE and enforces them on every create command:
// a request beyond a limit gets StatusNoResources (or
// StatusInvalidArgument for a size), never an allocation.
type Limits struct {
	MaxQP         uint32 // queue pairs
	MaxCQ         uint32 // completion queues
	MaxMR         uint32 // memory regions
	MaxPD         uint32 // protection domains
	MaxAH         uint32 // address handles
	MaxQPWR       uint32 // work requests per send or receive queue
	MaxCQE        uint32 // entries per CQ
	MaxSGE        uint32 // scatter/gather entries per work request
	MaxInlineData uint32 // bytes of inline data per send WQE
	MaxQPRdAtom   uint32 // outstanding RDMA READ/atomic per QP (as responder and initiator)
	MaxGID        uint32 // GID table entries per port
	MaxSRQ        uint32 // shared receive queues
	MaxSRQWR      uint32 // work requests per SRQ
	MaxSRQSGE     uint32 // scatter/gather entries per SRQ work request
	MaxMRSize     uint64 // bytes per memory region
	PageSizeCap   uint64 // supported MR page sizes, a bit per power of two
}

// DefaultLimits are what a device gets for zero fields of its configured
// Limits.
var DefaultLimits = Limits{
	MaxQP:         4096,
	MaxCQ:         4096,
	MaxMR:         65536,
	MaxPD:         1024,
	MaxAH:         4096,
	MaxQPWR:       16384,
	MaxCQE:        32768,
	MaxSGE:        16,
	MaxInlineData: 256,
	MaxQPRdAtom:   16,
	MaxGID:        16,
	MaxSRQ:        1024,
	MaxSRQWR:      16384,
	MaxSRQSGE:     16,
	MaxMRSize:     1 << 40,
	PageSizeCap:   1<<12 | 1<<21 | 1<<30,
}

// CeilingLimits are the largest values ABI version 1 allows. They keep
// handles inside their encodings (QP numbers are 24 bits; MR keys carry a
// 24-bit index) and bound the doorbell region (one record per QP, CQ and
// SRQ).
var CeilingLimits = Limits{
	MaxQP:         1 << 18,
	MaxCQ:         1 << 18,
	MaxMR:         1 << 24,
	MaxPD:         1 << 24,
	MaxAH:         1 << 24,
	MaxQPWR:       1 << 16,
	MaxCQE:        1 << 22,
	MaxSGE:        64,
	MaxInlineData: 1024,
	MaxQPRdAtom:   255,
	MaxGID:        256,
	MaxSRQ:        1 << 18,
	MaxSRQWR:      1 << 16,
	MaxSRQSGE:     64,
	MaxMRSize:     1 << 52,
	PageSizeCap:   1<<64 - 1,
}

// WithDefaults returns l with every zero field replaced by its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	pick32 := func(v *uint32, def uint32) {
		if *v == 0 {
			*v = def
		}
	}
	pick32(&l.MaxQP, d.MaxQP)
	pick32(&l.MaxCQ, d.MaxCQ)
	pick32(&l.MaxMR, d.MaxMR)
	pick32(&l.MaxPD, d.MaxPD)
	pick32(&l.MaxAH, d.MaxAH)
	pick32(&l.MaxQPWR, d.MaxQPWR)
	pick32(&l.MaxCQE, d.MaxCQE)
	pick32(&l.MaxSGE, d.MaxSGE)
	pick32(&l.MaxInlineData, d.MaxInlineData)
	pick32(&l.MaxQPRdAtom, d.MaxQPRdAtom)
	pick32(&l.MaxGID, d.MaxGID)
	pick32(&l.MaxSRQ, d.MaxSRQ)
	pick32(&l.MaxSRQWR, d.MaxSRQWR)
	pick32(&l.MaxSRQSGE, d.MaxSRQSGE)
	if l.MaxMRSize == 0 {
		l.MaxMRSize = d.MaxMRSize
	}
	if l.PageSizeCap == 0 {
		l.PageSizeCap = d.PageSizeCap
	}
	return l
}

// Validate checks that every limit is non-zero and within CeilingLimits,
// and that the page size capability includes 4 KiB pages.
func (l Limits) Validate() error {
	c := CeilingLimits
	var errs []error
	check := func(name string, v, ceil uint64) {
		if v == 0 || v > ceil {
			errs = append(errs, fmt.Errorf("%s = %d, want 1..%d: %w", name, v, ceil, ErrBadValue))
		}
	}
	check("max_qp", uint64(l.MaxQP), uint64(c.MaxQP))
	check("max_cq", uint64(l.MaxCQ), uint64(c.MaxCQ))
	check("max_mr", uint64(l.MaxMR), uint64(c.MaxMR))
	check("max_pd", uint64(l.MaxPD), uint64(c.MaxPD))
	check("max_ah", uint64(l.MaxAH), uint64(c.MaxAH))
	check("max_qp_wr", uint64(l.MaxQPWR), uint64(c.MaxQPWR))
	check("max_cqe", uint64(l.MaxCQE), uint64(c.MaxCQE))
	check("max_sge", uint64(l.MaxSGE), uint64(c.MaxSGE))
	check("max_inline_data", uint64(l.MaxInlineData), uint64(c.MaxInlineData))
	check("max_qp_rd_atom", uint64(l.MaxQPRdAtom), uint64(c.MaxQPRdAtom))
	check("max_gid", uint64(l.MaxGID), uint64(c.MaxGID))
	check("max_srq", uint64(l.MaxSRQ), uint64(c.MaxSRQ))
	check("max_srq_wr", uint64(l.MaxSRQWR), uint64(c.MaxSRQWR))
	check("max_srq_sge", uint64(l.MaxSRQSGE), uint64(c.MaxSRQSGE))
	check("max_mr_size", l.MaxMRSize, c.MaxMRSize)
	if l.PageSizeCap&(1<<12) == 0 {
		errs = append(errs, fmt.Errorf("page_size_cap %#x lacks 4 KiB pages: %w", l.PageSizeCap, ErrBadValue))
	}
	return errors.Join(errs...)
}

// CheckCQEntries checks a CQ size (CREATE_CQ, RESIZE_CQ) against the
// limits: a power of two (the ring index is a mask) up to MaxCQE. The
// error wraps ErrBadValue.
func (l Limits) CheckCQEntries(n uint32) error {
	if !isPow2(n) || n > l.MaxCQE {
		return fmt.Errorf("%d CQ entries, want a power of two up to %d: %w", n, l.MaxCQE, ErrBadValue)
	}
	return nil
}

// CheckQPCaps checks what a QP is created with (CREATE_QP) against the
// limits: SQ and RQ sizes are powers of two up to MaxQPWR, SGE counts up
// to MaxSGE, inline data up to MaxInlineData. A QP on an SRQ (srq) has no
// RQ of its own: rqSize and recvSGE are 0. The error wraps ErrBadValue.
func (l Limits) CheckQPCaps(sqSize, rqSize, sendSGE, recvSGE, inline uint32, srq bool) error {
	rqOK := isPow2(rqSize) && rqSize <= l.MaxQPWR
	if srq {
		rqOK = rqSize == 0 && recvSGE == 0
	}
	switch {
	case srq && !rqOK:
		return fmt.Errorf("QP on an SRQ with an RQ of %d WQEs and %d SGEs, want none: %w", rqSize, recvSGE, ErrBadValue)
	case !isPow2(sqSize) || sqSize > l.MaxQPWR || !rqOK:
		return fmt.Errorf("SQ of %d / RQ of %d WQEs, want powers of two up to %d: %w", sqSize, rqSize, l.MaxQPWR, ErrBadValue)
	case sendSGE > l.MaxSGE || recvSGE > l.MaxSGE:
		return fmt.Errorf("%d send / %d receive SGEs, at most %d: %w", sendSGE, recvSGE, l.MaxSGE, ErrBadValue)
	case inline > l.MaxInlineData:
		return fmt.Errorf("%d bytes of inline data, at most %d: %w", inline, l.MaxInlineData, ErrBadValue)
	}
	return nil
}

// CheckSRQCaps checks what an SRQ is created with (CREATE_SRQ): a
// power-of-two size up to MaxSRQWR, SGEs up to MaxSRQSGE, and a limit
// below the size. The error wraps ErrBadValue.
func (l Limits) CheckSRQCaps(size, sge, limit uint32) error {
	switch {
	case !isPow2(size) || size > l.MaxSRQWR:
		return fmt.Errorf("SRQ of %d WQEs, want a power of two up to %d: %w", size, l.MaxSRQWR, ErrBadValue)
	case sge > l.MaxSRQSGE:
		return fmt.Errorf("%d SRQ SGEs, at most %d: %w", sge, l.MaxSRQSGE, ErrBadValue)
	case limit >= size:
		return fmt.Errorf("SRQ limit %d, want below the size %d: %w", limit, size, ErrBadValue)
	}
	return nil
}

func isPow2(n uint32) bool { return n != 0 && n&(n-1) == 0 }
