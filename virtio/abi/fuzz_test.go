package abi

import (
	"bytes"
	"testing"
)

// FuzzDecodeRequest feeds hostile bytes to the control-request decoder, as
// a guest would through the control queue. The seeds in
// testdata/fuzz/FuzzDecodeRequest run with every `go test`.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(req(OpQueryDevice, 0))
	f.Add(req(OpCreateQP, 0, make([]byte, 64)...))
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
