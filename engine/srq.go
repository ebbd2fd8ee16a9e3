package engine

import (
	"fmt"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// srq is a shared receive queue (docs/spec.md §10.7): a ring of receive
// WQEs the driver posts to and any of the PD's QPs on it take from, in
// one order for all of them. A taken WQE is copied out at once and its
// slot freed (cons moves), so the ring never has holes; a message that
// took one and did not complete gives the copy back, and the next taker
// gets it before the ring.
type srq struct {
	e         *Engine // for its events, the log and the doorbell region
	srqn, pdn uint32
	dbIndex   uint32
	size      uint32
	maxSGE    uint32
	stride    uint32
	addr      uint64

	// refs counts the QPs on the SRQ (Engine.mu): it cannot be destroyed
	// while any exists.
	refs int

	// ring and rec are (re)bound with Engine.gate held exclusively; the
	// data path reads them under gate shared (and mu).
	ring    guestmem.View
	ringOK  bool
	rec     guestmem.View
	recOK   bool
	started bool // record zeroed once; later Starts keep its counters
	// ringPins keep the ring pinned while the SRQ lives (Engine.mu).
	ringPins pvdma.Hold

	mu     sync.Mutex
	cons   uint32   // WQEs taken from the ring; the record's cons
	back   [][]byte // WQEs given back, oldest first: taken before the ring
	spare  [][]byte // buffers for back, so giving back does not allocate
	limit  uint32   // armed limit, 0 when none
	broken bool     // prod ran past the ring: SRQ_ERR sent, nothing is taken
}

// takeResult says what take found.
type takeResult uint8

const (
	taken     takeResult = iota
	srqEmpty             // nothing posted: RNR
	srqBroken            // the SRQ is in error (or lost its ring or record)
)

// take copies the next WQE into dst (at least stride bytes): one given
// back, else the one at cons, whose slot it frees. It sends SRQ_LIMIT
// when the WQEs left fall below an armed limit, and SRQ_ERR (once) for a
// runaway prod. It touches guest memory: callers run it guarded. The
// unlock is deferred so that a fault cannot leave the SRQ locked.
func (s *srq) take(dst []byte) takeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken || !s.ringOK || !s.recOK {
		return srqBroken
	}
	prod := s.rec.LoadUint32Acquire(abi.SRQDoorbellOffProd)
	avail := prod - s.cons
	if avail > s.size {
		s.broken = true
		s.e.log.Debug("srq prod runs past the ring", "srqn", s.srqn, "cons", s.cons, "prod", prod)
		s.e.event(abi.EventSRQErr, s.srqn, 0)
		return srqBroken
	}
	switch {
	case len(s.back) > 0:
		b := s.back[0]
		copy(dst, b)
		s.back = s.back[1:]
		s.spare = append(s.spare, b)
	case avail > 0:
		copyEntry(dst, s.ring, s.cons, s.size, s.stride)
		s.cons++
		s.rec.StoreUint32Release(abi.SRQDoorbellOffCons, s.cons)
		avail--
	default:
		return srqEmpty
	}
	s.checkLimit(avail)
	return taken
}

// checkLimit sends SRQ_LIMIT and disarms the limit if the SRQ holds fewer
// WQEs than it: avail posted and not taken, plus those given back. Caller
// holds s.mu.
func (s *srq) checkLimit(avail uint32) {
	if s.limit != 0 && uint64(avail)+uint64(len(s.back)) < uint64(s.limit) {
		s.limit = 0
		s.e.event(abi.EventSRQLimit, s.srqn, 0)
	}
}

// giveBack returns a taken WQE (stride bytes) that completed nothing. It
// touches no guest memory.
func (s *srq) giveBack(wqe []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	if n := len(s.spare); n > 0 {
		b, s.spare = s.spare[n-1][:0], s.spare[:n-1]
	}
	s.back = append(s.back, append(b, wqe[:s.stride]...))
}

// createSRQ implements CreateSRQ.
func (e *Engine) createSRQ(sp SRQSpec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case sp.SRQN < 1 || uint64(sp.SRQN) > uint64(len(e.objs.srqs)):
		return statusErr(abi.StatusInvalidArgument, "srqn %d outside 1..%d", sp.SRQN, len(e.objs.srqs))
	case e.objs.srq(sp.SRQN) != nil:
		return statusErr(abi.StatusBusy, "srq %d exists", sp.SRQN)
	case sp.PDN == 0:
		return statusErr(abi.StatusInvalidArgument, "srq %d: pd 0", sp.SRQN)
	}
	if err := e.limits.CheckSRQCaps(sp.Size, sp.MaxSGE, sp.Limit); err != nil {
		return wrapStatus(err, "srq %d", sp.SRQN)
	}
	if err := e.checkDoorbell(sp.Doorbell); err != nil {
		return err
	}
	stride := abi.RecvWQEStride(sp.MaxSGE)
	ring, err := e.guest.checkRing("srq ring", sp.RingAddr, sp.Size, stride)
	if err != nil {
		return err
	}
	s := &srq{
		e: e, srqn: sp.SRQN, pdn: sp.PDN, dbIndex: sp.Doorbell, size: sp.Size, maxSGE: sp.MaxSGE,
		stride: stride, addr: sp.RingAddr, ring: ring, ringOK: true, limit: sp.Limit,
	}
	if err := e.guest.pinRing(&s.ringPins, "srq ring", sp.RingAddr, uint64(sp.Size)*uint64(stride)); err != nil {
		return err
	}
	if e.running {
		// Unpublished: no QP reaches it yet, so no gate is needed.
		if err := touchGuest(fmt.Sprintf("srq %d: doorbell record", sp.SRQN), func() { s.bindRecord() }); err != nil {
			e.memoryFaulted(err.Error())
			s.ringPins.Release()
			return err
		}
	}
	e.objs.putSRQ(s)
	return nil
}

// bindRecord binds s to its doorbell record: zeroed the first time,
// afterwards cons is rewritten from the engine's copy. Caller holds gate
// exclusively or owns an unpublished s.
func (s *srq) bindRecord() {
	e := s.e
	rec, ok := e.guest.record(s.dbIndex)
	s.rec, s.recOK = rec, ok
	if !ok {
		return // take reports it as broken to every QP that needs it
	}
	if !s.started {
		zeroRecord(rec)
		s.started = true
		return
	}
	rec.StoreUint32Release(abi.SRQDoorbellOffCons, s.cons)
}

// armSRQLimit implements ArmSRQLimit.
func (e *Engine) armSRQLimit(srqn, limit uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.objs.srq(srqn)
	if s == nil {
		return statusErr(abi.StatusNotFound, "srq %d", srqn)
	}
	if limit >= s.size {
		return statusErr(abi.StatusInvalidArgument, "srq %d: limit %d, want below the size %d", srqn, limit, s.size)
	}
	return s.armLimit(limit)
}

// armLimit arms the limit event at limit, or sends it now if the SRQ is
// below it already. Caller holds Engine.mu.
func (s *srq) armLimit(limit uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = limit
	if limit == 0 || !s.e.running || !s.recOK || s.broken {
		return nil // checked at the next take
	}
	return touchGuest(fmt.Sprintf("srq %d: doorbell record", s.srqn), func() {
		if avail := s.rec.LoadUint32Acquire(abi.SRQDoorbellOffProd) - s.cons; avail <= s.size {
			s.checkLimit(avail)
		}
	})
}

// querySRQ implements QuerySRQ.
func (e *Engine) querySRQ(srqn uint32) (abi.SRQAttr, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.objs.srq(srqn)
	if s == nil {
		return abi.SRQAttr{}, statusErr(abi.StatusNotFound, "srq %d", srqn)
	}
	return s.attr(), nil
}

func (s *srq) attr() abi.SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return abi.SRQAttr{PDN: s.pdn, MaxWR: s.size, MaxSGE: s.maxSGE, Limit: s.limit}
}

// destroySRQ implements DestroySRQ.
func (e *Engine) destroySRQ(srqn uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.objs.srq(srqn)
	if s == nil {
		return statusErr(abi.StatusNotFound, "srq %d", srqn)
	}
	if s.refs > 0 {
		return statusErr(abi.StatusBusy, "srq %d is used by %d QPs", srqn, s.refs)
	}
	// No QP refers to s, so the data path cannot reach it; the gate only
	// orders the removal after passes that might still hold it.
	e.gate.Lock()
	e.objs.dropSRQ(s)
	e.gate.Unlock()
	s.ringPins.Release()
	return nil
}

// rebind moves s's ring onto the current memory table (see
// rebindMemory). A ring that left guest RAM puts the SRQ in error, as
// a runaway prod does. Caller holds mu and gate exclusively.
func (s *srq) rebind() {
	e := s.e
	size := uint64(s.size) * uint64(s.stride)
	v, err := e.guest.translateRing("srq ring", s.addr, size)
	s.ring, s.ringOK = v, err == nil
	s.ringPins.Release()
	if err != nil {
		e.log.Warn("srq ring left guest memory", "srqn", s.srqn, "err", err)
		if !s.broken {
			s.broken = true
			e.event(abi.EventSRQErr, s.srqn, 0)
		}
		return
	}
	e.repinRing(&s.ringPins, "srq ring", s.addr, size)
}
