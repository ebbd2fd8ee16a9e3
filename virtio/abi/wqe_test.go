package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestWQESizes(t *testing.T) {
	if SGESize != 16 || SendWQEHeaderSize != 64 || RecvWQEHeaderSize != 16 || CQESize != 32 || EventSize != 16 {
		t.Errorf("sge %d send %d recv %d cqe %d event %d", SGESize, SendWQEHeaderSize, RecvWQEHeaderSize, CQESize, EventSize)
	}
	if binary.Size(SGE{}) != SGESize || binary.Size(CQE{}) != CQESize || binary.Size(Event{}) != EventSize {
		t.Errorf("hand-written sizes disagree with the structs")
	}
}

func TestSGELayout(t *testing.T) {
	s := SGE{Addr: 0x0102030405060708, Length: 0x090a0b0c, LKey: 0x0d0e0f10}
	want := expect(16, []field{{0, 8, 0x0102030405060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}})
	b := bytes.Repeat([]byte{0xff}, 17)
	s.Put(b)
	if !bytes.Equal(b[:16], want) || b[16] != 0xff {
		t.Fatalf("SGE encoding %x, want %x", b, want)
	}
	if got := DecodeSGE(b); got != s {
		t.Fatalf("round trip %+v", got)
	}
}

// testSendWQE has a distinct value in every field (not a valid WQE: Put
// does not judge, it only encodes).
var testSendWQE = SendWQE{
	WRID: 0x0102030405060708, Opcode: 0x09, Flags: 0x0a, NumSGE: 0x0b0c, Imm: 0x0d0e0f10,
	RemoteAddr: 0x1112131415161718, RKey: 0x191a1b1c, InlineLen: 0x1d1e1f20,
	CompareAdd: 0x2122232425262728, Swap: 0x292a2b2c2d2e2f30,
	AH: 0x31323334, RemoteQPN: 0x35363738, RemoteQKey: 0x393a3b3c,
}

func TestSendWQELayout(t *testing.T) {
	want := expect(64, []field{
		{0x00, 8, 0x0102030405060708}, {0x08, 1, 0x09}, {0x09, 1, 0x0a}, {0x0a, 2, 0x0b0c},
		{0x0c, 4, 0x0d0e0f10}, {0x10, 8, 0x1112131415161718}, {0x18, 4, 0x191a1b1c},
		{0x1c, 4, 0x1d1e1f20}, {0x20, 8, 0x2122232425262728}, {0x28, 8, 0x292a2b2c2d2e2f30},
		{0x30, 4, 0x31323334}, {0x34, 4, 0x35363738}, {0x38, 4, 0x393a3b3c},
		// 0x3c reserved, written as zero
	})
	// Put writes the whole header, reserved word included, and nothing
	// past it (the SGEs the driver wrote stay).
	b := bytes.Repeat([]byte{0xff}, 80)
	testSendWQE.Put(b)
	if !bytes.Equal(b[:64], want) {
		t.Fatalf("send WQE encoding\n got %x\nwant %x", b[:64], want)
	}
	if !bytes.Equal(b[64:], bytes.Repeat([]byte{0xff}, 16)) {
		t.Fatalf("Put wrote past the header")
	}
}

func TestSendWQERoundTrip(t *testing.T) {
	for _, w := range []SendWQE{
		{WRID: 1, Opcode: WRSend, Flags: SendSignaled, NumSGE: 2},
		{WRID: 2, Opcode: WRSendWithImm, Flags: SendSolicited | SendFence, NumSGE: 16, Imm: 0xdeadbeef},
		{WRID: 3, Opcode: WRRDMAWrite, NumSGE: 1, RemoteAddr: 0x1000, RKey: 0x105},
		{WRID: 4, Opcode: WRRDMAWriteWithImm, Flags: SendInline | SendSignaled, InlineLen: 256, Imm: 7, RemoteAddr: 8, RKey: 9},
		{WRID: 5, Opcode: WRSend, Flags: SendInline, InlineLen: 0},
		{WRID: 6, Opcode: WRRDMARead, NumSGE: 3, RemoteAddr: 0xfff0, RKey: 0x205},
		{WRID: 7, Opcode: WRRDMARead, NumSGE: 0, RemoteAddr: 0, RKey: 0x205}, // zero-length READ is legal
		{WRID: 8, Opcode: WRAtomicCmpSwap, NumSGE: 1, RemoteAddr: 0x40, RKey: 0x305, CompareAdd: 10, Swap: 11},
		{WRID: 9, Opcode: WRAtomicFetchAdd, Flags: SendSignaled | SendFence, NumSGE: 1, RemoteAddr: 0x48, RKey: 0x305, CompareAdd: 1},
		{WRID: 10, Opcode: WRSend, NumSGE: 1, AH: 3, RemoteQPN: 4, RemoteQKey: 5}, // UD fields carried
		{WRID: ^uint64(0), Opcode: WRSend, Flags: sendFlagsAll &^ SendInline, NumSGE: 16},
	} {
		b := make([]byte, 64+16*16)
		w.Put(b)
		got, err := DecodeSendWQE(b, 16, 256)
		if err != nil || got != w {
			t.Errorf("%+v: got %+v, %v", w, got, err)
		}
	}
}

func TestDecodeSendWQERejects(t *testing.T) {
	const maxSGE, maxInline = 4, 64
	base := SendWQE{WRID: 1, Opcode: WRSend, Flags: SendSignaled, NumSGE: 2}
	slot := int(SendWQEStride(maxSGE, maxInline)) // 128: 4 SGEs or 64 inline bytes
	if slot != 128 {
		t.Fatalf("stride %d", slot)
	}
	type tc struct {
		name string
		mut  func(w *SendWQE, b []byte) []byte // returns the slot to decode
		max  [2]uint32                         // maxSGE, maxInline (zero: the defaults)
		err  error
	}
	set := func(f func(*SendWQE)) func(*SendWQE, []byte) []byte {
		return func(w *SendWQE, b []byte) []byte { f(w); w.Put(b); return b }
	}
	raw := func(off int, v byte) func(*SendWQE, []byte) []byte {
		return func(w *SendWQE, b []byte) []byte { w.Put(b); b[off] = v; return b }
	}
	cases := []tc{
		{"valid", set(func(w *SendWQE) {}), [2]uint32{}, nil},
		{"opcode 7", set(func(w *SendWQE) { w.Opcode = 7 }), [2]uint32{}, ErrBadValue},
		{"opcode 255", set(func(w *SendWQE) { w.Opcode = 0xff }), [2]uint32{}, ErrBadValue},
		{"flag 1<<4", set(func(w *SendWQE) { w.Flags |= 1 << 4 }), [2]uint32{}, ErrBadValue},
		{"flag 1<<7", set(func(w *SendWQE) { w.Flags |= 1 << 7 }), [2]uint32{}, ErrBadValue},
		{"reserved byte 0x3c", raw(0x3c, 1), [2]uint32{}, ErrReservedNonZero},
		{"reserved byte 0x3d", raw(0x3d, 1), [2]uint32{}, ErrReservedNonZero},
		{"reserved byte 0x3e", raw(0x3e, 1), [2]uint32{}, ErrReservedNonZero},
		{"reserved byte 0x3f", raw(0x3f, 0x80), [2]uint32{}, ErrReservedNonZero},
		{"sge count = max", set(func(w *SendWQE) { w.NumSGE = maxSGE }), [2]uint32{}, nil},
		{"sge count > max", set(func(w *SendWQE) { w.NumSGE = maxSGE + 1 }), [2]uint32{}, ErrBadValue},
		{"sge count 0xffff", set(func(w *SendWQE) { w.NumSGE = 0xffff }), [2]uint32{}, ErrBadValue},
		// A max_sge larger than the slot holds (a device bug or a hostile
		// stride) still cannot read past the slot.
		{"sge count > slot", set(func(w *SendWQE) { w.NumSGE = 5 }), [2]uint32{64, maxInline}, ErrBadValue},
		{"inline = max", set(func(w *SendWQE) { w.Flags |= SendInline; w.InlineLen = maxInline }), [2]uint32{}, nil},
		{"inline > max", set(func(w *SendWQE) { w.Flags |= SendInline; w.InlineLen = maxInline + 1 }), [2]uint32{}, ErrBadValue},
		{"inline huge", set(func(w *SendWQE) { w.Flags |= SendInline; w.InlineLen = 0xffffffff }), [2]uint32{}, ErrBadValue},
		{"inline = slot", set(func(w *SendWQE) { w.Flags |= SendInline; w.InlineLen = 64 }), [2]uint32{maxSGE, 1024}, nil},
		{"inline > slot", set(func(w *SendWQE) { w.Flags |= SendInline; w.InlineLen = 65 }), [2]uint32{maxSGE, 1024}, ErrBadValue},
		{"inline write", set(func(w *SendWQE) { w.Opcode = WRRDMAWrite; w.Flags |= SendInline; w.InlineLen = 8 }), [2]uint32{}, nil},
		{"inline read", set(func(w *SendWQE) { w.Opcode = WRRDMARead; w.Flags |= SendInline; w.InlineLen = 8 }), [2]uint32{}, ErrBadValue},
		{"inline cmp swap", set(func(w *SendWQE) { w.Opcode = WRAtomicCmpSwap; w.Flags |= SendInline; w.InlineLen = 8; w.NumSGE = 1 }), [2]uint32{}, ErrBadValue},
		{"inline fetch add", set(func(w *SendWQE) { w.Opcode = WRAtomicFetchAdd; w.Flags |= SendInline; w.InlineLen = 8; w.NumSGE = 1 }), [2]uint32{}, ErrBadValue},
		{"inline_len without INLINE", set(func(w *SendWQE) { w.InlineLen = 1 }), [2]uint32{}, ErrReservedNonZero},
		{"cmp swap 1 sge", set(func(w *SendWQE) { w.Opcode = WRAtomicCmpSwap; w.NumSGE = 1 }), [2]uint32{}, nil},
		{"cmp swap 0 sges", set(func(w *SendWQE) { w.Opcode = WRAtomicCmpSwap; w.NumSGE = 0 }), [2]uint32{}, ErrBadValue},
		{"cmp swap 2 sges", set(func(w *SendWQE) { w.Opcode = WRAtomicCmpSwap; w.NumSGE = 2 }), [2]uint32{}, ErrBadValue},
		{"fetch add 0 sges", set(func(w *SendWQE) { w.Opcode = WRAtomicFetchAdd; w.NumSGE = 0 }), [2]uint32{}, ErrBadValue},
		{"fetch add 3 sges", set(func(w *SendWQE) { w.Opcode = WRAtomicFetchAdd; w.NumSGE = 3 }), [2]uint32{}, ErrBadValue},
		{"short slot", func(w *SendWQE, b []byte) []byte { w.Put(b); return b[:63] }, [2]uint32{}, ErrShortBuffer},
		{"empty slot", func(w *SendWQE, b []byte) []byte { return nil }, [2]uint32{}, ErrShortBuffer},
	}
	for _, c := range cases {
		w := base
		b := c.mut(&w, make([]byte, slot))
		ms, mi := uint32(maxSGE), uint32(maxInline)
		if c.max != [2]uint32{} {
			ms, mi = c.max[0], c.max[1]
		}
		_, err := DecodeSendWQE(b, ms, mi)
		if (c.err == nil) != (err == nil) || !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
		if err != nil && StatusFor(err) != StatusInvalidArgument {
			t.Errorf("%s: %v is not a malformed-input error", c.name, err)
		}
	}
}

func TestRecvWQELayout(t *testing.T) {
	w := RecvWQE{WRID: 0x0102030405060708, NumSGE: 0x090a}
	want := expect(16, []field{{0, 8, 0x0102030405060708}, {8, 2, 0x090a}})
	b := bytes.Repeat([]byte{0xff}, 32)
	w.Put(b)
	if !bytes.Equal(b[:16], want) || !bytes.Equal(b[16:], bytes.Repeat([]byte{0xff}, 16)) {
		t.Fatalf("recv WQE encoding %x, want %x", b, want)
	}
	w.NumSGE = 4
	b = make([]byte, RecvWQEStride(4))
	w.Put(b)
	if got, err := DecodeRecvWQE(b, 4); err != nil || got != w {
		t.Fatalf("round trip %+v %v", got, err)
	}
}

func TestDecodeRecvWQERejects(t *testing.T) {
	slot := func(n uint16, size int) []byte {
		b := make([]byte, size)
		RecvWQE{WRID: 9, NumSGE: n}.Put(b)
		return b
	}
	for off := 0x0a; off < 0x10; off++ {
		b := slot(1, 32)
		b[off] = 1
		if _, err := DecodeRecvWQE(b, 1); !errors.Is(err, ErrReservedNonZero) {
			t.Errorf("reserved byte %#x: %v", off, err)
		}
	}
	for _, c := range []struct {
		name   string
		b      []byte
		maxSGE uint32
		err    error
	}{
		{"no sges", slot(0, 16), 0, nil},
		{"max sges", slot(4, 80), 4, nil},
		{"over max", slot(5, 128), 4, ErrBadValue},
		{"0xffff", slot(0xffff, 128), 4, ErrBadValue},
		{"over slot", slot(2, 32), 4, ErrBadValue},
		{"short", slot(0, 16)[:15], 4, ErrShortBuffer},
		{"nil", nil, 4, ErrShortBuffer},
	} {
		_, err := DecodeRecvWQE(c.b, c.maxSGE)
		if (c.err == nil) != (err == nil) || !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
}

func TestCQELayout(t *testing.T) {
	c := CQE{
		WRID: 0x0102030405060708, Status: 0x09, Opcode: 0x0a, Flags: 0x0b0c, ByteLen: 0x0d0e0f10,
		Imm: 0x11121314, QPN: 0x15161718, SrcQP: 0x191a1b1c, VendorErr: 0x1d1e1f20,
	}
	want := expect(32, []field{
		{0x00, 8, 0x0102030405060708}, {0x08, 1, 0x09}, {0x09, 1, 0x0a}, {0x0a, 2, 0x0b0c},
		{0x0c, 4, 0x0d0e0f10}, {0x10, 4, 0x11121314}, {0x14, 4, 0x15161718},
		{0x18, 4, 0x191a1b1c}, {0x1c, 4, 0x1d1e1f20},
	})
	b := bytes.Repeat([]byte{0xff}, 33)
	c.Put(b)
	if !bytes.Equal(b[:32], want) || b[32] != 0xff {
		t.Fatalf("CQE encoding\n got %x\nwant %x", b, want)
	}
	if got := DecodeCQE(b); got != c {
		t.Fatalf("round trip %+v", got)
	}
}

func TestStrides(t *testing.T) {
	for _, c := range []struct{ sge, inline, want uint32 }{
		{0, 0, 64}, {1, 0, 128}, {4, 0, 128}, {5, 0, 256}, {16, 0, 512},
		{0, 1, 128}, {0, 64, 128}, {0, 65, 256}, {1, 256, 512}, {16, 256, 512},
		{64, 1024, 2048}, {17, 0, 512},
	} {
		if got := SendWQEStride(c.sge, c.inline); got != c.want {
			t.Errorf("SendWQEStride(%d, %d) = %d, want %d", c.sge, c.inline, got, c.want)
		}
	}
	for _, c := range []struct{ sge, want uint32 }{
		{0, 16}, {1, 32}, {2, 64}, {3, 64}, {4, 128}, {15, 256}, {16, 512}, {64, 2048},
	} {
		if got := RecvWQEStride(c.sge); got != c.want {
			t.Errorf("RecvWQEStride(%d) = %d, want %d", c.sge, got, c.want)
		}
	}
	// Over the whole ABI range: a power of two, large enough, and the
	// smallest such (so the guest wastes at most half a slot).
	pow2 := func(v uint32) bool { return v != 0 && v&(v-1) == 0 }
	for sge := uint32(0); sge <= CeilingLimits.MaxSGE; sge++ {
		for inline := uint32(0); inline <= CeilingLimits.MaxInlineData; inline += 7 {
			need := SendWQEHeaderSize + max(sge*SGESize, inline)
			s := SendWQEStride(sge, inline)
			if !pow2(s) || s < need || s/2 >= need {
				t.Fatalf("SendWQEStride(%d, %d) = %d for %d bytes", sge, inline, s, need)
			}
		}
		need := RecvWQEHeaderSize + sge*SGESize
		if s := RecvWQEStride(sge); !pow2(s) || s < need || s/2 >= need {
			t.Fatalf("RecvWQEStride(%d) = %d for %d bytes", sge, s, need)
		}
	}
	// Every slot a stride describes decodes a WQE with max SGEs or max
	// inline bytes.
	b := make([]byte, SendWQEStride(3, 100))
	SendWQE{Opcode: WRSend, NumSGE: 3}.Put(b)
	if _, err := DecodeSendWQE(b, 3, 100); err != nil {
		t.Errorf("max SGEs in their stride: %v", err)
	}
	SendWQE{Opcode: WRSend, Flags: SendInline, InlineLen: 100}.Put(b)
	if _, err := DecodeSendWQE(b, 3, 100); err != nil {
		t.Errorf("max inline in its stride: %v", err)
	}
}
