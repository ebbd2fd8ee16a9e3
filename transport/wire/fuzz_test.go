package wire

import (
	"bytes"
	"errors"
	"math/bits"
	"testing"
)

// FuzzParse: any bytes parse or are rejected with ErrMalformed, without
// panicking and without touching *p on error; whatever parses re-encodes
// to exactly the same bytes (every valid packet has one encoding).
func FuzzParse(f *testing.F) {
	for _, s := range samples() {
		f.Add(s.encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{0x56, 0x53, 4})
	f.Add(raw(f, "SEND", func(b []byte) []byte { b[2] = 2; return b }))
	f.Add(raw(f, "ACK BUSY", func(b []byte) []byte { b[53] = 1; return b }))
	f.Add(raw(f, "ACK NONE", func(b []byte) []byte { return append(b, 0) }))
	f.Add(raw(f, "ACK DUP", func(b []byte) []byte { b[47]++; return b }))
	f.Add(raw(f, "ACK NONE", func(b []byte) []byte { b[4] |= FlagDup; return b }))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		canary := Packet{Header: Header{Tenant: 0xCA}, Data: Data{MSN: 0xCA}, Ack: Ack{Cum: 0xCA}}
		p := canary
		err := Parse(b, &p)
		if !bytes.Equal(b, in) {
			t.Fatalf("Parse changed its input")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if p.Header != canary.Header || p.Data != canary.Data || p.Ack != canary.Ack || p.Payload != nil {
				t.Fatalf("Parse changed *p on error %v", err)
			}
			return
		}
		if out := encodePacket(nil, &p); !bytes.Equal(out, b) {
			t.Fatalf("re-encoded\n%x\nfrom\n%x", out, b)
		}
	})
}

// FuzzAppendData: encoding arbitrary field values never panics, and when
// the result parses it gives back exactly the values encoded (the encoder
// writes what it is given; Parse only judges it).
func FuzzAppendData(f *testing.F) {
	for _, s := range samples() {
		if s.h.Type == TypeData {
			f.Add(s.h.Flags, s.h.Path, s.h.Tenant, s.h.Conn, s.h.Token, s.h.PSN, s.h.TS,
				uint8(s.d.Op), s.d.MSN, s.d.SSN, s.d.Offset, s.d.MsgLen, s.d.RKey, s.d.RAddr, s.d.Imm, s.payload)
		}
	}
	f.Fuzz(func(t *testing.T, flags uint8, path uint16, tenant, conn uint32, token uint64, psn uint32, ts int64,
		op uint8, msn, ssn, offset, msgLen, rkey uint32, raddr uint64, imm uint32, payload []byte) {
		h := Header{Flags: flags, Path: path, Tenant: tenant, Conn: conn, Token: token, PSN: psn, TS: ts}
		d := Data{Op: Op(op), MSN: msn, SSN: ssn, Offset: offset, MsgLen: msgLen, RKey: rkey, RAddr: raddr, Imm: imm}
		b := AppendData(nil, &h, &d, payload)
		if len(b) != HeaderLen+DataLen+len(payload) {
			t.Fatalf("encoded %d bytes for a %d-byte payload", len(b), len(payload))
		}
		var p Packet
		if err := Parse(b, &p); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if p.Header != h || p.Data != d || !bytes.Equal(p.Payload, payload) {
			t.Fatalf("parsed %+v\nencoded %+v %+v %x", p, h, d, payload)
		}
	})
}

// FuzzAppendAck: as FuzzAppendData, for ACKs.
func FuzzAppendAck(f *testing.F) {
	for _, s := range samples() {
		if s.h.Type == TypeAck {
			a := s.a
			f.Add(s.h.Flags, s.h.Path, s.h.Token, a.Cum, a.SACK[0], a.SACK[1], a.SACK[2], a.SACK[3],
				a.EchoTS, a.MSN, uint8(a.NAK), a.RNRTimer, a.NAKMSN, a.Credit, a.DupPSN)
		}
	}
	f.Fuzz(func(t *testing.T, flags uint8, path uint16, token uint64, cum uint32, s0, s1, s2, s3 uint64,
		echo int64, msn uint32, nak, rnr uint8, nakMSN, credit, dup uint32) {
		h := Header{Flags: flags, Path: path, Tenant: 1, Conn: 2, Token: token, TS: -echo}
		a := Ack{Cum: cum, SACK: [4]uint64{s0, s1, s2, s3}, EchoTS: echo, MSN: msn, NAK: NAK(nak),
			RNRTimer: rnr, NAKMSN: nakMSN, Credit: credit, DupPSN: dup}
		b := AppendAck(nil, &h, &a)
		var p Packet
		if err := Parse(b, &p); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if p.Header != h || p.Ack != a {
			t.Fatalf("parsed %+v\nencoded %+v %+v", p, h, a)
		}
		// A duplicate report is of a packet the ACK covers.
		if p.Flags&FlagDup != 0 && !p.Ack.Has(p.Ack.DupPSN) || p.Flags&FlagDup == 0 && p.Ack.DupPSN != 0 {
			t.Fatalf("flags %#x with dup_psn %#x (cum %#x) parsed", p.Flags, p.Ack.DupPSN, cum)
		}
		// Has agrees with the bitmap's population in the window.
		n := 0
		for i := uint32(1); i <= SACKBits; i++ {
			if p.Ack.Has(cum + i) {
				n++
			}
		}
		if want := bits.OnesCount64(s0) + bits.OnesCount64(s1) + bits.OnesCount64(s2) + bits.OnesCount64(s3); n != want {
			t.Fatalf("Has covers %d PSNs of the window, bitmap has %d bits", n, want)
		}
	})
}

// FuzzSACK: Has and Set against a model with 64-bit arithmetic.
func FuzzSACK(f *testing.F) {
	f.Add(uint32(0), []byte{0, 1, 2, 255})
	f.Add(uint32(0xFFFFFFF0), []byte{15, 16, 17, 200})
	f.Fuzz(func(t *testing.T, cum uint32, offs []byte) {
		a := Ack{Cum: cum}
		set := map[uint32]bool{}
		for k, o := range offs {
			// Offsets -8..+263 around Cum (two bytes of input per PSN would
			// waste the fuzzer's effort on values far outside).
			d := int64(o) + int64(k%2)*8 - 8
			psn := uint32(int64(cum) + d)
			fits := d >= 1 && d <= SACKBits
			if got := a.Set(psn); got != fits {
				t.Fatalf("cum %#x: Set(cum%+d) = %v", cum, d, got)
			}
			if fits {
				set[psn] = true
			}
		}
		for d := int64(-16); d <= SACKBits+16; d++ {
			psn := uint32(int64(cum) + d)
			if got, want := a.Has(psn), d < 0 || set[psn]; got != want {
				t.Fatalf("cum %#x: Has(cum%+d) = %v, want %v", cum, d, got, want)
			}
		}
	})
}
