package abi

import "errors"

// Decoding errors, always returned wrapped with detail. [StatusFor] maps
// them to the status the device answers with.
var (
	// ErrShortBuffer: fewer bytes than the structure needs.
	ErrShortBuffer = errors.New("abi: buffer too short")
	// ErrBadLength: a length that is not the one the structure or command
	// defines (trailing bytes, oversized request).
	ErrBadLength = errors.New("abi: bad length")
	// ErrReservedNonZero: a reserved field of a driver-written structure
	// is not zero.
	ErrReservedNonZero = errors.New("abi: reserved field not zero")
	// ErrUnknownOpcode: the opcode is not defined by this ABI.
	ErrUnknownOpcode = errors.New("abi: unknown opcode")
	// ErrBadValue: a field holds a value outside its defined range.
	ErrBadValue = errors.New("abi: value out of range")
	// ErrVersion: the ABI major version is not one this code speaks.
	ErrVersion = errors.New("abi: unsupported ABI version")
)

// ErrBadTransition: a MODIFY_QP asks for a state change the QP state
// machine does not have. The device answers StatusBadState.
var ErrBadTransition = errors.New("abi: illegal QP state transition")
