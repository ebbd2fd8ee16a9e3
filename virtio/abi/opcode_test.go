package abi

import (
	"encoding/binary"
	"errors"
	"testing"
)

// opPayloads is the specification's table of every opcode's payloads,
// written out by hand (from docs/spec.md) rather than derived from
// opTable, so that the two are checked against each other. newReq and
// newResp return a fresh pointer to the payload struct, or nil for an
// empty payload; reqSize and respSize are the documented sizes.
var opPayloads = map[Opcode]struct {
	newReq, newResp   func() any
	reqSize, respSize int
}{
	OpQueryDevice:     {nil, func() any { return new(DeviceAttr) }, 0, 160},
	OpQueryPort:       {func() any { return new(QueryPortReq) }, func() any { return new(PortAttr) }, 8, 48},
	OpQueryGID:        {func() any { return new(GIDReq) }, func() any { return new(GIDEntry) }, 8, 32},
	OpAddGID:          {func() any { return new(AddGIDReq) }, nil, 24, 0},
	OpDelGID:          {func() any { return new(GIDReq) }, nil, 8, 0},
	OpAllocPD:         {nil, func() any { return new(HandleResp) }, 0, 8},
	OpDeallocPD:       {func() any { return new(HandleReq) }, nil, 8, 0},
	OpCreateCQ:        {func() any { return new(CreateCQReq) }, func() any { return new(CreateCQResp) }, 16, 8},
	OpResizeCQ:        {func() any { return new(ResizeCQReq) }, nil, 16, 0},
	OpDestroyCQ:       {func() any { return new(HandleReq) }, nil, 8, 0},
	OpCreateQP:        {func() any { return new(CreateQPReq) }, func() any { return new(CreateQPResp) }, 56, 16},
	OpModifyQP:        {func() any { return new(ModifyQPReq) }, nil, 88, 0},
	OpQueryQP:         {func() any { return new(HandleReq) }, func() any { return new(QueryQPResp) }, 8, 120},
	OpDestroyQP:       {func() any { return new(HandleReq) }, nil, 8, 0},
	OpRegMR:           {func() any { return new(RegMRReq) }, func() any { return new(RegMRResp) }, 40, 8},
	OpDeregMR:         {func() any { return new(HandleReq) }, nil, 8, 0},
	OpCreateAH:        {func() any { return new(CreateAHReq) }, func() any { return new(HandleResp) }, 40, 8},
	OpDestroyAH:       {func() any { return new(HandleReq) }, nil, 8, 0},
	OpSetDoorbellArea: {func() any { return new(SetDoorbellAreaReq) }, nil, 16, 0},
	OpResetState:      {nil, nil, 0, 0},
	OpCreateSRQ:       {func() any { return new(CreateSRQReq) }, func() any { return new(CreateSRQResp) }, 24, 16},
	OpModifySRQ:       {func() any { return new(ModifySRQReq) }, nil, 16, 0},
	OpQuerySRQ:        {func() any { return new(HandleReq) }, func() any { return new(SRQAttr) }, 8, 16},
	OpDestroySRQ:      {func() any { return new(HandleReq) }, nil, 8, 0},
}

// encodedSize is the wire size of a payload value: DeviceAttr has its own
// encoding (with a reserved tail), every other payload is binary.Size.
func encodedSize(v any) int {
	switch v.(type) {
	case nil:
		return 0
	case *DeviceAttr:
		return DeviceAttrSize
	}
	return binary.Size(v)
}

func mk(f func() any) any {
	if f == nil {
		return nil
	}
	return f()
}

// TestOpcodeSizes checks, for every opcode, that the sizes the decoder
// enforces (opTable) are the sizes of the payload structs and the sizes
// the specification documents.
func TestOpcodeSizes(t *testing.T) {
	if len(opPayloads) != len(Opcodes()) {
		t.Fatalf("the test table has %d opcodes, the ABI %d", len(opPayloads), len(Opcodes()))
	}
	for _, op := range Opcodes() {
		p, ok := opPayloads[op]
		if !ok {
			t.Errorf("%v missing from the test table", op)
			continue
		}
		req, _ := op.RequestSize()
		resp, _ := op.ResponseSize()
		if req != p.reqSize || encodedSize(mk(p.newReq)) != p.reqSize {
			t.Errorf("%v request: table %d, struct %d, documented %d", op, req, encodedSize(mk(p.newReq)), p.reqSize)
		}
		if resp != p.respSize || encodedSize(mk(p.newResp)) != p.respSize {
			t.Errorf("%v response: table %d, struct %d, documented %d", op, resp, encodedSize(mk(p.newResp)), p.respSize)
		}
		if p.reqSize%8 != 0 || p.respSize%8 != 0 {
			t.Errorf("%v payload sizes %d/%d are not multiples of 8", op, p.reqSize, p.respSize)
		}
		if RequestHeaderSize+p.reqSize > MaxRequestSize || ResponseHeaderSize+p.respSize > MaxResponseSize {
			t.Errorf("%v does not fit the request/response bounds", op)
		}
	}
}

// TestDecodeRequestEveryOpcode checks that the framing decoder enforces
// each opcode's exact request length: the documented size is accepted,
// one byte less is short, one byte more is too long.
func TestDecodeRequestEveryOpcode(t *testing.T) {
	for op, p := range opPayloads {
		payload := make([]byte, p.reqSize)
		for i := range payload {
			payload[i] = byte(i + 1)
		}
		r, err := DecodeRequest(AppendRequest(nil, op, payload))
		if err != nil || r.Header.Opcode != op || len(r.Payload) != p.reqSize {
			t.Errorf("%v: %d-byte payload: %v", op, p.reqSize, err)
		}
		if p.reqSize > 0 {
			_, err := DecodeRequest(AppendRequest(nil, op, payload[:p.reqSize-1]))
			if !errors.Is(err, ErrShortBuffer) || StatusFor(err) != StatusInvalidArgument {
				t.Errorf("%v: short payload: %v", op, err)
			}
		}
		_, err = DecodeRequest(AppendRequest(nil, op, append(payload, 0)))
		if !errors.Is(err, ErrBadLength) || StatusFor(err) != StatusInvalidArgument {
			t.Errorf("%v: long payload: %v", op, err)
		}
	}
}
