package abi

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeRequest feeds hostile bytes to the control-request decoder, as
// a guest would through the control queue. The seeds in
// testdata/fuzz/FuzzDecodeRequest run with every `go test`.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(req(OpQueryDevice, 0))
	f.Add(req(OpCreateQP, 0, make([]byte, 56)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		st := StatusFor(err)
		if err != nil {
			if st == StatusOK || st == StatusDeviceError {
				t.Fatalf("decode error %v maps to %v", err, st)
			}
			return
		}
		if !r.Header.Opcode.Known() || r.Header.Flags != 0 || len(b) > MaxRequestSize {
			t.Fatalf("accepted %+v from %d bytes", r.Header, len(b))
		}
		if n, ok := r.Header.Opcode.RequestSize(); ok && n != len(r.Payload) {
			t.Fatalf("%v payload %d bytes, want %d", r.Header.Opcode, len(r.Payload), n)
		}
		if !bytes.Equal(AppendRequest(nil, r.Header.Opcode, r.Payload), b) {
			t.Fatal("accepted request does not re-encode to its input")
		}
	})
}

// FuzzConfig checks that the driver's config-space decoding and validation
// survive whatever a device (or a hostile host, for a confidential guest)
// puts there.
func FuzzConfig(f *testing.F) {
	db, _ := NewDoorbellLayout(DefaultLimits, 4096)
	good, _ := Config{ABIVersion: ABIVersion, Limits: DefaultLimits, PhysPortCnt: 1, Doorbell: db}.MarshalBinary()
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		if err := c.UnmarshalBinary(b); err != nil {
			return
		}
		if c.Validate() == nil {
			// A valid layout's records must fit its region.
			if off, ok := c.Doorbell.RecordOffset(c.Doorbell.Records - 1); !ok || off+uint64(c.Doorbell.RecordSize) > c.Doorbell.Size() {
				t.Fatalf("valid config with records outside the region: %+v", c.Doorbell)
			}
		}
		again, _ := c.MarshalBinary()
		if !bytes.Equal(again[:ConfigOffReserved], b[:ConfigOffReserved]) {
			t.Fatal("config does not re-encode")
		}
	})
}

// FuzzDecodePayload feeds arbitrary bytes to every opcode's request and
// response payload types, as a guest (requests) or a device (responses)
// could. Nothing may panic; what is accepted must re-encode to exactly its
// input (the layout is a bijection, so the device and the driver agree on
// what a request says), and the framing decoder must agree on the length.
// The seeds in testdata/fuzz/FuzzDecodePayload hold a valid request of
// every opcode.
func FuzzDecodePayload(f *testing.F) {
	for _, op := range Opcodes() {
		n, _ := op.RequestSize()
		f.Add(uint8(op), make([]byte, n))
	}
	f.Fuzz(func(t *testing.T, rawOp uint8, b []byte) {
		op := Opcode(rawOp)
		_, frameErr := DecodeRequest(AppendRequest(nil, op, b))
		if len(b) > MaxRequestSize-RequestHeaderSize {
			// The framing refuses it before it looks at the opcode.
			if frameErr == nil {
				t.Fatalf("opcode %d: a %d-byte payload framed", rawOp, len(b))
			}
			return
		}
		p, known := opPayloads[op]
		if !known {
			if !errors.Is(frameErr, ErrUnknownOpcode) {
				t.Fatalf("opcode %d: %v", rawOp, frameErr)
			}
			return
		}
		if (frameErr == nil) != (len(b) == p.reqSize) {
			t.Fatalf("%v: %d-byte payload: framing says %v", op, len(b), frameErr)
		}
		for i, newV := range []func() any{p.newReq, p.newResp} {
			if newV == nil {
				continue
			}
			v := newV()
			if attr, ok := v.(*DeviceAttr); ok {
				if attr.UnmarshalBinary(b) == nil {
					again, _ := attr.MarshalBinary()
					if !bytes.Equal(again[:attrOffReserved], b[:attrOffReserved]) {
						t.Fatalf("device attr does not re-encode")
					}
				}
				continue
			}
			err := DecodePayload(b, v)
			if err != nil {
				if st := StatusFor(err); st != StatusInvalidArgument {
					t.Fatalf("%v %T: %v maps to %v", op, v, err, st)
				}
				continue
			}
			if i == 0 && frameErr != nil {
				t.Fatalf("%v: %T decoded %d bytes the framing refuses: %v", op, v, len(b), frameErr)
			}
			if again := EncodePayload(nil, v); !bytes.Equal(again, b) {
				t.Fatalf("%v %T: accepted %x, re-encodes to %x", op, v, b, again)
			}
			// Decoding is deterministic and validation idempotent.
			w := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := DecodePayload(b, w); err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("%v %T: second decode differs: %v", op, v, err)
			}
		}
	})
}

// FuzzSendWQE feeds arbitrary slots to the send-WQE decoder, as a guest
// writing its SQ ring could, with arbitrary QP limits. Nothing may panic;
// an accepted WQE must re-encode to the same header bytes and describe
// only what fits its slot and limits.
func FuzzSendWQE(f *testing.F) {
	valid := make([]byte, 128)
	SendWQE{WRID: 1, Opcode: WRSend, Flags: SendSignaled, NumSGE: 2}.Put(valid)
	f.Add(valid, uint8(4), uint16(64))
	f.Fuzz(func(t *testing.T, b []byte, maxSGE uint8, maxInline uint16) {
		w, err := DecodeSendWQE(b, uint32(maxSGE), uint32(maxInline))
		if err != nil {
			if st := StatusFor(err); st != StatusInvalidArgument {
				t.Fatalf("%v maps to %v", err, st)
			}
			return
		}
		hdr := make([]byte, SendWQEHeaderSize)
		w.Put(hdr)
		if !bytes.Equal(hdr, b[:SendWQEHeaderSize]) {
			t.Fatalf("accepted header %x re-encodes to %x", b[:SendWQEHeaderSize], hdr)
		}
		room := uint64(len(b) - SendWQEHeaderSize)
		switch {
		case !w.Opcode.Valid() || w.Flags&^sendFlagsAll != 0:
			t.Fatalf("accepted opcode %d flags %#x", w.Opcode, w.Flags)
		case w.Flags&SendInline != 0 && (uint64(w.InlineLen) > room || w.InlineLen > uint32(maxInline)):
			t.Fatalf("accepted %d inline bytes (slot room %d, max %d)", w.InlineLen, room, maxInline)
		case w.Flags&SendInline != 0 && (w.Opcode == WRRDMARead || w.Opcode.IsAtomic()):
			t.Fatalf("accepted inline %v", w.Opcode)
		case w.Flags&SendInline == 0 && (uint64(w.NumSGE)*SGESize > room || uint32(w.NumSGE) > uint32(maxSGE)):
			t.Fatalf("accepted %d SGEs (slot room %d, max %d)", w.NumSGE, room, maxSGE)
		case w.Flags&SendInline == 0 && w.InlineLen != 0:
			t.Fatalf("accepted inline_len %d without INLINE", w.InlineLen)
		case w.Opcode.IsAtomic() && w.NumSGE != 1:
			t.Fatalf("accepted %v with %d SGEs", w.Opcode, w.NumSGE)
		}
	})
}

// FuzzRecvWQE is FuzzSendWQE for the receive-WQE decoder.
func FuzzRecvWQE(f *testing.F) {
	valid := make([]byte, 64)
	RecvWQE{WRID: 1, NumSGE: 3}.Put(valid)
	f.Add(valid, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, maxSGE uint8) {
		w, err := DecodeRecvWQE(b, uint32(maxSGE))
		if err != nil {
			if st := StatusFor(err); st != StatusInvalidArgument {
				t.Fatalf("%v maps to %v", err, st)
			}
			return
		}
		hdr := make([]byte, RecvWQEHeaderSize)
		w.Put(hdr)
		if !bytes.Equal(hdr, b[:RecvWQEHeaderSize]) {
			t.Fatalf("accepted header %x re-encodes to %x", b[:RecvWQEHeaderSize], hdr)
		}
		if uint32(w.NumSGE) > uint32(maxSGE) || RecvWQEHeaderSize+int(w.NumSGE)*SGESize > len(b) {
			t.Fatalf("accepted %d SGEs in %d bytes, max %d", w.NumSGE, len(b), maxSGE)
		}
	})
}
