package abi

import (
	"errors"
	"fmt"
)

// Status is the result of a control command, the first field of every
// response. Status implements error so that errors.Is(err, StatusNotFound)
// works on errors the guest driver returns.
type Status uint32

// Status codes. Values are ABI: never renumber, only append.
const (
	// StatusOK: the command was executed.
	StatusOK Status = 0
	// StatusInvalidOpcode: the opcode is not defined by the ABI.
	StatusInvalidOpcode Status = 1
	// StatusInvalidArgument: the request is malformed (length, reserved
	// field, flags) or a field is out of range.
	StatusInvalidArgument Status = 2
	// StatusResponseTooSmall: the device-writable part of the chain cannot
	// hold the command's response. The command was not executed.
	StatusResponseTooSmall Status = 3
	// StatusNotSupported: the opcode is defined but this device does not
	// implement it, or it needs a feature that was not negotiated.
	StatusNotSupported Status = 4
	// StatusNoResources: a per-device limit (config space) or host
	// resource is exhausted.
	StatusNoResources Status = 5
	// StatusNotFound: a handle (PD, CQ, QP, MR, AH, GID index) does not
	// name a live object of this device.
	StatusNotFound Status = 6
	// StatusBusy: the object is still in use (a CQ bound to a QP, a PD
	// with objects).
	StatusBusy Status = 7
	// StatusPermission: access flags or protection domains forbid it.
	StatusPermission Status = 8
	// StatusBadState: the object's state forbids it (illegal QP state
	// transition, doorbell area already registered).
	StatusBadState Status = 9
	// StatusBadAddress: a guest address or range lies outside guest RAM,
	// or in IO memory.
	StatusBadAddress Status = 10
	// StatusDeviceError: the device failed internally; the command may be
	// retried.
	StatusDeviceError Status = 11
)

var statusNames = [...]string{
	StatusOK:               "OK",
	StatusInvalidOpcode:    "INVALID_OPCODE",
	StatusInvalidArgument:  "INVALID_ARGUMENT",
	StatusResponseTooSmall: "RESPONSE_TOO_SMALL",
	StatusNotSupported:     "NOT_SUPPORTED",
	StatusNoResources:      "NO_RESOURCES",
	StatusNotFound:         "NOT_FOUND",
	StatusBusy:             "BUSY",
	StatusPermission:       "PERMISSION",
	StatusBadState:         "BAD_STATE",
	StatusBadAddress:       "BAD_ADDRESS",
	StatusDeviceError:      "DEVICE_ERROR",
}

// Known reports whether s is a status this ABI defines.
func (s Status) Known() bool { return uint64(s) < uint64(len(statusNames)) }

func (s Status) String() string {
	if s.Known() {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS_%d", uint32(s))
}

// Error makes a Status usable as an error value (and as an errors.Is
// target).
func (s Status) Error() string { return "vstellar status " + s.String() }

// StatusError is a non-OK response to a command.
type StatusError struct {
	Op     Opcode
	Status Status
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("vstellar %v: %s", e.Op, e.Status.String())
}

// Unwrap lets errors.Is(err, StatusNotFound) see the status.
func (e *StatusError) Unwrap() error { return e.Status }

// CheckStatus returns nil for StatusOK and a *StatusError otherwise.
func CheckStatus(op Opcode, s Status) error {
	if s == StatusOK {
		return nil
	}
	return &StatusError{Op: op, Status: s}
}

// StatusFor maps a decoding error from this package to the status the
// device answers with: an unknown opcode is INVALID_OPCODE, any other
// malformed request INVALID_ARGUMENT, nil OK. An error that is not a
// decoding error is DEVICE_ERROR, because the guest did nothing wrong.
func StatusFor(err error) Status {
	var st Status
	switch {
	case err == nil:
		return StatusOK
	case errors.As(err, &st):
		return st
	case errors.Is(err, ErrUnknownOpcode):
		return StatusInvalidOpcode
	case errors.Is(err, ErrBadTransition):
		return StatusBadState
	case errors.Is(err, ErrShortBuffer), errors.Is(err, ErrBadLength),
		errors.Is(err, ErrReservedNonZero), errors.Is(err, ErrBadValue):
		return StatusInvalidArgument
	}
	return StatusDeviceError
}
