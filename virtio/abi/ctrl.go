package abi

import (
	"encoding/binary"
	"fmt"
)

// Control-queue framing. A command is one descriptor chain: the
// device-readable part holds a RequestHeader followed by the command's
// request payload; the device-writable part receives a ResponseHeader
// followed, on success, by the command's response payload. The used length
// the device reports is the number of response bytes it wrote.
//
//	request  (driver -> device)        response (device -> driver)
//	0x00 le32 opcode                   0x00 le32 status
//	0x04 le32 flags (must be 0)        0x04 le32 reserved (0)
//	0x08 payload                       0x08 payload (only if status == OK)
const (
	RequestHeaderSize  = 8
	ResponseHeaderSize = 8

	// MaxRequestSize bounds the device-readable part of a control chain.
	// The device copies a request out of guest memory before it looks at
	// it; this cap keeps a hostile chain from making it copy much.
	// Commands that need large inputs (page lists) point at guest memory
	// instead of carrying them inline.
	MaxRequestSize = 4096
	// MaxResponseSize bounds every response the device writes.
	MaxResponseSize = 4096
)

// Offsets of the header fields.
const (
	reqOffOpcode   = 0
	reqOffFlags    = 4
	respOffStatus  = 0
	respOffReserve = 4
)

// RequestHeader starts every control request.
type RequestHeader struct {
	Opcode Opcode
	// Flags is reserved and must be zero.
	Flags uint32
}

// AppendBinary appends the encoded header to b.
func (h RequestHeader) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Opcode))
	return binary.LittleEndian.AppendUint32(b, h.Flags), nil
}

// MarshalBinary encodes the header.
func (h RequestHeader) MarshalBinary() ([]byte, error) {
	return h.AppendBinary(make([]byte, 0, RequestHeaderSize))
}

// UnmarshalBinary decodes exactly RequestHeaderSize bytes. It checks the
// reserved flags but not the opcode; [DecodeRequest] does both.
func (h *RequestHeader) UnmarshalBinary(b []byte) error {
	if len(b) != RequestHeaderSize {
		return fmt.Errorf("request header: %d bytes, want %d: %w", len(b), RequestHeaderSize, lenErr(len(b), RequestHeaderSize))
	}
	h.Opcode = Opcode(binary.LittleEndian.Uint32(b[reqOffOpcode:]))
	h.Flags = binary.LittleEndian.Uint32(b[reqOffFlags:])
	if h.Flags != 0 {
		return fmt.Errorf("request header flags %#x: %w", h.Flags, ErrReservedNonZero)
	}
	return nil
}

// ResponseHeader starts every control response.
type ResponseHeader struct {
	Status Status
	// Reserved is written as zero by the device and ignored by the driver.
	Reserved uint32
}

// AppendBinary appends the encoded header to b.
func (h ResponseHeader) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Status))
	return binary.LittleEndian.AppendUint32(b, h.Reserved), nil
}

// MarshalBinary encodes the header.
func (h ResponseHeader) MarshalBinary() ([]byte, error) {
	return h.AppendBinary(make([]byte, 0, ResponseHeaderSize))
}

// UnmarshalBinary decodes exactly ResponseHeaderSize bytes.
func (h *ResponseHeader) UnmarshalBinary(b []byte) error {
	if len(b) != ResponseHeaderSize {
		return fmt.Errorf("response header: %d bytes, want %d: %w", len(b), ResponseHeaderSize, lenErr(len(b), ResponseHeaderSize))
	}
	h.Status = Status(binary.LittleEndian.Uint32(b[respOffStatus:]))
	h.Reserved = binary.LittleEndian.Uint32(b[respOffReserve:])
	return nil
}

// Request is a decoded control request. Payload aliases the buffer given
// to DecodeRequest, which must be the device's private copy of the guest's
// bytes.
type Request struct {
	Header  RequestHeader
	Payload []byte
}

// DecodeRequest validates the framing of a control request copied out of
// guest memory: length bounds, reserved flags, a known opcode, and, for
// opcodes this ABI edition specifies, the exact payload length. On
// ErrUnknownOpcode (and the other errors once the header has been read)
// the returned Request still carries the header, so the caller can log
// and count the opcode. Command payloads are decoded by their own types.
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if len(b) < RequestHeaderSize {
		return r, fmt.Errorf("request of %d bytes: %w", len(b), ErrShortBuffer)
	}
	if len(b) > MaxRequestSize {
		return r, fmt.Errorf("request of %d bytes exceeds %d: %w", len(b), MaxRequestSize, ErrBadLength)
	}
	err := r.Header.UnmarshalBinary(b[:RequestHeaderSize])
	r.Payload = b[RequestHeaderSize:]
	if err != nil {
		return r, err
	}
	op := r.Header.Opcode
	if !op.Known() {
		return r, fmt.Errorf("opcode %d: %w", uint32(op), ErrUnknownOpcode)
	}
	if want, ok := op.RequestSize(); ok && len(r.Payload) != want {
		return r, fmt.Errorf("%v payload of %d bytes, want %d: %w", op, len(r.Payload), want, lenErr(len(r.Payload), want))
	}
	return r, nil
}

// AppendRequest appends a request for op with the given (already encoded)
// payload to b. The driver side uses it; it does not check the payload.
func AppendRequest(b []byte, op Opcode, payload []byte) []byte {
	b, _ = RequestHeader{Opcode: op}.AppendBinary(b)
	return append(b, payload...)
}

// AppendResponse appends a response with status s and payload to b.
func AppendResponse(b []byte, s Status, payload []byte) []byte {
	b, _ = ResponseHeader{Status: s}.AppendBinary(b)
	return append(b, payload...)
}

// DecodeResponse splits the bytes the device wrote (the used length of the
// chain) into status and payload. It fails only when the header itself is
// missing; a non-OK status is returned as a Status, not an error, so the
// caller can wrap it with the opcode ([CheckStatus]).
func DecodeResponse(b []byte) (Status, []byte, error) {
	if len(b) < ResponseHeaderSize {
		return 0, nil, fmt.Errorf("response of %d bytes: %w", len(b), ErrShortBuffer)
	}
	var h ResponseHeader
	if err := h.UnmarshalBinary(b[:ResponseHeaderSize]); err != nil {
		return 0, nil, err
	}
	return h.Status, b[ResponseHeaderSize:], nil
}

// lenErr picks ErrShortBuffer for too few bytes and ErrBadLength for too
// many.
func lenErr(got, want int) error {
	if got < want {
		return ErrShortBuffer
	}
	return ErrBadLength
}
