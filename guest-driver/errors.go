package guestdriver

import (
	"errors"
	"fmt"
)

// Errors of the driver itself. Errors the device reports wrap an
// *abi.StatusError (errors.Is(err, abi.StatusNotFound)); failed work
// requests are not errors of any call but completions with a WCStatus.
var (
	// ErrQueueFull: a post found no free slot in the send or receive
	// queue (the device has not retired enough WQEs yet).
	ErrQueueFull = errors.New("guestdriver: work queue full")
	// ErrBadWR: a work request the driver refuses to post: more SGEs or
	// inline bytes than the QP was created with, an undefined opcode, an
	// atomic without exactly one 8-byte SGE.
	ErrBadWR = errors.New("guestdriver: invalid work request")
	// ErrClosed: the Device was closed; no more events arrive.
	ErrClosed = errors.New("guestdriver: device closed")
	// ErrCQError: the device reported the CQ in error (it overflowed).
	ErrCQError = errors.New("guestdriver: CQ in error")
	// ErrDevice: the device broke the ABI (a ring index running ahead,
	// an out-of-range doorbell index, a stride it was not asked for).
	ErrDevice = errors.New("guestdriver: device misbehaved")
	// ErrDestroyed: the object was destroyed.
	ErrDestroyed = errors.New("guestdriver: object destroyed")
)

// PostError reports which work request of a PostSend or PostRecv batch
// failed. The ones before it were posted; it and the ones after were not.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("guestdriver: work request %d: %v", e.Index, e.Err)
}

// Unwrap returns the cause (ErrQueueFull or ErrBadWR, wrapped).
func (e *PostError) Unwrap() error { return e.Err }
