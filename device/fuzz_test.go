package device

import (
	"bytes"
	"testing"

	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// FuzzControlCommand drives hostile requests through the whole control
// path (chain copy-out, decoding, response sizing) over a real split
// queue. Every chain must come back exactly once with a header-only error,
// a full QUERY_DEVICE response, a header-only OK for RESET_STATE, or
// nothing when there is no room.
func FuzzControlCommand(f *testing.F) {
	f.Add(request(abi.OpQueryDevice), uint16(attrResp), uint8(0))
	f.Add(request(abi.OpCreateQP, 1, 2, 3), uint16(8), uint8(1))
	f.Add([]byte{1, 0, 0, 0, 1}, uint16(7), uint8(2))
	f.Add(request(abi.OpResetState), uint16(abi.ResponseHeaderSize), uint8(3))
	d := newDevice(f, Config{Name: "fuzz"})
	activate(f, d, allFeatures(d))
	f.Fuzz(func(t *testing.T, req []byte, respLen uint16, split uint8) {
		if len(req) > 2*abi.MaxRequestSize {
			return
		}
		g := newGuest(t, split&1 != 0)
		var readable []virtio.Buffer
		if len(req) > 0 {
			// Split the request at a fuzzer-chosen point.
			at := int(split) % (len(req) + 1)
			if at > 0 {
				readable = append(readable, g.put(req[:at]))
			}
			if at < len(req) {
				readable = append(readable, g.put(req[at:]))
			}
		}
		var writable []virtio.Buffer
		if respLen > 0 {
			writable = []virtio.Buffer{g.alloc(uint32(respLen))}
		}
		if len(readable)+len(writable) == 0 {
			return
		}
		g.submit(readable, writable)
		if err := g.process(d); err != nil {
			t.Fatal(err)
		}
		_, n := g.used()
		switch {
		case n == 0 && respLen < abi.ResponseHeaderSize:
		case n == abi.ResponseHeaderSize:
			// Only RESET_STATE (empty payload) succeeds with a header-only
			// response; anything else header-only is an error status.
			resp := g.bytes(writable[0].Addr, uint64(n))
			st, _, _ := abi.DecodeResponse(resp)
			if !st.Known() || (st == abi.StatusOK) != bytes.Equal(req, request(abi.OpResetState)) {
				t.Fatalf("header-only response with status %v to request %x", st, req)
			}
		case n == attrResp:
			if st, _, _ := abi.DecodeResponse(g.bytes(writable[0].Addr, uint64(n))); st != abi.StatusOK {
				t.Fatalf("full response with status %v", st)
			}
		default:
			t.Fatalf("wrote %d bytes into %d", n, respLen)
		}
	})
}
