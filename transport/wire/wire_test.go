package wire

import (
	"bytes"
	"errors"
	"testing"
)

// sample is one valid packet, described by its fields.
type sample struct {
	name    string
	h       Header
	d       Data // for DATA
	a       Ack  // for ACK
	payload []byte
}

func (s sample) encode(dst []byte) []byte {
	h, d, a := s.h, s.d, s.a
	if h.Type == TypeAck {
		return AppendAck(dst, &h, &a)
	}
	return AppendData(dst, &h, &d, s.payload)
}

// pattern returns n bytes that differ from their neighbours and from
// zero, so a misplaced copy shows.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)*7 + 1
	}
	return b
}

// distinctive header values: every byte differs, so a field written at the
// wrong offset or in the wrong byte order shows in a golden test.
func hdr(flags uint8) Header {
	return Header{
		Flags:  flags,
		Path:   0xA1B2,
		Tenant: 0xC3D4E5F6,
		Conn:   0x0718293A,
		Token:  0x1122334455667788,
		PSN:    0x99AABBCC,
		TS:     -0x0123456789ABCDEF,
	}
}

// samples returns a valid packet of every op and of ACKs with every NAK,
// all fields set to distinctive values the op allows.
func samples() []sample {
	const msgLen = 0x01234567
	w := pattern(100, 0x10)
	retx := FlagRetx | FlagAckReq
	ackHdr := hdr(FlagRetx | FlagAckReq)
	ackHdr.Type = TypeAck
	ackHdr.PSN = 0
	ack := Ack{
		Cum:      0xFFFFFFF0,
		SACK:     [4]uint64{0x8000000000000001, 0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x00FF00FF00FF00FF},
		EchoTS:   0x0A1B2C3D4E5F6071,
		MSN:      0x31415926,
		NAK:      NAKRNR,
		RNRTimer: 31,
		NAKMSN:   0x27182818,
		Credit:   0xC0FFEE11,
	}
	s := []sample{
		{name: "WRITE last", h: hdr(retx | FlagLast), payload: w, d: Data{Op: OpWrite, MSN: 0x0A0B0C0D,
			Offset: msgLen - 100, MsgLen: msgLen, RKey: 0x5EED1234, RAddr: 0x7F00112233445500}},
		{name: "WRITE first", h: hdr(FlagFirst), payload: w, d: Data{Op: OpWrite, MSN: 0x0A0B0C0E,
			MsgLen: msgLen, RKey: 0x5EED1234, RAddr: 0x7F00112233445500}},
		{name: "WRITE_IMM", h: hdr(retx | FlagLast | FlagSolicited), payload: w, d: Data{Op: OpWriteImm, MSN: 0x0A0B0C0F,
			SSN: 0x13572468, Offset: 0x200, MsgLen: 0x200 + 100, RKey: 0x6EED1234, RAddr: 0x7F00112233446600, Imm: 0xFEEDF00D}},
		{name: "SEND", h: hdr(FlagFirst | FlagLast | FlagSolicited), payload: w, d: Data{Op: OpSend, MSN: 0x0B0C0D0E,
			SSN: 0x2468ACE0, MsgLen: 100}},
		{name: "SEND empty", h: hdr(FlagFirst | FlagLast), d: Data{Op: OpSend, MSN: 7, SSN: 3}},
		{name: "SEND_IMM middle", h: hdr(retx), payload: w, d: Data{Op: OpSendImm, MSN: 0x0C0D0E0F,
			SSN: 0x369CF258, Offset: 0x1000, MsgLen: 0x10000, Imm: 0xBADC0DE5}},
		{name: "READ_REQ", h: hdr(FlagFirst | FlagLast | FlagAckReq), d: Data{Op: OpReadReq, MSN: 0x0D0E0F10,
			MsgLen: MaxMsgLen, RKey: 0x7EED1234, RAddr: 0x7F00112233447700, RespPSN: 0xFFFFFF01}},
		{name: "READ_RESP middle", h: hdr(FlagRetx), payload: w, d: Data{Op: OpReadResp, MSN: 0x0E0F1011,
			Offset: 0x3000, MsgLen: 0x40000000, RAddr: 0xDEADBEEF}},
		{name: "CMP_SWAP", h: hdr(FlagFirst | FlagLast), payload: pattern(16, 0x40), d: Data{Op: OpCmpSwap, MSN: 0x0F101112,
			MsgLen: 16, RKey: 0x8EED1234, RAddr: 0x7F00112233448808, RespPSN: 0x00ABCDEF}},
		{name: "FETCH_ADD", h: hdr(FlagFirst | FlagLast | FlagRetx), payload: pattern(8, 0x50), d: Data{Op: OpFetchAdd, MSN: 0x10111213,
			MsgLen: 8, RKey: 0x9EED1234, RAddr: 0xFFFFFFFFFFFFFFF8, RespPSN: 1}},
		{name: "ATOMIC_RESP", h: hdr(FlagFirst | FlagLast), payload: pattern(8, 0x60), d: Data{Op: OpAtomicResp, MSN: 0x11121314,
			MsgLen: 8, RAddr: 0x87654321}},
	}
	for i := range s {
		s[i].h.Type = TypeData
		s[i].d.PayloadLen = uint16(len(s[i].payload))
	}
	for n := NAKNone; n <= NAKBusy; n++ {
		a := ack
		a.NAK = n
		if n != NAKRNR {
			a.RNRTimer = 0
		}
		if n == NAKNone {
			a.NAKMSN = 0
		}
		s = append(s, sample{name: "ACK " + n.String(), h: ackHdr, a: a})
	}
	// A duplicate report: psn 0xFFFFFF00 is below cum.
	dup := ack
	dup.NAK, dup.RNRTimer, dup.NAKMSN, dup.DupPSN = NAKNone, 0, 0, 0xFFFFFF00
	dupHdr := ackHdr
	dupHdr.Flags |= FlagDup
	s = append(s, sample{name: "ACK DUP", h: dupHdr, a: dup})
	return s
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b := s.encode(nil)
			var p Packet
			if err := Parse(b, &p); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Header != s.h {
				t.Errorf("header: got %+v, want %+v", p.Header, s.h)
			}
			if s.h.Type == TypeData {
				if p.Data != s.d {
					t.Errorf("data: got %+v, want %+v", p.Data, s.d)
				}
				if p.Ack != (Ack{}) {
					t.Errorf("DATA packet with ack part %+v", p.Ack)
				}
				if !bytes.Equal(p.Payload, s.payload) {
					t.Errorf("payload: got %x, want %x", p.Payload, s.payload)
				}
				if len(b) != HeaderLen+DataLen+len(s.payload) {
					t.Errorf("length %d, want %d", len(b), HeaderLen+DataLen+len(s.payload))
				}
			} else {
				if p.Ack != s.a {
					t.Errorf("ack: got %+v, want %+v", p.Ack, s.a)
				}
				if p.Data != (Data{}) || p.Payload != nil {
					t.Errorf("ACK packet with data part %+v, payload %x", p.Data, p.Payload)
				}
				if len(b) != HeaderLen+AckLen {
					t.Errorf("length %d, want %d", len(b), HeaderLen+AckLen)
				}
			}
			// Re-encoding the parsed packet gives the same bytes.
			if b2 := encodePacket(nil, &p); !bytes.Equal(b2, b) {
				t.Errorf("re-encoded\n%x\nwant\n%x", b2, b)
			}
		})
	}
}

// encodePacket encodes a parsed packet again.
func encodePacket(dst []byte, p *Packet) []byte {
	h := p.Header
	if h.Type == TypeAck {
		a := p.Ack
		return AppendAck(dst, &h, &a)
	}
	d := p.Data
	return AppendData(dst, &h, &d, p.Payload)
}

// The encoders append after what dst holds and overwrite every byte of the
// space they take, reserved bytes included, even when it holds old data.
func TestAppendKeepsPrefixAndClearsReused(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			want := s.encode(nil)
			prefix := []byte("prefix")
			dirty := bytes.Repeat([]byte{0xFF}, 4096)
			dst := append(dirty[:0], prefix...)
			b := s.encode(dst)
			if &b[0] != &dirty[0] {
				t.Errorf("encoder reallocated although dst had room")
			}
			if !bytes.Equal(b[:len(prefix)], prefix) || !bytes.Equal(b[len(prefix):], want) {
				t.Errorf("got %x, want %x%x", b, prefix, want)
			}
		})
	}
}

func TestAppendSetsTypeAndPayloadLen(t *testing.T) {
	h := hdr(FlagFirst | FlagLast)
	h.Type = TypeAck // wrong on purpose: AppendData must override it
	d := Data{Op: OpSend, MsgLen: 5, PayloadLen: 999}
	b := AppendData(nil, &h, &d, []byte("hello"))
	if h.Type != TypeData || d.PayloadLen != 5 {
		t.Errorf("AppendData left Type %v, PayloadLen %d", h.Type, d.PayloadLen)
	}
	var p Packet
	if err := Parse(b, &p); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.Type != TypeData || p.Data.PayloadLen != 5 || string(p.Payload) != "hello" {
		t.Errorf("parsed %+v", p)
	}

	h = hdr(FlagRetx)
	h.Type = TypeData
	h.PSN = 12345 // ACKs carry no psn: AppendAck writes 0
	a := Ack{Cum: 9}
	b = AppendAck(nil, &h, &a)
	if h.Type != TypeAck {
		t.Errorf("AppendAck left Type %v", h.Type)
	}
	if err := Parse(b, &p); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.Type != TypeAck || p.PSN != 0 || p.Ack.Cum != 9 {
		t.Errorf("parsed %+v", p)
	}
}

func TestAppendDataPanicsOnOversizedPayload(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("AppendData accepted a 65536-byte payload")
		}
	}()
	var h Header
	d := Data{Op: OpSend}
	AppendData(nil, &h, &d, make([]byte, 1<<16))
}

// The largest payload round-trips.
func TestMaxPayload(t *testing.T) {
	h := hdr(FlagFirst | FlagLast)
	d := Data{Op: OpWrite, MsgLen: maxPayload, RAddr: 4096}
	pl := pattern(maxPayload, 3)
	b := AppendData(nil, &h, &d, pl)
	var p Packet
	if err := Parse(b, &p); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !bytes.Equal(p.Payload, pl) || p.Data.PayloadLen != maxPayload {
		t.Errorf("payload_len %d, payload differs: %v", p.Data.PayloadLen, !bytes.Equal(p.Payload, pl))
	}
}

// Payload aliases the datagram but cannot be appended over the bytes
// after it.
func TestPayloadAliasesAndIsCapped(t *testing.T) {
	s := samples()[0]
	b := s.encode(nil)
	buf := append(b, 0xEE, 0xEE) // spare bytes after the datagram
	var p Packet
	if err := Parse(buf[:len(b)], &p); err != nil {
		t.Fatal(err)
	}
	if &p.Payload[0] != &buf[HeaderLen+DataLen] {
		t.Errorf("payload does not alias the datagram")
	}
	if cap(p.Payload) != len(p.Payload) {
		t.Errorf("payload cap %d > len %d: an append would overwrite the caller's buffer", cap(p.Payload), len(p.Payload))
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{TypeData.String(), "DATA"}, {TypeAck.String(), "ACK"}, {Type(0).String(), "Type(0)"}, {Type(200).String(), "Type(200)"},
		{OpWrite.String(), "WRITE"}, {OpWriteImm.String(), "WRITE_IMM"}, {OpSend.String(), "SEND"},
		{OpSendImm.String(), "SEND_IMM"}, {OpReadReq.String(), "READ_REQ"}, {OpReadResp.String(), "READ_RESP"},
		{OpCmpSwap.String(), "CMP_SWAP"}, {OpFetchAdd.String(), "FETCH_ADD"}, {OpAtomicResp.String(), "ATOMIC_RESP"},
		{Op(0).String(), "Op(0)"}, {Op(10).String(), "Op(10)"}, {Op(255).String(), "Op(255)"},
		{NAKNone.String(), "NONE"}, {NAKRNR.String(), "RNR"}, {NAKAccess.String(), "ACCESS"},
		{NAKInvalid.String(), "INVALID"}, {NAKRemoteOp.String(), "REMOTE_OP"}, {NAKBusy.String(), "BUSY"}, {NAK(6).String(), "NAK(6)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestErrorsWrap(t *testing.T) {
	if !errors.Is(errVersion, ErrVersion) || !errors.Is(errVersion, ErrMalformed) {
		t.Errorf("version error does not match both ErrVersion and ErrMalformed")
	}
	if errors.Is(errMagic, ErrVersion) {
		t.Errorf("a non-version error matches ErrVersion")
	}
	if !errors.Is(errMagic, ErrMalformed) {
		t.Errorf("errMagic does not match ErrMalformed")
	}
}

// Every rejection reason has its own message, so a log line names the rule.
func TestErrorMessagesDistinct(t *testing.T) {
	all := []*parseError{errShort, errMagic, errVersion, errType, errFlags, errAckFlags, errDataFlags, errHdrRsvd, errAckPSN,
		errDataShort, errOp, errDataRsvd, errPayloadLen, errMsgLen, errRange, errFirst, errLast, errSolicited,
		errSSN, errImm, errRespPSN, errRKey, errRAddr, errRespRAddr, errRAddrWrap, errReadPayload, errReadOffset,
		errAtomicLen, errAtomicMsgLen, errAtomicAlign, errAckLen, errAckRsvd, errNAK, errRNRTimer, errNAKMSN, errDupPSN, errDupUncovered}
	seen := map[string]bool{}
	for _, e := range all {
		m := e.Error()
		if seen[m] || len(m) < len("wire: ") || m[:6] != "wire: " {
			t.Errorf("message %q duplicated or without the package prefix", m)
		}
		seen[m] = true
	}
}
