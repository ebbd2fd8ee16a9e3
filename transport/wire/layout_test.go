package wire

import (
	"bytes"
	"testing"
)

// field is one documented field: its offset in the datagram and the bytes
// the encoder must put there. The offsets are those of docs/wire.md's
// tables (DATA and ACK parts start at HeaderLen), written out as numbers
// rather than computed, so that a change to either side fails here.
type field struct {
	name string
	off  int
	want []byte
}

func checkLayout(t *testing.T, b []byte, fields []field, total int) {
	t.Helper()
	if len(b) != total {
		t.Fatalf("datagram is %d bytes, want %d", len(b), total)
	}
	covered := make([]bool, len(b))
	for _, f := range fields {
		if got := b[f.off : f.off+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at offset %d: got % x, want % x", f.name, f.off, got, f.want)
		}
		for i := range f.want {
			if covered[f.off+i] {
				t.Errorf("%s overlaps another field at offset %d", f.name, f.off+i)
			}
			covered[f.off+i] = true
		}
	}
	for i, c := range covered {
		if !c {
			t.Errorf("byte %d belongs to no documented field", i)
		}
	}
}

var headerFields = []field{
	{"magic", 0, []byte{0x56, 0x53}},
	{"version", 2, []byte{4}},
	// type at 3 is checked per packet type below
	{"flags", 4, []byte{0x1D}}, // FIRST|RETX|ACK_REQ|SOLICITED for DATA (ACK below)
	{"reserved", 5, []byte{0}},
	{"path", 6, []byte{0xA1, 0xB2}},
	{"tenant", 8, []byte{0xC3, 0xD4, 0xE5, 0xF6}},
	{"conn", 12, []byte{0x07, 0x18, 0x29, 0x3A}},
	{"token", 16, []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}},
	// psn at 24 is checked per packet type below
	{"reserved", 28, []byte{0, 0, 0, 0}},
	// -0x0123456789ABCDEF in two's complement
	{"ts", 32, []byte{0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x11}},
}

func TestDataLayout(t *testing.T) {
	h := hdr(FlagFirst | FlagRetx | FlagAckReq | FlagSolicited)
	d := Data{Op: OpWriteImm, MSN: 0x01020304, SSN: 0x05060708, Offset: 0, MsgLen: 0x090A0B0C,
		RKey: 0x0D0E0F10, RAddr: 0x1112131415161718, Imm: 0x191A1B1C}
	payload := []byte{0xAA, 0xBB, 0xCC}
	b := AppendData(nil, &h, &d, payload)
	fields := append([]field{
		{"type", 3, []byte{1}},
		{"psn", 24, []byte{0x99, 0xAA, 0xBB, 0xCC}},
		{"op", 40, []byte{2}},
		{"reserved", 41, []byte{0}},
		{"payload_len", 42, []byte{0x00, 0x03}},
		{"msn", 44, []byte{0x01, 0x02, 0x03, 0x04}},
		{"ssn", 48, []byte{0x05, 0x06, 0x07, 0x08}},
		{"offset", 52, []byte{0, 0, 0, 0}},
		{"msg_len", 56, []byte{0x09, 0x0A, 0x0B, 0x0C}},
		{"rkey", 60, []byte{0x0D, 0x0E, 0x0F, 0x10}},
		{"raddr", 64, []byte{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}},
		{"imm", 72, []byte{0x19, 0x1A, 0x1B, 0x1C}},
		{"resp_psn", 76, []byte{0, 0, 0, 0}}, // WRITE_IMM awaits no response
		{"payload", 80, []byte{0xAA, 0xBB, 0xCC}},
	}, headerFields...)
	checkLayout(t, b, fields, 83)

	// offset has its own distinct value on a middle packet.
	h = hdr(0)
	d = Data{Op: OpWrite, Offset: 0x21222324, MsgLen: 0x7FFFFFFF}
	b = AppendData(nil, &h, &d, nil)
	if got := b[52:56]; !bytes.Equal(got, []byte{0x21, 0x22, 0x23, 0x24}) {
		t.Errorf("offset at 52: got % x", got)
	}
	var p Packet
	if err := Parse(b, &p); err != nil || p.Data.Offset != 0x21222324 {
		t.Errorf("Parse: %v, offset %#x", err, p.Data.Offset)
	}

	// resp_psn, on the ops that await a response, takes the DATA part's
	// last word.
	for _, op := range []Op{OpReadReq, OpCmpSwap, OpFetchAdd} {
		h = hdr(FlagFirst | FlagLast)
		d = Data{Op: op, MsgLen: 8, RKey: 1, RAddr: 8, RespPSN: 0x31323334}
		var payload []byte
		switch op {
		case OpCmpSwap:
			d.MsgLen, payload = 16, make([]byte, 16)
		case OpFetchAdd:
			payload = make([]byte, 8)
		}
		b = AppendData(nil, &h, &d, payload)
		if got := b[76:80]; !bytes.Equal(got, []byte{0x31, 0x32, 0x33, 0x34}) {
			t.Errorf("%v: resp_psn at 76: got % x", op, got)
		}
		if err := Parse(b, &p); err != nil || p.Data.RespPSN != 0x31323334 {
			t.Errorf("%v: Parse: %v, resp_psn %#x", op, err, p.Data.RespPSN)
		}
	}
}

func TestAckLayout(t *testing.T) {
	h := hdr(FlagRetx | FlagAckReq)
	a := Ack{
		Cum:      0x01020304,
		EchoTS:   0x2122232425262728,
		MSN:      0x292A2B2C,
		NAK:      NAKRNR,
		RNRTimer: 0x1F,
		NAKMSN:   0x31323334,
		Credit:   0x35363738,
	}
	// SACK bits 0 (psn cum+1), 9 (byte 1 bit 1), 70 (byte 8 bit 6), 255
	// (byte 31 bit 7): the bitmap is bit i in byte i/8, LSB first.
	for _, i := range []uint32{0, 9, 70, 255} {
		if !a.Set(a.Cum + 1 + i) {
			t.Fatalf("Set(cum+1+%d) did not fit", i)
		}
	}
	sack := make([]byte, 32)
	sack[0], sack[1], sack[8], sack[31] = 0x01, 0x02, 0x40, 0x80
	b := AppendAck(nil, &h, &a)
	hf := append([]field(nil), headerFields...)
	hf[2] = field{"flags", 4, []byte{0x0C}} // RETX|ACK_REQ
	fields := append([]field{
		{"type", 3, []byte{2}},
		{"psn", 24, []byte{0, 0, 0, 0}}, // ACKs carry none, whatever h.PSN held
		{"cum", 40, []byte{0x01, 0x02, 0x03, 0x04}},
		{"reserved", 44, []byte{0, 0, 0, 0}},
		{"sack", 48, sack},
		{"echo_ts", 80, []byte{0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28}},
		{"msn", 88, []byte{0x29, 0x2A, 0x2B, 0x2C}},
		{"nak", 92, []byte{1}},
		{"rnr_timer", 93, []byte{0x1F}},
		{"reserved", 94, []byte{0, 0}},
		{"nak_msn", 96, []byte{0x31, 0x32, 0x33, 0x34}},
		{"credit", 100, []byte{0x35, 0x36, 0x37, 0x38}},
	}, hf...)
	checkLayout(t, b, fields, 104)

	// A duplicate report: the DUP flag, and dup_psn in the reserved
	// bytes an ACK without one has.
	h = hdr(FlagRetx | FlagDup)
	a.DupPSN = 0x01020300 // below cum
	b = AppendAck(nil, &h, &a)
	for i, f := range fields {
		switch f.off {
		case 4:
			fields[i] = field{"flags", 4, []byte{0x24}} // RETX|DUP
		case 44:
			fields[i] = field{"dup_psn", 44, []byte{0x01, 0x02, 0x03, 0x00}}
		}
	}
	checkLayout(t, b, fields, 104)
	var p Packet
	if err := Parse(b, &p); err != nil || p.Ack.DupPSN != a.DupPSN || p.Flags&FlagDup == 0 {
		t.Errorf("Parse: %v, dup_psn %#x, flags %#x", err, p.Ack.DupPSN, p.Flags)
	}
}

// The constants are the documented sizes.
func TestConstants(t *testing.T) {
	if Magic != 0x5653 || Version != 4 || HeaderLen != 40 || DataLen != 40 || AckLen != 64 ||
		SACKBits != 256 || MaxMsgLen != 2147483648 || len(Ack{}.SACK)*64 != SACKBits {
		t.Errorf("constants drifted from docs/wire.md")
	}
	if FlagFirst != 1 || FlagLast != 2 || FlagRetx != 4 || FlagAckReq != 8 || FlagSolicited != 16 || FlagDup != 32 {
		t.Errorf("flag bits drifted from docs/wire.md")
	}
	if OpWrite != 1 || OpWriteImm != 2 || OpSend != 3 || OpSendImm != 4 || OpReadReq != 5 ||
		OpReadResp != 6 || OpCmpSwap != 7 || OpFetchAdd != 8 || OpAtomicResp != 9 {
		t.Errorf("op codes drifted from docs/wire.md")
	}
	if NAKNone != 0 || NAKRNR != 1 || NAKAccess != 2 || NAKInvalid != 3 || NAKRemoteOp != 4 || NAKBusy != 5 {
		t.Errorf("NAK codes drifted from docs/wire.md")
	}
}
