package wire

import (
	"encoding/binary"
	"slices"
)

// AppendData appends a DATA packet (header, DATA part, payload) to dst and
// returns the extended slice. It sets h.Type to TypeData and d.PayloadLen
// to len(payload), so the structs describe what went out; every other field
// is written as given. It does not allocate when dst has room for
// HeaderLen+DataLen+len(payload) more bytes.
//
// A payload longer than 65535 bytes cannot be expressed and is a caller bug
// (payload sizes come from the MTU, not from peers): AppendData panics.
func AppendData(dst []byte, h *Header, d *Data, payload []byte) []byte {
	if len(payload) > maxPayload {
		panic("wire: AppendData payload longer than 65535 bytes")
	}
	h.Type = TypeData
	d.PayloadLen = uint16(len(payload))
	n := len(dst)
	dst = slices.Grow(dst, HeaderLen+DataLen+len(payload))[:n+HeaderLen+DataLen]
	putHeader(dst[n:n+HeaderLen], h, h.PSN)
	b := dst[n+HeaderLen : n+HeaderLen+DataLen]
	b[0] = byte(d.Op)
	b[1] = 0
	binary.BigEndian.PutUint16(b[2:], d.PayloadLen)
	binary.BigEndian.PutUint32(b[4:], d.MSN)
	binary.BigEndian.PutUint32(b[8:], d.SSN)
	binary.BigEndian.PutUint32(b[12:], d.Offset)
	binary.BigEndian.PutUint32(b[16:], d.MsgLen)
	binary.BigEndian.PutUint32(b[20:], d.RKey)
	binary.BigEndian.PutUint64(b[24:], d.RAddr)
	binary.BigEndian.PutUint32(b[32:], d.Imm)
	binary.BigEndian.PutUint32(b[36:], d.RespPSN)
	return append(dst, payload...)
}

// AppendAck appends an ACK packet to dst and returns the extended slice.
// It sets h.Type to TypeAck and writes psn as 0 (ACKs carry none) whatever
// h.PSN holds; every other field is written as given. It does not allocate
// when dst has room for HeaderLen+AckLen more bytes.
func AppendAck(dst []byte, h *Header, a *Ack) []byte {
	h.Type = TypeAck
	n := len(dst)
	dst = slices.Grow(dst, HeaderLen+AckLen)[:n+HeaderLen+AckLen]
	putHeader(dst[n:n+HeaderLen], h, 0)
	b := dst[n+HeaderLen : n+HeaderLen+AckLen]
	binary.BigEndian.PutUint32(b[0:], a.Cum)
	binary.BigEndian.PutUint32(b[4:], a.DupPSN)
	// The bitmap is a byte string, bit i in byte i/8 LSB first: each
	// 64-bit word is therefore little-endian.
	for i, w := range a.SACK {
		binary.LittleEndian.PutUint64(b[8+8*i:], w)
	}
	binary.BigEndian.PutUint64(b[40:], uint64(a.EchoTS))
	binary.BigEndian.PutUint32(b[48:], a.MSN)
	b[52] = byte(a.NAK)
	b[53] = a.RNRTimer
	binary.BigEndian.PutUint16(b[54:], 0)
	binary.BigEndian.PutUint32(b[56:], a.NAKMSN)
	binary.BigEndian.PutUint32(b[60:], a.Credit)
	return dst
}

// putHeader writes the common header into b (HeaderLen bytes), every byte,
// reserved ones included: b may be reused buffer space holding old data.
func putHeader(b []byte, h *Header, psn uint32) {
	_ = b[HeaderLen-1]
	binary.BigEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(h.Type)
	b[4] = h.Flags
	b[5] = 0
	binary.BigEndian.PutUint16(b[6:], h.Path)
	binary.BigEndian.PutUint32(b[8:], h.Tenant)
	binary.BigEndian.PutUint32(b[12:], h.Conn)
	binary.BigEndian.PutUint64(b[16:], h.Token)
	binary.BigEndian.PutUint32(b[24:], psn)
	binary.BigEndian.PutUint32(b[28:], 0)
	binary.BigEndian.PutUint64(b[32:], uint64(h.TS))
}
