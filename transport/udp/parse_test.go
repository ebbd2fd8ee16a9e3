package udp

import (
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FuzzParseGROSize: the control-message parser never panics on any bytes,
// never returns a negative size, and finds a UDP_GRO size wherever it is
// in a well-formed list.
func FuzzParseGROSize(f *testing.F) {
	f.Add(groCmsg(1400, false))
	f.Add(groCmsg(9000, true))
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 17, 0, 0, 0, 104, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, oob []byte) {
		if n := parseGROSize(oob); n < 0 {
			t.Fatalf("negative size %d", n)
		}
	})
}

func TestParseGROSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		oob  []byte
		want int
	}{
		{"alone", groCmsg(1400, false), 1400},
		{"after another", groCmsg(1200, true), 1200},
		{"none", nil, 0},
		{"truncated header", groCmsg(1400, false)[:8], 0},
		{"length past end", groCmsg(1400, false)[:unix.SizeofCmsghdr+2], 0},
	} {
		if got := parseGROSize(tc.oob); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzSockaddr: decoding never panics on any bytes and every address
// round-trips through encode/decode.
func FuzzSockaddr(f *testing.F) {
	f.Add([]byte{2, 0, 0x1f, 0x90, 127, 0, 0, 1}, uint32(16), false)
	f.Add(make([]byte, 28), uint32(28), true)
	f.Add([]byte{10, 0}, uint32(3), true)
	f.Fuzz(func(t *testing.T, raw []byte, namelen uint32, v6 bool) {
		var sa rawSockaddr
		copy(sa[:], raw)
		sa.decode(namelen) // must not panic

		// Round trip: the raw bytes as an address of the chosen family.
		var a16 [16]byte
		copy(a16[:], raw)
		port := uint16(namelen)
		var ap netip.AddrPort
		if v6 {
			ap = netip.AddrPortFrom(netip.AddrFrom16(a16), port)
		} else {
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a16[:4])), port)
		}
		var enc rawSockaddr
		n := enc.encode(v6, ap, 7)
		got, scope, ok := enc.decode(n)
		if !ok || got != ap {
			t.Fatalf("round trip %v -> %v (ok %v)", ap, got, ok)
		}
		if v6 && scope != 7 {
			t.Fatalf("scope %d", scope)
		}
	})
}

func groCmsg(size uint32, before bool) []byte {
	b := alignedBytes(groCmsgSpace)
	off := 0
	if before {
		h := (*unix.Cmsghdr)(unsafePointer(b))
		h.Level, h.Type = unix.SOL_IP, unix.IP_TOS
		h.SetLen(unix.CmsgLen(1))
		off = cmsgHdrSpace + wordSize
	}
	h := (*unix.Cmsghdr)(unsafePointer(b[off:]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	b[off+unix.SizeofCmsghdr] = byte(size)
	b[off+unix.SizeofCmsghdr+1] = byte(size >> 8)
	return b[:off+unix.CmsgSpace(4)]
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
