package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// testGID has a distinct byte at every position so that a GID written in
// the wrong byte order or at the wrong offset shows.
var testGID = GID{0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f}

// gidAt is testGID as single-byte fields at off: a GID is a byte string
// in network order, not a little-endian integer.
func gidAt(off int) []field {
	fs := make([]field, 16)
	for i := range fs {
		fs[i] = field{off + i, 1, uint64(testGID[i])}
	}
	return fs
}

func cat(groups ...[]field) []field {
	var out []field
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// The address vector used inside the goldens, and its fields at off.
var testAH = AHAttr{DGID: testGID, FlowLabel: 0x000a1b2c, SGIDIndex: 0x31, HopLimit: 0x32, TrafficClass: 0x33, SL: 0x34, Port: 0x35}

func ahAt(off int) []field {
	return cat(gidAt(off), []field{
		{off + 16, 4, 0x000a1b2c}, {off + 20, 1, 0x31}, {off + 21, 1, 0x32},
		{off + 22, 1, 0x33}, {off + 23, 1, 0x34}, {off + 24, 1, 0x35},
		// 25..31 reserved
	})
}

// testQPAttr has a distinct value in every field; reserved fields and
// sq_draining (QUERY_QP only) are zero so that it is a valid MODIFY_QP
// attribute block.
var testQPAttr = QPAttr{
	State: 0x01020304, CurState: 0x05060708, PathMTU: 0x090a0b0c, AccessFlags: 0x0d0e0f10,
	DestQPN: 0x11121314, RQPSN: 0x15161718, SQPSN: 0x191a1b1c, QKey: 0x1d1e1f20,
	PKeyIndex: 0x2122, Port: 0x23, MaxRdAtomic: 0x24, MaxDestRdAtomic: 0x25, MinRNRTimer: 0x26,
	Timeout: 0x27, RetryCnt: 0x28, RNRRetry: 0x29,
	AH: testAH,
}

func qpAttrAt(off int) []field {
	return cat([]field{
		{off + 0, 4, 0x01020304}, {off + 4, 4, 0x05060708}, {off + 8, 4, 0x090a0b0c}, {off + 12, 4, 0x0d0e0f10},
		{off + 16, 4, 0x11121314}, {off + 20, 4, 0x15161718}, {off + 24, 4, 0x191a1b1c}, {off + 28, 4, 0x1d1e1f20},
		{off + 32, 2, 0x2122}, {off + 34, 1, 0x23}, {off + 35, 1, 0x24}, {off + 36, 1, 0x25}, {off + 37, 1, 0x26},
		{off + 38, 1, 0x27}, {off + 39, 1, 0x28}, {off + 40, 1, 0x29},
		// 41 sq_draining, 42..47 reserved
	}, ahAt(off+48))
}

var testQPCap = QPCap{
	PDN: 0x61626364, SendCQN: 0x65666768, RecvCQN: 0x696a6b6c, SQSize: 0x6d6e6f70,
	RQSize: 0x71727374, MaxSendSGE: 0x75767778, MaxRecvSGE: 0x797a7b7c, MaxInlineData: 0x7d7e7f80,
	Type: 0x81, SigAll: 0x82, Reserved0: 0x8384, SRQN: 0x85868788,
}

func qpCapAt(off int) []field {
	return []field{
		{off + 0, 4, 0x61626364}, {off + 4, 4, 0x65666768}, {off + 8, 4, 0x696a6b6c}, {off + 12, 4, 0x6d6e6f70},
		{off + 16, 4, 0x71727374}, {off + 20, 4, 0x75767778}, {off + 24, 4, 0x797a7b7c}, {off + 28, 4, 0x7d7e7f80},
		{off + 32, 1, 0x81}, {off + 33, 1, 0x82}, {off + 34, 2, 0x8384}, {off + 36, 4, 0x85868788},
	}
}

// payloadGolden is one payload struct with a distinct value in every
// field and its expected encoding, spelled with literal offsets (the
// offsets of docs/spec.md). valid says whether DecodePayload accepts it;
// request goldens are valid, so they also check the decoder.
type payloadGolden struct {
	name   string
	v      any // pointer to the struct
	size   int
	fields []field
	valid  bool
}

func payloadGoldens() []payloadGolden {
	qpResp := &QueryQPResp{Attr: testQPAttr, Cap: testQPCap}
	// A device-written block may carry what a request may not.
	qpResp.Attr.SQDraining = 0x2a
	qpResp.Attr.Reserved0 = 0x2b2c
	qpResp.Attr.Reserved1 = 0x2d2e2f30
	qpResp.Attr.AH.Reserved = [7]uint8{0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97}
	return []payloadGolden{
		{"HandleReq", &HandleReq{Handle: 0x01020304}, 8, []field{{0, 4, 0x01020304}}, true},
		{"HandleResp", &HandleResp{Handle: 0x01020304, Reserved: 0x05060708}, 8,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}}, true},
		{"QueryPortReq", &QueryPortReq{Port: 0x01020304}, 8, []field{{0, 4, 0x01020304}}, true},
		{"PortAttr", &PortAttr{
			State: 0x01020304, MaxMTU: 0x05060708, ActiveMTU: 0x090a0b0c, GIDTableLen: 0x0d0e0f10,
			PortCapFlags: 0x11121314, MaxMsgSize: 0x15161718, PKeyTableLen: 0x191a, ActiveWidth: 0x1b,
			ActiveSpeed: 0x1c, PhysState: 0x1d, LinkLayer: 0x1e, Reserved0: 0x1f20,
			Reserved: [4]uint32{0x21222324, 0x25262728, 0x292a2b2c, 0x2d2e2f30},
		}, 48, []field{
			{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10},
			{16, 4, 0x11121314}, {20, 4, 0x15161718}, {24, 2, 0x191a}, {26, 1, 0x1b},
			{27, 1, 0x1c}, {28, 1, 0x1d}, {29, 1, 0x1e}, {30, 2, 0x1f20},
			{32, 4, 0x21222324}, {36, 4, 0x25262728}, {40, 4, 0x292a2b2c}, {44, 4, 0x2d2e2f30},
		}, true},
		{"GIDReq", &GIDReq{Port: 0x01020304, Index: 0x05060708}, 8,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}}, true},
		{"GIDEntry", &GIDEntry{GID: testGID, Type: 0x01020304, Flags: 0x05060708, Reserved: [2]uint32{0x090a0b0c, 0x0d0e0f10}}, 32,
			cat(gidAt(0), []field{{16, 4, 0x01020304}, {20, 4, 0x05060708}, {24, 4, 0x090a0b0c}, {28, 4, 0x0d0e0f10}}), true},
		{"AddGIDReq", &AddGIDReq{Port: 0x01020304, Index: 0x05060708, GID: testGID}, 24,
			cat([]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}}, gidAt(8)), true},
		{"CreateCQReq", &CreateCQReq{RingAddr: 0x0102030405060708, Entries: 0x090a0b0c}, 16,
			[]field{{0, 8, 0x0102030405060708}, {8, 4, 0x090a0b0c}}, true},
		{"CreateCQResp", &CreateCQResp{CQN: 0x01020304, DoorbellIndex: 0x05060708}, 8,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}}, true},
		{"ResizeCQReq", &ResizeCQReq{CQN: 0x01020304, Entries: 0x05060708, RingAddr: 0x090a0b0c0d0e0f10}, 16,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 8, 0x090a0b0c0d0e0f10}}, true},
		{"CreateQPReq", &CreateQPReq{
			PDN: 0x01020304, Type: QPTypeRC, SigAll: 1, SendCQN: 0x05060708, RecvCQN: 0x090a0b0c,
			SQSize: 0x0d0e0f10, RQSize: 0x11121314, MaxSendSGE: 0x15161718, MaxRecvSGE: 0x191a1b1c,
			MaxInlineData: 0x1d1e1f20, SRQN: 0x31323334, SQAddr: 0x2122232425262728, RQAddr: 0x292a2b2c2d2e2f30,
		}, 56, []field{
			{0, 4, 0x01020304}, {4, 1, 2}, {5, 1, 1}, {8, 4, 0x05060708}, {12, 4, 0x090a0b0c},
			{16, 4, 0x0d0e0f10}, {20, 4, 0x11121314}, {24, 4, 0x15161718}, {28, 4, 0x191a1b1c},
			{32, 4, 0x1d1e1f20}, {36, 4, 0x31323334}, {40, 8, 0x2122232425262728}, {48, 8, 0x292a2b2c2d2e2f30},
		}, true},
		{"CreateSRQReq", &CreateSRQReq{PDN: 0x01020304, Size: 0x05060708, MaxSGE: 0x090a0b0c, Limit: 0x0d0e0f10, RingAddr: 0x1112131415161718}, 24,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}, {16, 8, 0x1112131415161718}}, true},
		{"CreateSRQResp", &CreateSRQResp{SRQN: 0x01020304, DoorbellIndex: 0x05060708, Stride: 0x090a0b0c, Reserved: 0x0d0e0f10}, 16,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}}, true},
		{"ModifySRQReq", &ModifySRQReq{SRQN: 0x01020304, AttrMask: SRQAttrAll, MaxWR: 0x090a0b0c, Limit: 0x0d0e0f10}, 16,
			[]field{{0, 4, 0x01020304}, {4, 4, uint64(SRQAttrAll)}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}}, true},
		{"SRQAttr", &SRQAttr{PDN: 0x01020304, MaxWR: 0x05060708, MaxSGE: 0x090a0b0c, Limit: 0x0d0e0f10}, 16,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}}, true},
		{"CreateQPResp", &CreateQPResp{QPN: 0x01020304, DoorbellIndex: 0x05060708, SQStride: 0x090a0b0c, RQStride: 0x0d0e0f10}, 16,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}}, true},
		{"AHAttr", &AHAttr{DGID: testAH.DGID, FlowLabel: testAH.FlowLabel, SGIDIndex: 0x31, HopLimit: 0x32, TrafficClass: 0x33, SL: 0x34, Port: 0x35}, 32,
			ahAt(0), true},
		{"QPAttr", func() *QPAttr { a := testQPAttr; return &a }(), 80, qpAttrAt(0), true},
		{"ModifyQPReq", &ModifyQPReq{QPN: 0x71727374, AttrMask: 0x001a1b1c, Attr: testQPAttr}, 88,
			cat([]field{{0, 4, 0x71727374}, {4, 4, 0x001a1b1c}}, qpAttrAt(8)), true},
		{"QPCap", func() *QPCap { c := testQPCap; return &c }(), 40, qpCapAt(0), true},
		{"QueryQPResp", qpResp, 120, cat(qpAttrAt(0), []field{
			{41, 1, 0x2a}, {42, 2, 0x2b2c}, {44, 4, 0x2d2e2f30},
			{73, 1, 0x91}, {74, 1, 0x92}, {75, 1, 0x93}, {76, 1, 0x94}, {77, 1, 0x95}, {78, 1, 0x96}, {79, 1, 0x97},
		}, qpCapAt(80)), true},
		{"RegMRReq", &RegMRReq{
			PDN: 0x01020304, Access: AccessAll, IOVA: 0x05060708090a0b0c, Length: 0x0d0e0f1011121314,
			Addr: 0x15161718191a1b1c, PageShift: 21, NPages: 0x000f1e2d,
		}, 40, []field{
			{0, 4, 0x01020304}, {4, 4, 0xf}, {8, 8, 0x05060708090a0b0c}, {16, 8, 0x0d0e0f1011121314},
			{24, 8, 0x15161718191a1b1c}, {32, 4, 21}, {36, 4, 0x000f1e2d},
		}, true},
		{"RegMRResp", &RegMRResp{LKey: 0x01020304, RKey: 0x05060708}, 8,
			[]field{{0, 4, 0x01020304}, {4, 4, 0x05060708}}, true},
		{"CreateAHReq", &CreateAHReq{PDN: 0x01020304, AH: testAH}, 40,
			cat([]field{{0, 4, 0x01020304}}, ahAt(8)), true},
		{"SetDoorbellAreaReq", &SetDoorbellAreaReq{Addr: 0x0102030405060708, Length: 0x090a0b0c0d0e0f10}, 16,
			[]field{{0, 8, 0x0102030405060708}, {8, 8, 0x090a0b0c0d0e0f10}}, true},
	}
}

// TestPayloadLayouts pins every payload struct byte for byte and checks
// that it decodes back to the same value.
func TestPayloadLayouts(t *testing.T) {
	seen := map[reflect.Type]bool{}
	for _, g := range payloadGoldens() {
		t.Run(g.name, func(t *testing.T) {
			seen[reflect.TypeOf(g.v)] = true
			if n := binary.Size(g.v); n != g.size {
				t.Fatalf("size %d, documented %d", n, g.size)
			}
			want := expect(g.size, g.fields)
			got := EncodePayload(nil, g.v)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding\n got %x\nwant %x", got, want)
			}
			// Encoding appends: a prefix survives.
			if app := EncodePayload([]byte{0xee}, g.v); app[0] != 0xee || !bytes.Equal(app[1:], want) {
				t.Errorf("EncodePayload clobbered its prefix")
			}
			back := reflect.New(reflect.TypeOf(g.v).Elem()).Interface()
			err := DecodePayload(got, back)
			if (err == nil) != g.valid {
				t.Fatalf("decode: %v", err)
			}
			if err == nil && !reflect.DeepEqual(back, g.v) {
				t.Fatalf("round trip\n got %+v\nwant %+v", back, g.v)
			}
		})
	}
	// Every payload type of every opcode has a golden.
	for op, p := range opPayloads {
		for _, v := range []any{mk(p.newReq), mk(p.newResp)} {
			if _, isAttr := v.(*DeviceAttr); v != nil && !isAttr && !seen[reflect.TypeOf(v)] {
				t.Errorf("%v: %T has no layout golden", op, v)
			}
		}
	}
}

// TestPayloadSizes are the documented sizes of the payload structs, one
// line each, so that a size change names its struct.
func TestPayloadSizes(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{HandleReq{}, 8}, {HandleResp{}, 8}, {QueryPortReq{}, 8}, {PortAttr{}, 48}, {GIDReq{}, 8},
		{GIDEntry{}, 32}, {AddGIDReq{}, 24}, {CreateCQReq{}, 16}, {CreateCQResp{}, 8},
		{ResizeCQReq{}, 16}, {CreateQPReq{}, 56}, {CreateQPResp{}, 16}, {AHAttr{}, 32},
		{QPAttr{}, 80}, {ModifyQPReq{}, 88}, {QPCap{}, 40}, {QueryQPResp{}, 120},
		{RegMRReq{}, 40}, {RegMRResp{}, 8}, {CreateAHReq{}, 40}, {SetDoorbellAreaReq{}, 16},
	} {
		if got := binary.Size(c.v); got != c.want {
			t.Errorf("%T: %d bytes, documented %d", c.v, got, c.want)
		}
	}
}

// validRequests are requests DecodePayload accepts, with their reserved
// byte ranges [from, to). Setting any reserved byte must be rejected.
func validRequests() []struct {
	name     string
	v        any
	reserved [][2]int
} {
	return []struct {
		name     string
		v        any
		reserved [][2]int
	}{
		{"HandleReq", &HandleReq{Handle: 5}, [][2]int{{4, 8}}},
		{"QueryPortReq", &QueryPortReq{Port: 1}, [][2]int{{4, 8}}},
		{"CreateCQReq", &CreateCQReq{RingAddr: 0x10000, Entries: 64}, [][2]int{{12, 16}}},
		{"CreateQPReq", &CreateQPReq{PDN: 1, Type: QPTypeRC, SendCQN: 1, RecvCQN: 2, SQSize: 64, RQSize: 64,
			MaxSendSGE: 4, MaxRecvSGE: 4, SQAddr: 0x20000, RQAddr: 0x30000}, [][2]int{{6, 8}}},
		// sq_draining (attr offset 41) is written by QUERY_QP only.
		{"ModifyQPReq", &ModifyQPReq{QPN: 2, AttrMask: QPAttrState, Attr: testQPAttr},
			[][2]int{{8 + 41, 8 + 48}, {8 + 48 + 25, 8 + 80}}},
		{"CreateAHReq", &CreateAHReq{PDN: 1, AH: testAH}, [][2]int{{4, 8}, {8 + 25, 40}}},
		// page_shift without a page list.
		{"RegMRReq", &RegMRReq{PDN: 1, Access: AccessLocalWrite, IOVA: 0x1000, Length: 0x1000, Addr: 0x1000},
			[][2]int{{32, 36}}},
	}
}

func TestPayloadReservedRejected(t *testing.T) {
	for _, r := range validRequests() {
		enc := EncodePayload(nil, r.v)
		fresh := func() any { return reflect.New(reflect.TypeOf(r.v).Elem()).Interface() }
		if err := DecodePayload(enc, fresh()); err != nil {
			t.Errorf("%s: valid request rejected: %v", r.name, err)
			continue
		}
		for _, rng := range r.reserved {
			for off := rng[0]; off < rng[1]; off++ {
				for _, bit := range []byte{0x01, 0x80} {
					b := bytes.Clone(enc)
					b[off] |= bit
					err := DecodePayload(b, fresh())
					if !errors.Is(err, ErrReservedNonZero) || StatusFor(err) != StatusInvalidArgument {
						t.Errorf("%s: reserved byte %d = %#x: %v (status %v)", r.name, off, b[off], err, StatusFor(err))
					}
				}
			}
		}
	}
}

// TestReservedFieldsByName sets each Reserved field through the struct,
// so that a Validate that forgets one fails even if the byte test's
// offsets were wrong.
func TestReservedFieldsByName(t *testing.T) {
	for name, v := range map[string]interface{ Validate() error }{
		"HandleReq.Reserved":              &HandleReq{Handle: 1, Reserved: 1},
		"QueryPortReq.Reserved":           &QueryPortReq{Port: 1, Reserved: 1 << 31},
		"CreateCQReq.Flags":               &CreateCQReq{Entries: 1, Flags: 1},
		"CreateQPReq.Reserved0":           &CreateQPReq{Type: QPTypeRC, Reserved0: 1},
		"AHAttr.Reserved":                 &AHAttr{Reserved: [7]uint8{6: 1}},
		"QPAttr.Reserved0":                &QPAttr{Reserved0: 1},
		"QPAttr.Reserved1":                &QPAttr{Reserved1: 1},
		"QPAttr.SQDraining":               &QPAttr{SQDraining: 1},
		"QPAttr.AH.Reserved":              &QPAttr{AH: AHAttr{Reserved: [7]uint8{1}}},
		"ModifyQPReq.Attr.Reserved1":      &ModifyQPReq{Attr: QPAttr{Reserved1: 1}},
		"ModifyQPReq.Attr.AH.Reserved":    &ModifyQPReq{Attr: QPAttr{AH: AHAttr{Reserved: [7]uint8{3: 1}}}},
		"CreateAHReq.Reserved":            &CreateAHReq{Reserved: 1},
		"CreateAHReq.AH.Reserved":         &CreateAHReq{AH: AHAttr{Reserved: [7]uint8{0: 0xff}}},
		"RegMRReq.PageShift without list": &RegMRReq{PageShift: 12},
	} {
		if err := v.Validate(); !errors.Is(err, ErrReservedNonZero) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCreateQPValidate(t *testing.T) {
	for _, c := range []struct {
		typ    QPType
		sigAll uint8
		ok     bool
	}{
		{QPTypeRC, 0, true}, {QPTypeRC, 1, true},
		// UD is part of the ABI; the device, not the decoder, refuses it
		// while it does not implement UD.
		{QPTypeUD, 0, true},
		{0, 0, false}, {1, 0, false}, {3, 0, false}, {5, 0, false}, {0xff, 0, false},
		{QPTypeRC, 2, false}, {QPTypeRC, 0xff, false},
	} {
		r := CreateQPReq{Type: c.typ, SigAll: c.sigAll}
		err := DecodePayload(EncodePayload(nil, &r), new(CreateQPReq))
		if c.ok != (err == nil) || (err != nil && (!errors.Is(err, ErrBadValue) || StatusFor(err) != StatusInvalidArgument)) {
			t.Errorf("type %v sig_all %d: %v", c.typ, c.sigAll, err)
		}
	}
}

func TestModifySRQValidate(t *testing.T) {
	for m := SRQAttrMask(0); m < 1<<4; m++ {
		r := ModifySRQReq{SRQN: 1, AttrMask: m}
		err := DecodePayload(EncodePayload(nil, &r), new(ModifySRQReq))
		if wantOK := m&^SRQAttrAll == 0; wantOK != (err == nil) || (err != nil && StatusFor(err) != StatusInvalidArgument) {
			t.Errorf("attr_mask %#x: %v", uint32(m), err)
		}
	}
}

func TestAccessValidate(t *testing.T) {
	// Every combination of the defined bits: remote write or atomic
	// without local write is the only invalid one.
	for a := Access(0); a <= AccessAll; a++ {
		wantOK := a&(AccessRemoteWrite|AccessRemoteAtomic) == 0 || a&AccessLocalWrite != 0
		err := a.Validate()
		if wantOK != (err == nil) || (err != nil && !errors.Is(err, ErrBadValue)) {
			t.Errorf("access %#x: %v", uint32(a), err)
		}
		// The same through REG_MR.
		r := RegMRReq{Access: a}
		err = DecodePayload(EncodePayload(nil, &r), new(RegMRReq))
		if wantOK != (err == nil) || (err != nil && StatusFor(err) != StatusInvalidArgument) {
			t.Errorf("reg mr access %#x: %v", uint32(a), err)
		}
	}
	for _, a := range []Access{1 << 4, 1 << 31, AccessLocalWrite | 1<<5} {
		if err := a.Validate(); !errors.Is(err, ErrBadValue) {
			t.Errorf("undefined access bits %#x: %v", uint32(a), err)
		}
	}
	if AccessLocalWrite != 1 || AccessRemoteWrite != 2 || AccessRemoteRead != 4 || AccessRemoteAtomic != 8 {
		t.Errorf("access bits are not the IBV_ACCESS_* values")
	}
}

func TestRegMRValidate(t *testing.T) {
	for _, c := range []struct {
		shift, npages uint32
		err           error
	}{
		{0, 0, nil},           // contiguous range
		{12, 1, nil},          // 4 KiB pages
		{21, 512, nil},        // 2 MiB pages
		{30, 1, nil},          // 1 GiB pages
		{16, MaxMRPages, nil}, // the largest page list
		{11, 1, ErrBadValue},  // below 4 KiB
		{31, 1, ErrBadValue},  // above 1 GiB
		{0, 1, ErrBadValue},   // page list without a page size
		{12, MaxMRPages + 1, ErrBadValue},
		{12, 0xffffffff, ErrBadValue},
		{12, 0, ErrReservedNonZero}, // page size without a page list
	} {
		r := RegMRReq{PDN: 1, Access: AccessLocalWrite, PageShift: c.shift, NPages: c.npages}
		err := DecodePayload(EncodePayload(nil, &r), new(RegMRReq))
		if (c.err == nil) != (err == nil) || !errors.Is(err, c.err) {
			t.Errorf("page_shift %d npages %d: %v, want %v", c.shift, c.npages, err, c.err)
		}
	}
}

func TestModifyQPValidate(t *testing.T) {
	for _, c := range []struct {
		mask QPAttrMask
		ok   bool
	}{
		{0, true}, {QPAttrState, true}, {QPAttrAll, true}, {QPAttrDestQPN, true},
		{1 << 21, false}, {QPAttrState | 1<<21, false}, {1 << 31, false}, {0xffffffff, false},
	} {
		r := ModifyQPReq{QPN: 2, AttrMask: c.mask}
		err := DecodePayload(EncodePayload(nil, &r), new(ModifyQPReq))
		if c.ok != (err == nil) || (err != nil && (!errors.Is(err, ErrBadValue) || StatusFor(err) != StatusInvalidArgument)) {
			t.Errorf("attr_mask %#x: %v", uint32(c.mask), err)
		}
	}
	if QPAttrAll != 0x1fffff || QPAttrDestQPN != 1<<20 || QPAttrMinRNRTimer != 1<<15 {
		t.Errorf("attr mask bits are not the IBV_QP_* values")
	}
}

func TestDecodePayloadErrors(t *testing.T) {
	for _, g := range payloadGoldens() {
		fresh := func() any { return reflect.New(reflect.TypeOf(g.v).Elem()).Interface() }
		enc := EncodePayload(nil, g.v)
		if err := DecodePayload(enc[:len(enc)-1], fresh()); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("%s short: %v", g.name, err)
		}
		if err := DecodePayload(append(enc, 0), fresh()); !errors.Is(err, ErrBadLength) {
			t.Errorf("%s long: %v", g.name, err)
		}
		if err := DecodePayload(nil, fresh()); !errors.Is(err, ErrShortBuffer) || StatusFor(err) != StatusInvalidArgument {
			t.Errorf("%s empty: %v", g.name, err)
		}
	}
	// Something that is not a fixed-size payload struct is refused, not
	// decoded.
	for _, v := range []any{new(string), &struct{ S []byte }{}, nil} {
		if err := DecodePayload(make([]byte, 8), v); !errors.Is(err, ErrBadValue) {
			t.Errorf("%T: %v", v, err)
		}
	}
}

func TestEncodePayloadPanicsOnNonPayload(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("EncodePayload of a string did not panic")
		}
	}()
	EncodePayload(nil, "not a payload")
}
