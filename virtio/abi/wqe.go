package abi

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Work queue and completion queue entries. The driver writes WQEs into
// rings in guest memory and the device reads them; the device writes CQEs
// and the driver reads them. The device copies a WQE out of guest memory
// before decoding it, so a guest rewriting it concurrently cannot change it
// between check and use. The hot path decodes these by hand (no
// reflection, no allocation).

// SGE is one scatter/gather element: Length bytes at IOVA Addr of the MR
// whose lkey is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SGESize is the encoded size of an SGE.
const SGESize = 16

// DecodeSGE decodes the SGE at the start of b (len(b) >= SGESize).
func DecodeSGE(b []byte) SGE {
	return SGE{
		Addr:   binary.LittleEndian.Uint64(b[0:]),
		Length: binary.LittleEndian.Uint32(b[8:]),
		LKey:   binary.LittleEndian.Uint32(b[12:]),
	}
}

// Put encodes s at the start of b.
func (s SGE) Put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], s.Addr)
	binary.LittleEndian.PutUint32(b[8:], s.Length)
	binary.LittleEndian.PutUint32(b[12:], s.LKey)
}

// Send WQE layout: a 64-byte header followed by NumSGE SGEs, or, with
// SendInline, InlineLen bytes of payload.
//
//	0x00 le64 wr_id
//	0x08 u8   opcode (WROpcode)
//	0x09 u8   flags (Send*)
//	0x0a le16 num_sge
//	0x0c le32 imm_data        (WITH_IMM opcodes)
//	0x10 le64 remote_addr     (RDMA and atomic opcodes)
//	0x18 le32 rkey
//	0x1c le32 inline_len      (SendInline)
//	0x20 le64 compare_add     (CMP_SWAP: compare; FETCH_ADD: add)
//	0x28 le64 swap            (CMP_SWAP)
//	0x30 le32 ah              (UD, reserved for RC)
//	0x34 le32 remote_qpn      (UD, reserved for RC)
//	0x38 le32 remote_qkey     (UD, reserved for RC)
//	0x3c le32 reserved
//	0x40 SGEs or inline data
const (
	SendWQEHeaderSize = 64
	RecvWQEHeaderSize = 16
	CQESize           = 32
)

// SendWQEStride is the size of one send WQE slot for a QP created with
// maxSGE SGEs and maxInline inline bytes: the header plus the larger of
// the two payloads, rounded up to a power of two (so slots never straddle
// the ring's end and index arithmetic is a mask).
func SendWQEStride(maxSGE, maxInline uint32) uint32 {
	payload := uint64(maxSGE) * SGESize
	if uint64(maxInline) > payload {
		payload = uint64(maxInline)
	}
	return pow2(SendWQEHeaderSize + payload)
}

// RecvWQEStride is the size of one receive WQE slot for maxSGE SGEs.
func RecvWQEStride(maxSGE uint32) uint32 {
	return pow2(RecvWQEHeaderSize + uint64(maxSGE)*SGESize)
}

// pow2 rounds n up to a power of two; n is at most a few KiB here.
func pow2(n uint64) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(n-1)
}

// SendWQE is a decoded send work request header. The SGEs (or inline
// bytes) follow it in the slot.
type SendWQE struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      uint8
	NumSGE     uint16
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	InlineLen  uint32
	CompareAdd uint64
	Swap       uint64
	AH         uint32
	RemoteQPN  uint32
	RemoteQKey uint32
}

// DecodeSendWQE decodes the header of a send WQE slot and checks it
// against the QP's limits: a defined opcode and flags, at most maxSGE
// SGEs (num_sge is ignored with INLINE), inline only up to maxInline and
// only for SEND and WRITE opcodes, exactly one SGE for atomics. It does
// not know the QP type: the UD fields (ah, remote_qpn, remote_qkey) are
// ignored for RC. The slot must be at least SendWQEHeaderSize bytes.
func DecodeSendWQE(b []byte, maxSGE, maxInline uint32) (SendWQE, error) {
	if len(b) < SendWQEHeaderSize {
		return SendWQE{}, fmt.Errorf("send wqe of %d bytes: %w", len(b), ErrShortBuffer)
	}
	le := binary.LittleEndian
	w := SendWQE{
		WRID:       le.Uint64(b[0x00:]),
		Opcode:     WROpcode(b[0x08]),
		Flags:      b[0x09],
		NumSGE:     le.Uint16(b[0x0a:]),
		Imm:        le.Uint32(b[0x0c:]),
		RemoteAddr: le.Uint64(b[0x10:]),
		RKey:       le.Uint32(b[0x18:]),
		InlineLen:  le.Uint32(b[0x1c:]),
		CompareAdd: le.Uint64(b[0x20:]),
		Swap:       le.Uint64(b[0x28:]),
		AH:         le.Uint32(b[0x30:]),
		RemoteQPN:  le.Uint32(b[0x34:]),
		RemoteQKey: le.Uint32(b[0x38:]),
	}
	switch {
	case !w.Opcode.Valid():
		return w, fmt.Errorf("send wqe opcode %d: %w", uint8(w.Opcode), ErrBadValue)
	case w.Flags&^sendFlagsAll != 0:
		return w, fmt.Errorf("send wqe flags %#x: %w", w.Flags, ErrBadValue)
	case le.Uint32(b[0x3c:]) != 0:
		return w, fmt.Errorf("send wqe: %w", ErrReservedNonZero)
	}
	if w.Flags&SendInline != 0 {
		switch {
		case w.Opcode != WRSend && w.Opcode != WRSendWithImm && w.Opcode != WRRDMAWrite && w.Opcode != WRRDMAWriteWithImm:
			return w, fmt.Errorf("send wqe: inline %v: %w", w.Opcode, ErrBadValue)
		case w.InlineLen > maxInline || uint64(w.InlineLen) > uint64(len(b)-SendWQEHeaderSize):
			return w, fmt.Errorf("send wqe: %d inline bytes, at most %d: %w", w.InlineLen, maxInline, ErrBadValue)
		}
	} else {
		if w.InlineLen != 0 {
			return w, fmt.Errorf("send wqe: inline_len without INLINE: %w", ErrReservedNonZero)
		}
		if uint32(w.NumSGE) > maxSGE || uint64(w.NumSGE)*SGESize > uint64(len(b)-SendWQEHeaderSize) {
			return w, fmt.Errorf("send wqe: %d SGEs, at most %d: %w", w.NumSGE, maxSGE, ErrBadValue)
		}
	}
	if w.Opcode.IsAtomic() && (w.NumSGE != 1 || w.Flags&SendInline != 0) {
		return w, fmt.Errorf("send wqe: %v needs exactly one 8-byte SGE: %w", w.Opcode, ErrBadValue)
	}
	return w, nil
}

// Put encodes the header of w at the start of b (len(b) >=
// SendWQEHeaderSize). The driver writes the SGEs or inline data after it.
func (w SendWQE) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0x00:], w.WRID)
	b[0x08] = uint8(w.Opcode)
	b[0x09] = w.Flags
	le.PutUint16(b[0x0a:], w.NumSGE)
	le.PutUint32(b[0x0c:], w.Imm)
	le.PutUint64(b[0x10:], w.RemoteAddr)
	le.PutUint32(b[0x18:], w.RKey)
	le.PutUint32(b[0x1c:], w.InlineLen)
	le.PutUint64(b[0x20:], w.CompareAdd)
	le.PutUint64(b[0x28:], w.Swap)
	le.PutUint32(b[0x30:], w.AH)
	le.PutUint32(b[0x34:], w.RemoteQPN)
	le.PutUint32(b[0x38:], w.RemoteQKey)
	le.PutUint32(b[0x3c:], 0)
}

// Receive WQE layout: a 16-byte header followed by NumSGE SGEs.
//
//	0x00 le64 wr_id
//	0x08 le16 num_sge
//	0x0a le16 reserved
//	0x0c le32 reserved
//	0x10 SGEs

// RecvWQE is a decoded receive work request header.
type RecvWQE struct {
	WRID   uint64
	NumSGE uint16
}

// DecodeRecvWQE decodes the header of a receive WQE slot and checks its
// SGE count against maxSGE and the slot.
func DecodeRecvWQE(b []byte, maxSGE uint32) (RecvWQE, error) {
	if len(b) < RecvWQEHeaderSize {
		return RecvWQE{}, fmt.Errorf("recv wqe of %d bytes: %w", len(b), ErrShortBuffer)
	}
	le := binary.LittleEndian
	w := RecvWQE{WRID: le.Uint64(b[0:]), NumSGE: le.Uint16(b[8:])}
	if le.Uint16(b[0x0a:]) != 0 || le.Uint32(b[0x0c:]) != 0 {
		return w, fmt.Errorf("recv wqe: %w", ErrReservedNonZero)
	}
	if uint32(w.NumSGE) > maxSGE || uint64(w.NumSGE)*SGESize > uint64(len(b)-RecvWQEHeaderSize) {
		return w, fmt.Errorf("recv wqe: %d SGEs, at most %d: %w", w.NumSGE, maxSGE, ErrBadValue)
	}
	return w, nil
}

// Put encodes the header of w at the start of b.
func (w RecvWQE) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], w.WRID)
	le.PutUint16(b[8:], w.NumSGE)
	le.PutUint16(b[0x0a:], 0)
	le.PutUint32(b[0x0c:], 0)
}

// CQE layout (CQESize bytes):
//
//	0x00 le64 wr_id
//	0x08 u8   status (WCStatus)
//	0x09 u8   opcode (WCOpcode)
//	0x0a le16 flags (WCWithImm)
//	0x0c le32 byte_len
//	0x10 le32 imm_data
//	0x14 le32 qp_num
//	0x18 le32 src_qp
//	0x1c le32 vendor_err

// CQE is one completion.
type CQE struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	Flags     uint16
	ByteLen   uint32
	Imm       uint32
	QPN       uint32
	SrcQP     uint32
	VendorErr uint32
}

// Put encodes c into b (len(b) >= CQESize).
func (c CQE) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0x00:], c.WRID)
	b[0x08] = uint8(c.Status)
	b[0x09] = uint8(c.Opcode)
	le.PutUint16(b[0x0a:], c.Flags)
	le.PutUint32(b[0x0c:], c.ByteLen)
	le.PutUint32(b[0x10:], c.Imm)
	le.PutUint32(b[0x14:], c.QPN)
	le.PutUint32(b[0x18:], c.SrcQP)
	le.PutUint32(b[0x1c:], c.VendorErr)
}

// DecodeCQE decodes the CQE at the start of b (len(b) >= CQESize). The
// device wrote it; the driver does not need to validate it beyond that.
func DecodeCQE(b []byte) CQE {
	le := binary.LittleEndian
	return CQE{
		WRID:      le.Uint64(b[0x00:]),
		Status:    WCStatus(b[0x08]),
		Opcode:    WCOpcode(b[0x09]),
		Flags:     le.Uint16(b[0x0a:]),
		ByteLen:   le.Uint32(b[0x0c:]),
		Imm:       le.Uint32(b[0x10:]),
		QPN:       le.Uint32(b[0x14:]),
		SrcQP:     le.Uint32(b[0x18:]),
		VendorErr: le.Uint32(b[0x1c:]),
	}
}
