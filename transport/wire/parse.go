package wire

import (
	"encoding/binary"
	"math"
)

// Parse checks the datagram b against every rule of the format and, if it
// is a valid packet, fills *p. p.Payload aliases b (capacity-limited, so an
// append to it cannot overwrite b). On error *p is unchanged and the error
// wraps ErrMalformed, and also ErrVersion when b carries our magic with
// another version. Parse never panics and never allocates.
func Parse(b []byte, p *Packet) error {
	// Magic and version come first, before any length check: another
	// version may have another header length, and it must be counted as
	// a version mismatch, not as garbage.
	if len(b) < 3 {
		return errShort
	}
	if binary.BigEndian.Uint16(b[0:]) != Magic {
		return errMagic
	}
	if b[2] != Version {
		return errVersion
	}
	if len(b) < HeaderLen {
		return errShort
	}
	var q Packet
	q.Header = Header{
		Type:   Type(b[3]),
		Flags:  b[4],
		Path:   binary.BigEndian.Uint16(b[6:]),
		Tenant: binary.BigEndian.Uint32(b[8:]),
		Conn:   binary.BigEndian.Uint32(b[12:]),
		Token:  binary.BigEndian.Uint64(b[16:]),
		PSN:    binary.BigEndian.Uint32(b[24:]),
		TS:     int64(binary.BigEndian.Uint64(b[32:])),
	}
	if q.Type != TypeData && q.Type != TypeAck {
		return errType
	}
	if q.Flags&^flagsAll != 0 {
		return errFlags
	}
	if q.Type == TypeData && q.Flags&flagsAckOnly != 0 {
		return errDataFlags
	}
	if b[5] != 0 || binary.BigEndian.Uint32(b[28:]) != 0 {
		return errHdrRsvd
	}
	var err error
	if q.Type == TypeData {
		err = parseData(b, &q)
	} else {
		err = parseAck(b, &q)
	}
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// parseData checks and decodes the DATA part of b (whole datagram) into q.
func parseData(b []byte, q *Packet) error {
	if len(b) < HeaderLen+DataLen {
		return errDataShort
	}
	x := b[HeaderLen : HeaderLen+DataLen]
	d := Data{
		Op:         Op(x[0]),
		PayloadLen: binary.BigEndian.Uint16(x[2:]),
		MSN:        binary.BigEndian.Uint32(x[4:]),
		SSN:        binary.BigEndian.Uint32(x[8:]),
		Offset:     binary.BigEndian.Uint32(x[12:]),
		MsgLen:     binary.BigEndian.Uint32(x[16:]),
		RKey:       binary.BigEndian.Uint32(x[20:]),
		RAddr:      binary.BigEndian.Uint64(x[24:]),
		Imm:        binary.BigEndian.Uint32(x[32:]),
		RespPSN:    binary.BigEndian.Uint32(x[36:]),
	}
	if !d.Op.known() {
		return errOp
	}
	if x[1] != 0 {
		return errDataRsvd
	}
	if int(d.PayloadLen) != len(b)-(HeaderLen+DataLen) {
		return errPayloadLen
	}
	if d.MsgLen > MaxMsgLen {
		return errMsgLen
	}
	// In 64 bits: offset+payload_len cannot wrap.
	end := uint64(d.Offset) + uint64(d.PayloadLen)
	if end > uint64(d.MsgLen) {
		return errRange
	}
	r := &opRules[d.Op]
	f := q.Flags
	if f&FlagFirst != 0 && d.Offset != 0 {
		return errFirst
	}
	// READ_REQ has no payload: its msg_len is the length to read, so its
	// LAST cannot be checked against the end of its (empty) payload.
	if f&FlagLast != 0 && !r.noPayload && end != uint64(d.MsgLen) {
		return errLast
	}
	if f&FlagSolicited != 0 && !r.recv {
		return errSolicited
	}
	if !r.recv && d.SSN != 0 {
		return errSSN
	}
	if !r.imm && d.Imm != 0 {
		return errImm
	}
	if !r.respPSN && d.RespPSN != 0 {
		return errRespPSN
	}
	switch {
	case r.remote:
		// The remote range is raddr .. raddr+span-1; an atomic touches
		// one 8-byte word whatever its msg_len.
		span := uint64(d.MsgLen)
		if r.aligned {
			span = 8
		}
		if span != 0 && d.RAddr > math.MaxUint64-(span-1) {
			return errRAddrWrap
		}
	case r.resp:
		if d.RKey != 0 {
			return errRKey
		}
		if d.RAddr>>32 != 0 {
			return errRespRAddr
		}
	default: // SEND, SEND_IMM: no remote memory
		if d.RKey != 0 {
			return errRKey
		}
		if d.RAddr != 0 {
			return errRAddr
		}
	}
	if r.noPayload {
		if d.PayloadLen != 0 {
			return errReadPayload
		}
		if d.Offset != 0 {
			return errReadOffset
		}
	}
	if r.fixed != 0 {
		if d.PayloadLen != r.fixed {
			return errAtomicLen
		}
		if d.MsgLen != uint32(r.fixed) {
			return errAtomicMsgLen
		}
	}
	if r.aligned && d.RAddr%8 != 0 {
		return errAtomicAlign
	}
	q.Data = d
	if d.PayloadLen != 0 {
		q.Payload = b[HeaderLen+DataLen : len(b) : len(b)]
	}
	return nil
}

// parseAck checks and decodes the ACK part of b (whole datagram) into q.
func parseAck(b []byte, q *Packet) error {
	if q.Flags&flagsDataOnly != 0 {
		return errAckFlags
	}
	if q.PSN != 0 {
		return errAckPSN
	}
	if len(b) != HeaderLen+AckLen {
		return errAckLen
	}
	x := b[HeaderLen : HeaderLen+AckLen]
	a := Ack{
		Cum:      binary.BigEndian.Uint32(x[0:]),
		EchoTS:   int64(binary.BigEndian.Uint64(x[40:])),
		MSN:      binary.BigEndian.Uint32(x[48:]),
		NAK:      NAK(x[52]),
		RNRTimer: x[53],
		NAKMSN:   binary.BigEndian.Uint32(x[56:]),
		Credit:   binary.BigEndian.Uint32(x[60:]),
		DupPSN:   binary.BigEndian.Uint32(x[4:]),
	}
	for i := range a.SACK {
		a.SACK[i] = binary.LittleEndian.Uint64(x[8+8*i:])
	}
	if binary.BigEndian.Uint16(x[54:]) != 0 {
		return errAckRsvd
	}
	switch {
	case q.Flags&FlagDup == 0 && a.DupPSN != 0:
		return errDupPSN
	case q.Flags&FlagDup != 0 && !a.Has(a.DupPSN):
		// A copy of a packet the receiver says it does not have.
		return errDupUncovered
	}
	if a.NAK > NAKBusy {
		return errNAK
	}
	if a.RNRTimer > maxRNRTimer || (a.NAK != NAKRNR && a.RNRTimer != 0) {
		return errRNRTimer
	}
	if a.NAK == NAKNone && a.NAKMSN != 0 {
		return errNAKMSN
	}
	q.Ack = a
	return nil
}
