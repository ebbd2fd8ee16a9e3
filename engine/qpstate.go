package engine

import (
	"sync/atomic"

	"github.com/vstellar/vstellar/virtio/abi"
)

// qpState is a QP's state (abi.QPState), which every path reads without
// a lock. Two writers share it, and the rules below are what keep either
// from undoing the other:
//   - The control path (under Engine.mu) moves it only from the state it
//     checked the transition against (check, the IB table of
//     abi.CheckModify), by compare-and-swap: if the data path moved it
//     meanwhile, the MODIFY_QP fails instead of overriding that.
//   - The data path only ever moves it to ERR (fail), and never out of
//     RESET (a QP on its way in or out) or ERR: one move, one event.
//   - RESET is stored outright (reset), only with the gate held
//     exclusively, where no pass or responder runs.
type qpState struct{ v atomic.Uint32 }

func (s *qpState) get() abi.QPState { return abi.QPState(s.v.Load()) }

// check checks a MODIFY_QP of an RC QP against the current state and
// returns that state and the target (see abi.CheckModify).
func (s *qpState) check(mask abi.QPAttrMask, a *abi.QPAttr) (cur, next abi.QPState, err error) {
	cur = s.get()
	next, err = abi.CheckModify(abi.QPTypeRC, cur, mask, a)
	return cur, next, err
}

// move changes the state from cur, the one check saw, to next. It fails
// if the data path has moved the QP to ERR since.
func (s *qpState) move(cur, next abi.QPState) bool {
	return s.v.CompareAndSwap(uint32(cur), uint32(next))
}

// fail moves the state to ERR for the data path, and reports whether it
// did: false if it was in RESET or ERR already.
func (s *qpState) fail() bool {
	for {
		cur := s.v.Load()
		if st := abi.QPState(cur); st == abi.QPStateErr || st == abi.QPStateReset {
			return false
		}
		if s.v.CompareAndSwap(cur, uint32(abi.QPStateErr)) {
			return true
		}
	}
}

// reset returns the state to RESET. Caller holds the gate exclusively.
func (s *qpState) reset() { s.v.Store(uint32(abi.QPStateReset)) }

// serving reports whether the QP takes requests: RTR, RTS or SQD.
func (s *qpState) serving() bool {
	switch s.get() {
	case abi.QPStateRTR, abi.QPStateRTS, abi.QPStateSQD:
		return true
	}
	return false
}
