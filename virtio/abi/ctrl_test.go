package abi

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func req(op Opcode, flags uint32, payload ...byte) []byte {
	b, _ := RequestHeader{Opcode: op, Flags: flags}.AppendBinary(nil)
	return append(b, payload...)
}

func TestDecodeRequest(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     []byte
		err    error
		status Status
	}{
		{"query device", req(OpQueryDevice, 0), nil, StatusOK},
		{"empty", nil, ErrShortBuffer, StatusInvalidArgument},
		{"short header", []byte{1, 0, 0}, ErrShortBuffer, StatusInvalidArgument},
		{"flags", req(OpQueryDevice, 1), ErrReservedNonZero, StatusInvalidArgument},
		{"high flag", req(OpQueryDevice, 1<<31), ErrReservedNonZero, StatusInvalidArgument},
		{"opcode 0", req(0, 0), ErrUnknownOpcode, StatusInvalidOpcode},
		{"opcode past end", req(opLast+1, 0), ErrUnknownOpcode, StatusInvalidOpcode},
		{"opcode max", req(0xffffffff, 0), ErrUnknownOpcode, StatusInvalidOpcode},
		{"trailing bytes", req(OpQueryDevice, 0, 1), ErrBadLength, StatusInvalidArgument},
		{"oversized", req(OpQueryDevice, 0, make([]byte, MaxRequestSize)...), ErrBadLength, StatusInvalidArgument},
		{"create qp short payload", req(OpCreateQP, 0, 1, 2, 3), ErrShortBuffer, StatusInvalidArgument},
		{"create qp full payload", req(OpCreateQP, 0, make([]byte, 56)...), nil, StatusOK},
		{"create qp trailing byte", req(OpCreateQP, 0, make([]byte, 57)...), ErrBadLength, StatusInvalidArgument},
		{"reset state", req(OpResetState, 0), nil, StatusOK},
		{"alloc pd with payload", req(OpAllocPD, 0, 0), ErrBadLength, StatusInvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeRequest(c.in)
			if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if got := StatusFor(err); got != c.status {
				t.Errorf("StatusFor = %v, want %v", got, c.status)
			}
			if err == nil && !bytes.Equal(AppendRequest(nil, r.Header.Opcode, r.Payload), c.in) {
				t.Errorf("re-encoding differs")
			}
		})
	}
	// The header is returned with ErrUnknownOpcode so the device can count it.
	r, _ := DecodeRequest(req(77, 0))
	if r.Header.Opcode != 77 {
		t.Errorf("opcode not reported: %v", r.Header.Opcode)
	}
}

func TestDecodeResponse(t *testing.T) {
	s, p, err := DecodeResponse(AppendResponse(nil, StatusNotFound, []byte{9, 9}))
	if err != nil || s != StatusNotFound || !bytes.Equal(p, []byte{9, 9}) {
		t.Fatalf("got %v %x %v", s, p, err)
	}
	if _, _, err := DecodeResponse([]byte{0, 0, 0}); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("short response: %v", err)
	}
}

func TestStatus(t *testing.T) {
	seen := map[string]bool{}
	for s := StatusOK; s.Known(); s++ {
		n := s.String()
		if seen[n] || n == "" {
			t.Errorf("status %d name %q duplicate or empty", s, n)
		}
		seen[n] = true
	}
	if len(seen) != 12 {
		t.Errorf("%d statuses, want 12 (update docs/spec.md when adding one)", len(seen))
	}
	if Status(99).String() != "STATUS_99" || Status(99).Known() {
		t.Errorf("unknown status: %v", Status(99))
	}
	if CheckStatus(OpQueryDevice, StatusOK) != nil {
		t.Fatal("OK is an error")
	}
	err := CheckStatus(OpAllocPD, StatusNoResources)
	if !errors.Is(err, StatusNoResources) || errors.Is(err, StatusNotFound) {
		t.Errorf("errors.Is on %v", err)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.Op != OpAllocPD || err.Error() != "vstellar ALLOC_PD: NO_RESOURCES" {
		t.Errorf("StatusError %v", err)
	}
	if StatusFor(errors.New("disk on fire")) != StatusDeviceError {
		t.Error("foreign errors must be DEVICE_ERROR")
	}
	if StatusFor(err) != StatusNoResources {
		t.Error("StatusFor does not see through StatusError")
	}
	for _, c := range []struct {
		err  error
		want Status
	}{
		{nil, StatusOK},
		{fmt.Errorf("x: %w", ErrShortBuffer), StatusInvalidArgument},
		{fmt.Errorf("x: %w", ErrBadLength), StatusInvalidArgument},
		{fmt.Errorf("x: %w", ErrReservedNonZero), StatusInvalidArgument},
		{fmt.Errorf("x: %w", ErrBadValue), StatusInvalidArgument},
		{fmt.Errorf("x: %w", ErrUnknownOpcode), StatusInvalidOpcode},
		{fmt.Errorf("x: %w", ErrBadTransition), StatusBadState},
		{fmt.Errorf("engine: qp 7: %w", StatusBusy), StatusBusy},
		{fmt.Errorf("ring: %w", StatusBadAddress), StatusBadAddress},
	} {
		if got := StatusFor(c.err); got != c.want {
			t.Errorf("StatusFor(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestOpcodes(t *testing.T) {
	ops := Opcodes()
	if len(ops) != 24 || ops[0] != OpQueryDevice || ops[len(ops)-1] != OpDestroySRQ {
		t.Fatalf("opcodes %v", ops)
	}
	names := map[string]bool{}
	for i, op := range ops {
		if op != Opcode(i+1) {
			t.Errorf("opcode %d at position %d: opcodes are numbered 1..n without gaps", op, i)
		}
		if !op.Known() || names[op.String()] {
			t.Errorf("%d: %q", op, op)
		}
		names[op.String()] = true
		// Since ABI 1.0 every opcode has fixed payload sizes.
		if !op.Specified() {
			t.Errorf("%v not specified", op)
		}
		if _, ok := op.RequestSize(); !ok {
			t.Errorf("%v has no request size", op)
		}
		if _, ok := op.ResponseSize(); !ok {
			t.Errorf("%v has no response size", op)
		}
	}
	for _, op := range []Opcode{0, opLast + 1, 0xffffffff} {
		if op.Known() || op.Specified() {
			t.Errorf("opcode %d known", op)
		}
		if _, ok := op.RequestSize(); ok {
			t.Errorf("opcode %d has a request size", op)
		}
		if _, ok := op.ResponseSize(); ok {
			t.Errorf("opcode %d has a response size", op)
		}
	}
	if Opcode(0).String() != "OPCODE_0" || Opcode(25).String() != "OPCODE_25" {
		t.Errorf("unknown opcode names %q %q", Opcode(0), Opcode(25))
	}
}

func TestFeatures(t *testing.T) {
	m := FeatureMask(FeatureShmemDoorbell, FeatureEventQueue)
	if m != 3 || !FeatureEventQueue.In(m) || FeatureRC.In(m) {
		t.Fatalf("mask %#x", m)
	}
	if FeatureString(m) != "SHMEM_DOORBELL|EVENT_QUEUE" || FeatureString(0) != "none" {
		t.Errorf("FeatureString %q", FeatureString(m))
	}
	if Feature(24).Mask() != 0 || Feature(24).In(1<<24) {
		t.Errorf("bit 24 is not a device bit")
	}
	if DeviceFeatureBits != 0xffffff {
		t.Errorf("DeviceFeatureBits %#x", DeviceFeatureBits)
	}
}
