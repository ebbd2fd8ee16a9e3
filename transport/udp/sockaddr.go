package udp

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockaddrSize is the size of the raw address buffer kept per message:
// a sockaddr_in6, which also holds a sockaddr_in.
const sockaddrSize = unix.SizeofSockaddrInet6

// rawSockaddr is kernel-format address storage (sockaddr_in or
// sockaddr_in6). Layout: family (native order) at 0, port (network order)
// at 2; IPv4 address at 4; IPv6 flow info at 4, address at 8, scope at 24.
type rawSockaddr [sockaddrSize]byte

// ptr returns the storage as the pointer a msghdr wants.
func (sa *rawSockaddr) ptr() *byte { return &sa[0] }

// encode writes ap as a sockaddr of the given family and returns its
// length. The caller has checked that ap's family matches.
func (sa *rawSockaddr) encode(v6 bool, ap netip.AddrPort, scope uint32) uint32 {
	ip := ap.Addr()
	binary.BigEndian.PutUint16(sa[2:4], ap.Port())
	if !v6 {
		binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET)
		a := ip.Unmap().As4()
		copy(sa[4:8], a[:])
		clear(sa[8:16])
		return unix.SizeofSockaddrInet4
	}
	binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET6)
	clear(sa[4:8])
	a := ip.As16()
	copy(sa[8:24], a[:])
	binary.NativeEndian.PutUint32(sa[24:28], scope)
	return unix.SizeofSockaddrInet6
}

// decode reads the sockaddr the kernel wrote (namelen bytes). It returns
// the address, the IPv6 scope id (0 for IPv4) and false if the storage
// holds no internet address (which a UDP socket never reports; checked so
// that a surprise becomes a dropped datagram, not a bogus address).
func (sa *rawSockaddr) decode(namelen uint32) (netip.AddrPort, uint32, bool) {
	if namelen < 4 || namelen > sockaddrSize {
		return netip.AddrPort{}, 0, false
	}
	port := binary.BigEndian.Uint16(sa[2:4])
	switch binary.NativeEndian.Uint16(sa[0:2]) {
	case unix.AF_INET:
		if namelen < unix.SizeofSockaddrInet4-8 { // family, port, address
			return netip.AddrPort{}, 0, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port), 0, true
	case unix.AF_INET6:
		if namelen < 24 {
			return netip.AddrPort{}, 0, false
		}
		var scope uint32
		if namelen >= sockaddrSize {
			scope = binary.NativeEndian.Uint32(sa[24:28])
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])), port), scope, true
	}
	return netip.AddrPort{}, 0, false
}

// wordSize is the alignment of control messages (sizeof(long)).
const wordSize = int(unsafe.Sizeof(uintptr(0)))

func cmsgAlign(n int) int { return (n + wordSize - 1) &^ (wordSize - 1) }

// cmsgHdrSpace is a control message header rounded up to the alignment.
const cmsgHdrSpace = (unix.SizeofCmsghdr + wordSize - 1) &^ (wordSize - 1)

// segmentCmsgSpace is the room one UDP_SEGMENT control message (a uint16)
// takes.
const segmentCmsgSpace = cmsgHdrSpace + wordSize

// groCmsgSpace is the room kept per received message for control
// messages: one UDP_GRO int, with slack for anything else the kernel adds.
const groCmsgSpace = 2 * (cmsgHdrSpace + wordSize)

// putSegmentCmsg writes a UDP_SEGMENT control message carrying the
// segment size into b (segmentCmsgSpace bytes, word aligned) and returns
// its length.
func putSegmentCmsg(b []byte, segSize uint16) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.SizeofCmsghdr:], segSize)
	return segmentCmsgSpace
}

// parseGROSize returns the segment size in a UDP_GRO control message in
// oob, or 0 if there is none (the datagram was not coalesced) or the
// control data is malformed.
func parseGROSize(oob []byte) int {
	for len(oob) >= unix.SizeofCmsghdr {
		var l int
		if wordSize == 8 {
			v := binary.NativeEndian.Uint64(oob)
			if v > uint64(len(oob)) {
				return 0
			}
			l = int(v)
		} else {
			l = int(binary.NativeEndian.Uint32(oob))
		}
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		level := int32(binary.NativeEndian.Uint32(oob[wordSize:]))
		typ := int32(binary.NativeEndian.Uint32(oob[wordSize+4:]))
		if level == unix.IPPROTO_UDP && typ == unix.UDP_GRO && l >= unix.SizeofCmsghdr+4 {
			size := int32(binary.NativeEndian.Uint32(oob[unix.SizeofCmsghdr:]))
			if size <= 0 {
				return 0
			}
			return int(size)
		}
		step := cmsgAlign(l)
		if step >= len(oob) {
			break
		}
		oob = oob[step:]
	}
	return 0
}

// alignedBytes returns n zeroed bytes aligned for control messages.
func alignedBytes(n int) []byte {
	words := make([]uint64, (n+7)/8)
	if len(words) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}
