package abi

import (
	"errors"
	"fmt"
	"math/bits"
	"testing"
)

// The RC ladder's required attributes, written out from the IB
// specification (and docs/spec.md), not taken from the package's table.
const (
	rcInitRequired = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	rcRTRRequired  = QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	rcRTSRequired  = QPAttrSQPSN | QPAttrMaxQPRdAtomic | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrTimeout
)

func attrTo(s QPState) *QPAttr { return &QPAttr{State: s} }

// eachBit calls f with every single bit set in m.
func eachBit(m QPAttrMask, f func(QPAttrMask)) {
	for m != 0 {
		b := QPAttrMask(1) << bits.TrailingZeros32(uint32(m))
		f(b)
		m &^= b
	}
}

func TestCheckModifyRCLadder(t *testing.T) {
	for _, step := range []struct {
		cur, next QPState
		mask      QPAttrMask
	}{
		{QPStateReset, QPStateInit, QPAttrState | rcInitRequired},
		{QPStateInit, QPStateRTR, QPAttrState | rcRTRRequired},
		{QPStateRTR, QPStateRTS, QPAttrState | rcRTSRequired},
	} {
		got, err := CheckModify(QPTypeRC, step.cur, step.mask, attrTo(step.next))
		if err != nil || got != step.next {
			t.Fatalf("%v -> %v: %v, %v", step.cur, step.next, got, err)
		}
		// Each required attribute missing.
		eachBit(step.mask&^QPAttrState, func(b QPAttrMask) {
			got, err := CheckModify(QPTypeRC, step.cur, step.mask&^b, attrTo(step.next))
			if !errors.Is(err, ErrBadValue) || got != step.cur || StatusFor(err) != StatusInvalidArgument {
				t.Errorf("%v -> %v without %#x: %v, %v", step.cur, step.next, uint32(b), got, err)
			}
		})
		// cur_qp_state matching the QP is allowed; a mismatch is not.
		if _, err := CheckModify(QPTypeRC, step.cur, step.mask|QPAttrCurState, &QPAttr{State: step.next, CurState: step.cur}); err != nil {
			t.Errorf("%v -> %v with matching cur_state: %v", step.cur, step.next, err)
		}
		wrong := (step.cur + 1) % numQPStates
		got, err = CheckModify(QPTypeRC, step.cur, step.mask|QPAttrCurState, &QPAttr{State: step.next, CurState: wrong})
		if !errors.Is(err, ErrBadValue) || got != step.cur {
			t.Errorf("%v -> %v with cur_state %v: %v, %v", step.cur, step.next, wrong, got, err)
		}
	}
}

// TestCheckModifyAttributeSets checks every bit of every RC transition:
// required bits must be there, optional ones may be, and every other
// defined bit is refused.
func TestCheckModifyAttributeSets(t *testing.T) {
	rtsOpt := QPAttrAccessFlags | QPAttrAltPath | QPAttrMinRNRTimer | QPAttrPathMigState
	for _, tr := range []struct {
		cur, next          QPState
		required, optional QPAttrMask
	}{
		{QPStateReset, QPStateInit, rcInitRequired, 0},
		{QPStateInit, QPStateInit, 0, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		{QPStateInit, QPStateRTR, rcRTRRequired, QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex},
		{QPStateRTR, QPStateRTS, rcRTSRequired, rtsOpt},
		{QPStateRTS, QPStateRTS, 0, rtsOpt},
		{QPStateRTS, QPStateSQD, 0, QPAttrEnSQDAsyncNotif},
		{QPStateSQD, QPStateRTS, 0, rtsOpt},
		{QPStateSQD, QPStateSQD, 0, QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry |
			QPAttrMaxQPRdAtomic | QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags |
			QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState},
	} {
		name := fmt.Sprintf("%v->%v", tr.cur, tr.next)
		base := QPAttrState | tr.required
		if _, err := CheckModify(QPTypeRC, tr.cur, base|tr.optional, attrTo(tr.next)); err != nil {
			t.Errorf("%s with every optional attribute: %v", name, err)
		}
		eachBit(tr.optional, func(b QPAttrMask) {
			if _, err := CheckModify(QPTypeRC, tr.cur, base|b, attrTo(tr.next)); err != nil {
				t.Errorf("%s with optional %#x: %v", name, uint32(b), err)
			}
		})
		extra := QPAttrAll &^ (QPAttrState | QPAttrCurState | tr.required | tr.optional)
		eachBit(extra, func(b QPAttrMask) {
			got, err := CheckModify(QPTypeRC, tr.cur, base|b, attrTo(tr.next))
			if !errors.Is(err, ErrBadValue) || got != tr.cur || StatusFor(err) != StatusInvalidArgument {
				t.Errorf("%s with extra %#x: %v, %v", name, uint32(b), got, err)
			}
		})
	}
}

func TestCheckModifyIllegalTransitions(t *testing.T) {
	legal := map[[2]QPState]bool{
		{QPStateReset, QPStateInit}: true, {QPStateInit, QPStateInit}: true, {QPStateInit, QPStateRTR}: true,
		{QPStateRTR, QPStateRTS}: true, {QPStateRTS, QPStateRTS}: true, {QPStateRTS, QPStateSQD}: true,
		{QPStateSQD, QPStateRTS}: true, {QPStateSQD, QPStateSQD}: true,
	}
	for cur := QPState(0); cur < numQPStates; cur++ {
		for next := QPState(0); next < numQPStates; next++ {
			if legal[[2]QPState{cur, next}] || next == QPStateReset || next == QPStateErr {
				continue
			}
			// Even with every attribute the state machine refuses it.
			got, err := CheckModify(QPTypeRC, cur, QPAttrAll, &QPAttr{State: next, CurState: cur})
			if !errors.Is(err, ErrBadTransition) || got != cur || StatusFor(err) != StatusBadState {
				t.Errorf("RC %v -> %v: %v, %v (status %v)", cur, next, got, err, StatusFor(err))
			}
		}
	}
	// The two the issue names.
	for _, c := range [][2]QPState{{QPStateReset, QPStateRTS}, {QPStateInit, QPStateRTS}} {
		if _, err := CheckModify(QPTypeRC, c[0], QPAttrState|rcRTSRequired, attrTo(c[1])); StatusFor(err) != StatusBadState {
			t.Errorf("%v -> %v: %v", c[0], c[1], err)
		}
	}
	// An unknown QP type has no transitions.
	if _, err := CheckModify(0, QPStateReset, QPAttrState|rcInitRequired, attrTo(QPStateInit)); !errors.Is(err, ErrBadTransition) {
		t.Errorf("QP type 0: %v", err)
	}
}

func TestCheckModifyToResetOrErr(t *testing.T) {
	for _, typ := range []QPType{QPTypeRC, QPTypeUD} {
		for cur := QPState(0); cur < numQPStates; cur++ {
			for _, next := range []QPState{QPStateReset, QPStateErr} {
				got, err := CheckModify(typ, cur, QPAttrState, attrTo(next))
				if err != nil || got != next {
					t.Errorf("%v %v -> %v: %v, %v", typ, cur, next, got, err)
				}
				if _, err := CheckModify(typ, cur, QPAttrState|QPAttrCurState, &QPAttr{State: next, CurState: cur}); err != nil {
					t.Errorf("%v %v -> %v with cur_state: %v", typ, cur, next, err)
				}
				// No other attribute rides along.
				got, err = CheckModify(typ, cur, QPAttrState|QPAttrQKey, attrTo(next))
				if !errors.Is(err, ErrBadValue) || got != cur {
					t.Errorf("%v %v -> %v with qkey: %v, %v", typ, cur, next, got, err)
				}
			}
		}
	}
	// A QP in RESET or ERR has no "stay" transition: qp_state is needed.
	for _, cur := range []QPState{QPStateReset, QPStateErr} {
		if _, err := CheckModify(QPTypeRC, cur, 0, &QPAttr{}); !errors.Is(err, ErrBadValue) {
			t.Errorf("%v with empty mask: %v", cur, err)
		}
	}
}

func TestCheckModifyMisc(t *testing.T) {
	// Without QPAttrState the target is the current state.
	if got, err := CheckModify(QPTypeRC, QPStateRTS, QPAttrMinRNRTimer, &QPAttr{State: QPStateReset}); err != nil || got != QPStateRTS {
		t.Errorf("RTS modify without state: %v, %v", got, err)
	}
	if got, err := CheckModify(QPTypeRC, QPStateInit, 0, &QPAttr{}); err != nil || got != QPStateInit {
		t.Errorf("INIT modify with empty mask: %v, %v", got, err)
	}
	// RTR has no RTR -> RTR transition.
	if _, err := CheckModify(QPTypeRC, QPStateRTR, 0, &QPAttr{}); !errors.Is(err, ErrBadTransition) {
		t.Errorf("RTR -> RTR: %v", err)
	}
	for _, s := range []QPState{7, 100, 0xffffffff} {
		got, err := CheckModify(QPTypeRC, QPStateInit, QPAttrState, attrTo(s))
		if !errors.Is(err, ErrBadValue) || got != QPStateInit {
			t.Errorf("target state %d: %v, %v", uint32(s), got, err)
		}
	}
	for _, m := range []QPAttrMask{1 << 21, 1 << 31} {
		if _, err := CheckModify(QPTypeRC, QPStateRTS, QPAttrState|m, attrTo(QPStateErr)); !errors.Is(err, ErrBadValue) {
			t.Errorf("undefined mask bit %#x: %v", uint32(m), err)
		}
	}
}

func TestCheckModifyUD(t *testing.T) {
	for _, c := range []struct {
		cur, next QPState
		mask      QPAttrMask
		err       error
	}{
		{QPStateReset, QPStateInit, QPAttrPKeyIndex | QPAttrPort | QPAttrQKey, nil},
		{QPStateReset, QPStateInit, QPAttrPKeyIndex | QPAttrPort, ErrBadValue},
		{QPStateReset, QPStateInit, QPAttrPKeyIndex | QPAttrPort | QPAttrQKey | QPAttrAccessFlags, ErrBadValue},
		{QPStateInit, QPStateRTR, 0, nil},
		{QPStateInit, QPStateRTR, QPAttrAV, ErrBadValue},
		{QPStateRTR, QPStateRTS, QPAttrSQPSN, nil},
		{QPStateRTR, QPStateRTS, 0, ErrBadValue},
		{QPStateSQE, QPStateRTS, QPAttrQKey, nil},
		{QPStateReset, QPStateRTR, 0, ErrBadTransition},
	} {
		_, err := CheckModify(QPTypeUD, c.cur, QPAttrState|c.mask, attrTo(c.next))
		if (c.err == nil) != (err == nil) || !errors.Is(err, c.err) {
			t.Errorf("UD %v -> %v mask %#x: %v, want %v", c.cur, c.next, uint32(c.mask), err, c.err)
		}
	}
	// SQE is a UD state: an RC QP never leaves it for RTS.
	if _, err := CheckModify(QPTypeRC, QPStateSQE, QPAttrState, attrTo(QPStateRTS)); !errors.Is(err, ErrBadTransition) {
		t.Errorf("RC SQE -> RTS: %v", err)
	}
}

func TestQPStateNames(t *testing.T) {
	for s, n := range []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"} {
		if QPState(s).String() != n || !QPState(s).Valid() {
			t.Errorf("state %d = %v", s, QPState(s))
		}
	}
	if QPState(7).Valid() || QPState(7).String() != "QPState(7)" {
		t.Errorf("state 7")
	}
}
