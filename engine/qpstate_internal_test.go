package engine

import (
	"errors"
	"testing"

	"github.com/vstellar/vstellar/virtio/abi"
)

var allQPStates = []abi.QPState{
	abi.QPStateReset, abi.QPStateInit, abi.QPStateRTR, abi.QPStateRTS,
	abi.QPStateSQD, abi.QPStateSQE, abi.QPStateErr,
}

// TestQPStateFail: the data path's move to ERR succeeds from every state
// but RESET and ERR, and only once.
func TestQPStateFail(t *testing.T) {
	for _, from := range allQPStates {
		var s qpState
		s.v.Store(uint32(from))
		want := from != abi.QPStateReset && from != abi.QPStateErr
		if got := s.fail(); got != want {
			t.Errorf("fail from %v: %v, want %v", from, got, want)
		}
		end := abi.QPStateErr
		if from == abi.QPStateReset {
			end = abi.QPStateReset
		}
		if s.get() != end {
			t.Errorf("fail from %v: state %v, want %v", from, s.get(), end)
		}
		if s.fail() {
			t.Errorf("fail from %v: a second fail moved it again", from)
		}
	}
}

// TestQPStateTransitions walks the control path's transitions: check
// against the table, then move from the state checked. A move loses to a
// fail in between, and then leaves ERR alone.
func TestQPStateTransitions(t *testing.T) {
	initAttrs := abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags
	rtrAttrs := abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN | abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer
	rtsAttrs := abi.QPAttrSQPSN | abi.QPAttrMaxQPRdAtomic | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry | abi.QPAttrTimeout
	cases := []struct {
		from, to abi.QPState
		mask     abi.QPAttrMask // besides QPAttrState
		failed   bool           // the data path fails the QP between check and move
		err      error          // from check
		serving  bool           // in the state reached
	}{
		{from: abi.QPStateReset, to: abi.QPStateInit, mask: initAttrs},
		{from: abi.QPStateInit, to: abi.QPStateRTR, mask: rtrAttrs, serving: true},
		{from: abi.QPStateRTR, to: abi.QPStateRTS, mask: rtsAttrs, serving: true},
		{from: abi.QPStateRTS, to: abi.QPStateSQD, serving: true},
		{from: abi.QPStateSQD, to: abi.QPStateRTS, serving: true},
		{from: abi.QPStateRTS, to: abi.QPStateErr},
		{from: abi.QPStateErr, to: abi.QPStateReset},
		{from: abi.QPStateInit, to: abi.QPStateReset},
		{from: abi.QPStateReset, to: abi.QPStateRTS, mask: rtsAttrs, err: abi.ErrBadTransition},
		{from: abi.QPStateInit, to: abi.QPStateRTR, err: abi.ErrBadValue},                 // required attributes missing
		{from: abi.QPStateRTS, to: abi.QPStateErr, mask: initAttrs, err: abi.ErrBadValue}, // ERR takes none
		{from: abi.QPStateErr, to: abi.QPStateRTS, err: abi.ErrBadTransition},
		{from: abi.QPStateRTR, to: abi.QPStateRTS, mask: rtsAttrs, failed: true},
		{from: abi.QPStateRTS, to: abi.QPStateSQD, failed: true},
	}
	for _, c := range cases {
		var s qpState
		s.v.Store(uint32(c.from))
		cur, next, err := s.check(abi.QPAttrState|c.mask, &abi.QPAttr{State: c.to})
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%v -> %v (mask %#x): %v, want %v", c.from, c.to, uint32(c.mask), err, c.err)
			}
			if s.get() != c.from {
				t.Errorf("%v -> %v: a refused check changed the state to %v", c.from, c.to, s.get())
			}
			continue
		}
		if err != nil || cur != c.from || next != c.to {
			t.Errorf("%v -> %v: check gave %v -> %v, %v", c.from, c.to, cur, next, err)
			continue
		}
		if c.failed {
			s.fail()
			if s.move(cur, next) || s.get() != abi.QPStateErr {
				t.Errorf("%v -> %v after a fail: moved, state %v", c.from, c.to, s.get())
			}
			continue
		}
		if !s.move(cur, next) || s.get() != c.to {
			t.Errorf("%v -> %v: move failed, state %v", c.from, c.to, s.get())
		}
		if s.serving() != c.serving {
			t.Errorf("%v: serving %v", c.to, s.serving())
		}
	}
	var s qpState
	s.v.Store(uint32(abi.QPStateRTS))
	s.reset()
	if s.get() != abi.QPStateReset || s.fail() {
		t.Errorf("after reset: state %v, or fail moved it", s.get())
	}
}
