package wire

import (
	"errors"
	"math"
	"testing"
)

func sampleNamed(t testing.TB, name string) sample {
	for _, s := range samples() {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no sample %q", name)
	return sample{}
}

// mod encodes sample name after fix changed its fields (the encoders do
// not validate, so this builds packets that break one rule).
func mod(t testing.TB, name string, fix func(s *sample)) []byte {
	s := sampleNamed(t, name)
	fix(&s)
	return s.encode(nil)
}

// raw encodes sample name, then lets fix change its bytes.
func raw(t testing.TB, name string, fix func(b []byte) []byte) []byte {
	return fix(sampleNamed(t, name).encode(nil))
}

func put32(b []byte, off int, v uint32) {
	b[off], b[off+1], b[off+2], b[off+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// Each case breaks exactly one rule of a valid sample and expects the
// error for that rule.
func TestParseRejects(t *testing.T) {
	type tc struct {
		name string
		b    []byte
		want error
	}
	var cases []tc
	add := func(name string, b []byte, want error) { cases = append(cases, tc{name, b, want}) }

	// Common header.
	add("empty", nil, errShort)
	add("2 bytes", []byte{0x56, 0x53}, errShort)
	add("header truncated DATA", raw(t, "SEND", func(b []byte) []byte { return b[:HeaderLen-1] }), errShort)
	add("header truncated ACK", raw(t, "ACK NONE", func(b []byte) []byte { return b[:HeaderLen-1] }), errShort)
	add("magic", raw(t, "SEND", func(b []byte) []byte { b[1] = 0x54; return b }), errMagic)
	add("magic byte order", raw(t, "SEND", func(b []byte) []byte { b[0], b[1] = 0x53, 0x56; return b }), errMagic)
	add("version 0", raw(t, "SEND", func(b []byte) []byte { b[2] = 0; return b }), errVersion)
	add("version 1", raw(t, "ACK NONE", func(b []byte) []byte { b[2] = 1; return b }), errVersion)
	add("version 2", raw(t, "ACK BUSY", func(b []byte) []byte { b[2] = 2; return b }), errVersion)
	add("version 3", raw(t, "READ_REQ", func(b []byte) []byte { b[2] = 3; return b }), errVersion)
	add("version 5 short", []byte{0x56, 0x53, 5}, errVersion)
	add("type 0", raw(t, "SEND", func(b []byte) []byte { b[3] = 0; return b }), errType)
	add("type 3", raw(t, "ACK NONE", func(b []byte) []byte { b[3] = 3; return b }), errType)
	for _, bit := range []uint8{1 << 6, 1 << 7} {
		add("DATA flag bit", mod(t, "SEND", func(s *sample) { s.h.Flags |= bit }), errFlags)
		add("ACK flag bit", mod(t, "ACK NONE", func(s *sample) { s.h.Flags |= bit }), errFlags)
		add("ACK DUP flag bit", mod(t, "ACK DUP", func(s *sample) { s.h.Flags |= bit }), errFlags)
	}
	for _, f := range []uint8{FlagFirst, FlagLast, FlagSolicited} {
		add("ACK with DATA flag", mod(t, "ACK NONE", func(s *sample) { s.h.Flags |= f }), errAckFlags)
	}
	for _, n := range []string{"SEND", "READ_RESP middle", "WRITE last"} {
		add("DUP on "+n, mod(t, n, func(s *sample) { s.h.Flags |= FlagDup }), errDataFlags)
	}
	add("header reserved 5", raw(t, "SEND", func(b []byte) []byte { b[5] = 1; return b }), errHdrRsvd)
	add("header reserved 28", raw(t, "ACK NONE", func(b []byte) []byte { b[28] = 0x80; return b }), errHdrRsvd)
	add("header reserved 31", raw(t, "SEND", func(b []byte) []byte { b[31] = 1; return b }), errHdrRsvd)
	add("ACK psn", raw(t, "ACK NONE", func(b []byte) []byte { b[27] = 1; return b }), errAckPSN)

	// DATA part: lengths and reserved fields.
	add("DATA without part", raw(t, "SEND empty", func(b []byte) []byte { return b[:HeaderLen] }), errDataShort)
	add("DATA part truncated", raw(t, "SEND empty", func(b []byte) []byte { return b[:HeaderLen+DataLen-1] }), errDataShort)
	for _, op := range []byte{0, 10, 255} {
		add("op", raw(t, "SEND", func(b []byte) []byte { b[40] = op; return b }), errOp)
	}
	add("DATA reserved 41", raw(t, "SEND", func(b []byte) []byte { b[41] = 1; return b }), errDataRsvd)
	add("datagram longer than payload_len", raw(t, "SEND", func(b []byte) []byte { return append(b, 0) }), errPayloadLen)
	add("datagram shorter than payload_len", raw(t, "SEND", func(b []byte) []byte { return b[:len(b)-1] }), errPayloadLen)
	add("empty payload with trailing byte", raw(t, "SEND empty", func(b []byte) []byte { return append(b, 0) }), errPayloadLen)

	// Message bounds.
	add("msg_len 2^31+1", mod(t, "WRITE first", func(s *sample) { s.d.MsgLen = MaxMsgLen + 1 }), errMsgLen)
	add("msg_len 2^32-1", mod(t, "WRITE first", func(s *sample) { s.d.MsgLen = math.MaxUint32 }), errMsgLen)
	add("READ_REQ msg_len 2^31+1", mod(t, "READ_REQ", func(s *sample) { s.d.MsgLen = MaxMsgLen + 1 }), errMsgLen)
	add("offset+payload_len > msg_len", mod(t, "SEND_IMM middle", func(s *sample) {
		s.d.Offset = s.d.MsgLen - uint32(len(s.payload)) + 1
	}), errRange)
	add("offset near 2^32 (no wrap)", mod(t, "READ_RESP middle", func(s *sample) {
		s.d.Offset = math.MaxUint32 - 10
	}), errRange)
	add("payload beyond message", mod(t, "SEND", func(s *sample) { s.h.Flags &^= FlagLast; s.d.MsgLen = 99 }), errRange)

	// Flags against the message.
	add("FIRST with offset", mod(t, "SEND_IMM middle", func(s *sample) { s.h.Flags |= FlagFirst }), errFirst)
	add("LAST not at end", mod(t, "SEND_IMM middle", func(s *sample) { s.h.Flags |= FlagLast }), errLast)
	add("LAST on first packet", mod(t, "WRITE first", func(s *sample) { s.h.Flags |= FlagLast }), errLast)
	for _, n := range []string{"WRITE first", "READ_REQ", "READ_RESP middle", "CMP_SWAP", "FETCH_ADD", "ATOMIC_RESP"} {
		add("SOLICITED on "+n, mod(t, n, func(s *sample) { s.h.Flags |= FlagSolicited }), errSolicited)
	}

	// Fields an op does not use must be zero.
	for _, n := range []string{"WRITE first", "READ_REQ", "READ_RESP middle", "CMP_SWAP", "FETCH_ADD", "ATOMIC_RESP"} {
		add("ssn on "+n, mod(t, n, func(s *sample) { s.d.SSN = 1 }), errSSN)
	}
	for _, n := range []string{"WRITE first", "SEND", "READ_REQ", "READ_RESP middle", "CMP_SWAP", "FETCH_ADD", "ATOMIC_RESP"} {
		add("imm on "+n, mod(t, n, func(s *sample) { s.d.Imm = 1 }), errImm)
	}
	for _, n := range []string{"WRITE first", "WRITE_IMM", "SEND", "SEND_IMM middle", "READ_RESP middle", "ATOMIC_RESP"} {
		add("resp_psn on "+n, mod(t, n, func(s *sample) { s.d.RespPSN = 1 }), errRespPSN)
	}
	add("resp_psn byte 76 on SEND", raw(t, "SEND", func(b []byte) []byte { b[76] = 1; return b }), errRespPSN)
	add("resp_psn byte 79 on SEND", raw(t, "SEND", func(b []byte) []byte { b[79] = 1; return b }), errRespPSN)
	for _, n := range []string{"SEND", "SEND_IMM middle", "READ_RESP middle", "ATOMIC_RESP"} {
		add("rkey on "+n, mod(t, n, func(s *sample) { s.d.RKey = 1 }), errRKey)
	}
	for _, n := range []string{"SEND", "SEND_IMM middle"} {
		add("raddr on "+n, mod(t, n, func(s *sample) { s.d.RAddr = 1 << 40 }), errRAddr)
	}
	for _, n := range []string{"READ_RESP middle", "ATOMIC_RESP"} {
		add("raddr above 32 bits on "+n, mod(t, n, func(s *sample) { s.d.RAddr |= 1 << 32 }), errRespRAddr)
	}

	// The remote range must not wrap.
	add("WRITE range wraps", mod(t, "WRITE first", func(s *sample) {
		s.d.RAddr = math.MaxUint64 - uint64(s.d.MsgLen) + 2
	}), errRAddrWrap)
	add("READ_REQ range wraps", mod(t, "READ_REQ", func(s *sample) { s.d.RAddr = math.MaxUint64 - (1 << 20) }), errRAddrWrap)
	// (An aligned atomic cannot wrap: its last possible word ends at 2^64;
	// see TestParseAcceptsEdges.)

	// READ_REQ.
	add("READ_REQ with payload", mod(t, "READ_REQ", func(s *sample) { s.payload = []byte{1} }), errReadPayload)
	add("READ_REQ with offset", mod(t, "READ_REQ", func(s *sample) { s.h.Flags &^= FlagFirst; s.d.Offset = 1 }), errReadOffset)

	// Atomics.
	add("CMP_SWAP 8 bytes", mod(t, "CMP_SWAP", func(s *sample) { s.payload = s.payload[:8]; s.d.MsgLen = 8 }), errAtomicLen)
	add("CMP_SWAP empty", mod(t, "CMP_SWAP", func(s *sample) { s.payload = nil; s.d.MsgLen = 0 }), errAtomicLen)
	add("FETCH_ADD 16 bytes", mod(t, "FETCH_ADD", func(s *sample) {
		s.payload = pattern(16, 1)
		s.d.MsgLen = 16
		s.d.RAddr = 1 << 12
	}), errAtomicLen)
	add("ATOMIC_RESP 9 bytes", mod(t, "ATOMIC_RESP", func(s *sample) { s.payload = pattern(9, 1); s.d.MsgLen = 9 }), errAtomicLen)
	add("CMP_SWAP msg_len", mod(t, "CMP_SWAP", func(s *sample) { s.h.Flags &^= FlagLast; s.d.MsgLen = 32 }), errAtomicMsgLen)
	add("ATOMIC_RESP msg_len", mod(t, "ATOMIC_RESP", func(s *sample) { s.h.Flags &^= FlagLast; s.d.MsgLen = 9 }), errAtomicMsgLen)
	for _, off := range []uint64{1, 4, 7} {
		add("CMP_SWAP unaligned", mod(t, "CMP_SWAP", func(s *sample) { s.d.RAddr += off }), errAtomicAlign)
		add("FETCH_ADD unaligned", mod(t, "FETCH_ADD", func(s *sample) { s.d.RAddr = 1<<12 + off }), errAtomicAlign)
	}

	// ACK part.
	add("ACK short", raw(t, "ACK NONE", func(b []byte) []byte { return b[:len(b)-1] }), errAckLen)
	add("ACK long", raw(t, "ACK NONE", func(b []byte) []byte { return append(b, 0) }), errAckLen)
	add("ACK header only", raw(t, "ACK NONE", func(b []byte) []byte { return b[:HeaderLen] }), errAckLen)
	add("dup_psn without DUP 44", raw(t, "ACK NONE", func(b []byte) []byte { b[44] = 1; return b }), errDupPSN)
	add("dup_psn without DUP 47", raw(t, "ACK RNR", func(b []byte) []byte { b[47] = 1; return b }), errDupPSN)
	// The sample's Cum is 0xFFFFFFF0; its SACK bitmap has bits 0 and 63
	// of word 0 set, bit 15 (cum+16, psn 0) clear.
	add("DUP of psn 0, not covered", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = 0 }), errDupUncovered)
	add("DUP of cum", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = s.a.Cum }), errDupUncovered)
	add("DUP of cum+2 (SACK bit clear)", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = s.a.Cum + 2 }), errDupUncovered)
	add("DUP beyond the bitmap", mod(t, "ACK DUP", func(s *sample) { s.a.SACK[3] = math.MaxUint64; s.a.DupPSN = s.a.Cum + SACKBits + 1 }), errDupUncovered)
	add("DUP 2^31 before cum", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = s.a.Cum - 1<<31 }), errDupUncovered)
	add("DUP with NAK, not covered", mod(t, "ACK BUSY", func(s *sample) { s.h.Flags |= FlagDup; s.a.DupPSN = s.a.Cum }), errDupUncovered)
	add("ACK reserved 94", raw(t, "ACK NONE", func(b []byte) []byte { b[94] = 1; return b }), errAckRsvd)
	add("ACK reserved 95", raw(t, "ACK ACCESS", func(b []byte) []byte { b[95] = 1; return b }), errAckRsvd)
	add("NAK 6", mod(t, "ACK INVALID", func(s *sample) { s.a.NAK = 6 }), errNAK)
	add("NAK 255", mod(t, "ACK INVALID", func(s *sample) { s.a.NAK = 255 }), errNAK)
	add("rnr_timer 32", mod(t, "ACK RNR", func(s *sample) { s.a.RNRTimer = 32 }), errRNRTimer)
	add("rnr_timer 255", mod(t, "ACK RNR", func(s *sample) { s.a.RNRTimer = 255 }), errRNRTimer)
	add("rnr_timer without NAK", mod(t, "ACK NONE", func(s *sample) { s.a.RNRTimer = 1 }), errRNRTimer)
	add("rnr_timer with ACCESS", mod(t, "ACK ACCESS", func(s *sample) { s.a.RNRTimer = 5 }), errRNRTimer)
	add("rnr_timer with BUSY", mod(t, "ACK BUSY", func(s *sample) { s.a.RNRTimer = 1 }), errRNRTimer)
	add("nak_msn without NAK", mod(t, "ACK NONE", func(s *sample) { s.a.NAKMSN = 1 }), errNAKMSN)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			canary := Packet{Header: Header{Tenant: 0xCA}, Data: Data{MSN: 0xCA}, Ack: Ack{Cum: 0xCA}}
			p := canary
			err := Parse(c.b, &p)
			if err != c.want {
				t.Fatalf("Parse: got %v, want %v", err, c.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if errors.Is(err, ErrVersion) != (c.want == errVersion) {
				t.Errorf("%v: errors.Is(ErrVersion) = %v", err, errors.Is(err, ErrVersion))
			}
			if p.Header != canary.Header || p.Data != canary.Data || p.Ack != canary.Ack || p.Payload != nil {
				t.Errorf("Parse changed *p on error: %+v", p)
			}
		})
	}
}

// Edge cases that are valid: the boundaries the rejections above sit next to.
func TestParseAcceptsEdges(t *testing.T) {
	type tc struct {
		name string
		b    []byte
	}
	cases := []tc{
		{"msg_len exactly 2^31, last packet", mod(t, "WRITE last", func(s *sample) {
			s.d.MsgLen = MaxMsgLen
			s.d.Offset = MaxMsgLen - uint32(len(s.payload))
		})},
		{"WRITE range ends at 2^64", mod(t, "WRITE first", func(s *sample) {
			s.d.RAddr = math.MaxUint64 - uint64(s.d.MsgLen) + 1
		})},
		{"READ_REQ of 0 bytes at the top", mod(t, "READ_REQ", func(s *sample) { s.d.MsgLen = 0; s.d.RAddr = math.MaxUint64 })},
		{"READ_REQ without FIRST/LAST", mod(t, "READ_REQ", func(s *sample) { s.h.Flags = 0 })},
		{"FETCH_ADD at the last word", mod(t, "FETCH_ADD", func(s *sample) { s.d.RAddr = math.MaxUint64 - 7 })},
		{"CMP_SWAP at the last word", mod(t, "CMP_SWAP", func(s *sample) { s.d.RAddr = math.MaxUint64 - 7 })},
		{"ATOMIC_RESP odd msn", mod(t, "ATOMIC_RESP", func(s *sample) { s.d.RAddr = 0xFFFFFFFF })},
		{"READ_RESP msn 0", mod(t, "READ_RESP middle", func(s *sample) { s.d.RAddr = 0 })},
		{"rkey 0 on WRITE", mod(t, "WRITE first", func(s *sample) { s.d.RKey = 0 })},
		{"SOLICITED on SEND_IMM", mod(t, "SEND_IMM middle", func(s *sample) { s.h.Flags |= FlagSolicited })},
		{"SOLICITED on WRITE_IMM", mod(t, "WRITE_IMM", func(s *sample) { s.h.Flags |= FlagSolicited })},
		{"ACK with RETX and ACK_REQ", mod(t, "ACK NONE", func(s *sample) { s.h.Flags = FlagRetx | FlagAckReq })},
		{"rnr_timer 0 with RNR", mod(t, "ACK RNR", func(s *sample) { s.a.RNRTimer = 0 })},
		{"nak_msn 0 with NAK", mod(t, "ACK REMOTE_OP", func(s *sample) { s.a.NAKMSN = 0 })},
		{"BUSY about msn 0", mod(t, "ACK BUSY", func(s *sample) { s.a.NAKMSN = 0 })},
		{"DUP of cum-1", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = s.a.Cum - 1 })},
		{"DUP of 2^31-1 before cum", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = s.a.Cum - (1<<31 - 1) })},
		{"DUP of cum+1 (SACK bit 0)", mod(t, "ACK DUP", func(s *sample) { s.a.DupPSN = s.a.Cum + 1 })},
		{"DUP of cum+256 (SACK bit 255)", mod(t, "ACK DUP", func(s *sample) { s.a.SACK[3] |= 1 << 63; s.a.DupPSN = s.a.Cum + SACKBits })},
		{"DUP of psn 0", mod(t, "ACK DUP", func(s *sample) { s.a.SACK[0] |= 1 << 15; s.a.DupPSN = 0 })},
		{"DUP with a BUSY NAK", mod(t, "ACK BUSY", func(s *sample) { s.h.Flags |= FlagDup; s.a.DupPSN = s.a.Cum - 3 })},
		{"all header values at max", mod(t, "SEND", func(s *sample) {
			s.h.Path, s.h.Tenant, s.h.Conn, s.h.Token = math.MaxUint16, math.MaxUint32, math.MaxUint32, math.MaxUint64
			s.h.PSN, s.h.TS = math.MaxUint32, math.MinInt64
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Packet
			if err := Parse(c.b, &p); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}
