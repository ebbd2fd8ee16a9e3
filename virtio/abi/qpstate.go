package abi

import "fmt"

// The QP state machine of the IB specification (o10-2.2 and the kernel's
// ib_modify_qp_is_ok table): which transitions MODIFY_QP may request and,
// for each, which attributes it must carry and which it may carry. The
// device checks every MODIFY_QP against it; the driver can check before it
// sends.

type transition struct {
	ok       bool
	required QPAttrMask
	optional QPAttrMask
}

type transitionKey struct {
	typ      QPType
	cur, nxt QPState
}

// Attribute sets used by several transitions.
const (
	rtsOptional = QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrMinRNRTimer | QPAttrPathMigState
	sqdOptional = QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic |
		QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer |
		QPAttrPathMigState
)

var transitions = map[transitionKey]transition{
	// RC
	{QPTypeRC, QPStateReset, QPStateInit}: {true, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags, 0},
	{QPTypeRC, QPStateInit, QPStateInit}:  {true, 0, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
	{QPTypeRC, QPStateInit, QPStateRTR}: {true,
		QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
		QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex},
	{QPTypeRC, QPStateRTR, QPStateRTS}: {true,
		QPAttrSQPSN | QPAttrMaxQPRdAtomic | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrTimeout,
		rtsOptional},
	{QPTypeRC, QPStateRTS, QPStateRTS}: {true, 0, rtsOptional},
	{QPTypeRC, QPStateRTS, QPStateSQD}: {true, 0, QPAttrEnSQDAsyncNotif},
	{QPTypeRC, QPStateSQD, QPStateRTS}: {true, 0, rtsOptional},
	{QPTypeRC, QPStateSQD, QPStateSQD}: {true, 0, sqdOptional},
	// UD (reserved: the device does not create UD QPs yet, but the table
	// is the specification's)
	{QPTypeUD, QPStateReset, QPStateInit}: {true, QPAttrPKeyIndex | QPAttrPort | QPAttrQKey, 0},
	{QPTypeUD, QPStateInit, QPStateInit}:  {true, 0, QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
	{QPTypeUD, QPStateInit, QPStateRTR}:   {true, 0, QPAttrPKeyIndex | QPAttrQKey},
	{QPTypeUD, QPStateRTR, QPStateRTS}:    {true, QPAttrSQPSN, QPAttrCurState | QPAttrQKey},
	{QPTypeUD, QPStateRTS, QPStateRTS}:    {true, 0, QPAttrCurState | QPAttrQKey},
	{QPTypeUD, QPStateRTS, QPStateSQD}:    {true, 0, QPAttrEnSQDAsyncNotif},
	{QPTypeUD, QPStateSQD, QPStateRTS}:    {true, 0, QPAttrCurState | QPAttrQKey},
	{QPTypeUD, QPStateSQD, QPStateSQD}:    {true, 0, QPAttrPKeyIndex | QPAttrQKey},
	{QPTypeUD, QPStateSQE, QPStateRTS}:    {true, 0, QPAttrCurState | QPAttrQKey},
}

// CheckModify checks a MODIFY_QP of a QP of type typ in state cur. The
// target state is attr.State when mask has QPAttrState, else cur. Any
// state may go to RESET or ERR with no other attributes; otherwise the
// transition must be in the table, carry all its required attributes and
// nothing outside required|optional. QPAttrCurState, when given, must
// equal cur. It returns the target state.
//
// It checks the shape of the request only; values (MTU, port, PSN ranges,
// limits) are the device's to check.
func CheckModify(typ QPType, cur QPState, mask QPAttrMask, attr *QPAttr) (QPState, error) {
	if mask&^QPAttrAll != 0 {
		return cur, fmt.Errorf("attr_mask %#x: undefined bits: %w", uint32(mask), ErrBadValue)
	}
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.State
		if !next.Valid() {
			return cur, fmt.Errorf("qp_state %d: %w", uint32(next), ErrBadValue)
		}
	}
	if mask&QPAttrCurState != 0 && attr.CurState != cur {
		return cur, fmt.Errorf("cur_qp_state %v, QP is %v: %w", attr.CurState, cur, ErrBadValue)
	}
	attrs := mask &^ (QPAttrState | QPAttrCurState)
	if next == QPStateReset || next == QPStateErr {
		if mask&QPAttrState == 0 {
			return cur, fmt.Errorf("%v -> %v without qp_state: %w", cur, next, ErrBadValue)
		}
		if attrs != 0 {
			return cur, fmt.Errorf("%v -> %v with attributes %#x: %w", cur, next, uint32(attrs), ErrBadValue)
		}
		return next, nil
	}
	t, ok := transitions[transitionKey{typ, cur, next}]
	if !ok {
		return cur, fmt.Errorf("%v QP: %v -> %v: %w", typ, cur, next, ErrBadTransition)
	}
	if miss := t.required &^ mask; miss != 0 {
		return cur, fmt.Errorf("%v QP: %v -> %v lacks attributes %#x: %w", typ, cur, next, uint32(miss), ErrBadValue)
	}
	allowed := t.required | t.optional | QPAttrState | QPAttrCurState
	if extra := mask &^ allowed; extra != 0 {
		return cur, fmt.Errorf("%v QP: %v -> %v does not take attributes %#x: %w", typ, cur, next, uint32(extra), ErrBadValue)
	}
	return next, nil
}
