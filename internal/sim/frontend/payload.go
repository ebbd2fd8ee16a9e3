package frontend

import (
	"encoding/binary"
	"fmt"
)

// All vhost-user numbers are "in the machine native byte order".
var ne = binary.NativeEndian

// Header is a vhost-user message header.
type Header struct {
	Request uint32
	Flags   uint32
	Size    uint32
}

func (h Header) encode(b []byte) {
	ne.PutUint32(b[0:], h.Request)
	ne.PutUint32(b[4:], h.Flags)
	ne.PutUint32(b[8:], h.Size)
}

func decodeHeader(b []byte) Header {
	return Header{Request: ne.Uint32(b[0:]), Flags: ne.Uint32(b[4:]), Size: ne.Uint32(b[8:])}
}

func u64Payload(v uint64) []byte {
	b := make([]byte, 8)
	ne.PutUint64(b, v)
	return b
}

// MemRegion is a vhost-user memory region (32 bytes: u64 guest physical
// address, u64 size, u64 user address, u64 mmap offset).
type MemRegion struct {
	GuestPhys  uint64
	Size       uint64
	UserAddr   uint64
	MmapOffset uint64
}

const memRegionSize = 32

func (r MemRegion) put(b []byte) {
	ne.PutUint64(b[0:], r.GuestPhys)
	ne.PutUint64(b[8:], r.Size)
	ne.PutUint64(b[16:], r.UserAddr)
	ne.PutUint64(b[24:], r.MmapOffset)
}

// encodeMemTable lays out SET_MEM_TABLE: u32 nregions, u32 padding, then
// nregions regions. Like QEMU, only the used regions are sent.
func encodeMemTable(rs []MemRegion) []byte {
	b := make([]byte, 8+len(rs)*memRegionSize)
	ne.PutUint32(b[0:], uint32(len(rs)))
	for i, r := range rs {
		r.put(b[8+i*memRegionSize:])
	}
	return b
}

// encodeMemReg lays out ADD_MEM_REG/REM_MEM_REG: u64 padding, region.
func encodeMemReg(r MemRegion) []byte {
	b := make([]byte, 8+memRegionSize)
	r.put(b[8:])
	return b
}

// VringState is a vring state (u32 index, u32 num).
type VringState struct {
	Index uint32
	Num   uint32
}

func (s VringState) encode() []byte {
	b := make([]byte, 8)
	ne.PutUint32(b[0:], s.Index)
	ne.PutUint32(b[4:], s.Num)
	return b
}

func decodeVringState(b []byte) VringState {
	return VringState{Index: ne.Uint32(b[0:]), Num: ne.Uint32(b[4:])}
}

// VringAddr is a vring address description. On the wire (40 bytes) the
// order is index, flags, descriptor, USED, AVAILABLE, log.
type VringAddr struct {
	Index uint32
	Flags uint32
	Desc  uint64
	Used  uint64
	Avail uint64
	Log   uint64
}

func (a VringAddr) encode() []byte {
	b := make([]byte, 40)
	ne.PutUint32(b[0:], a.Index)
	ne.PutUint32(b[4:], a.Flags)
	ne.PutUint64(b[8:], a.Desc)
	ne.PutUint64(b[16:], a.Used)
	ne.PutUint64(b[24:], a.Avail)
	ne.PutUint64(b[32:], a.Log)
	return b
}

func vringFilePayload(index uint32, fd int) []byte {
	v := uint64(index & VringIndexMask)
	if fd < 0 {
		v |= VringNoFD
	}
	return u64Payload(v)
}

// encodeConfig lays out GET/SET_CONFIG: u32 offset, u32 size, u32 flags,
// then size bytes.
func encodeConfig(offset, flags uint32, data []byte) []byte {
	b := make([]byte, ConfigHeaderSize+len(data))
	ne.PutUint32(b[0:], offset)
	ne.PutUint32(b[4:], uint32(len(data)))
	ne.PutUint32(b[8:], flags)
	copy(b[ConfigHeaderSize:], data)
	return b
}

// Inflight is the inflight-area description of GET/SET_INFLIGHT_FD. QEMU's
// struct is not packed, so it is 24 bytes on the wire: u64 mmap size, u64
// mmap offset, u16 queues, u16 queue size, 4 bytes of tail padding.
type Inflight struct {
	MmapSize   uint64
	MmapOffset uint64
	NumQueues  uint16
	QueueSize  uint16
}

const inflightSize = 24

func (in Inflight) encode() []byte {
	b := make([]byte, inflightSize)
	ne.PutUint64(b[0:], in.MmapSize)
	ne.PutUint64(b[8:], in.MmapOffset)
	ne.PutUint16(b[16:], in.NumQueues)
	ne.PutUint16(b[18:], in.QueueSize)
	return b
}

func decodeInflight(b []byte) Inflight {
	return Inflight{MmapSize: ne.Uint64(b[0:]), MmapOffset: ne.Uint64(b[8:]),
		NumQueues: ne.Uint16(b[16:]), QueueSize: ne.Uint16(b[18:])}
}

// shmemConfigSize is the GET_SHMEM_CONFIG reply: u32 nregions, u32
// padding, u64 memory_sizes[256].
const shmemConfigSize = 8 + 8*MaxShmemRegions

// decodeShmemConfig checks and decodes a GET_SHMEM_CONFIG reply.
func decodeShmemConfig(b []byte) ([]uint64, error) {
	if len(b) != shmemConfigSize {
		return nil, fmt.Errorf("GET_SHMEM_CONFIG reply of %d bytes, want %d: %w", len(b), shmemConfigSize, ErrProtocol)
	}
	n := ne.Uint32(b[0:])
	sizes := make([]uint64, MaxShmemRegions)
	var used uint32
	for i := range sizes {
		sizes[i] = ne.Uint64(b[8+8*i:])
		if sizes[i] != 0 {
			used++
		}
	}
	if n != used {
		return nil, fmt.Errorf("GET_SHMEM_CONFIG says %d regions but has %d non-zero sizes: %w", n, used, ErrProtocol)
	}
	return sizes, nil
}

// ShmemMapping is the VhostUserMMap payload of SHMEM_MAP/SHMEM_UNMAP (40
// bytes: u8 shmid, 7 bytes padding, u64 fd offset, u64 shm offset, u64 len,
// u64 flags).
type ShmemMapping struct {
	ShmID     uint8
	FdOffset  uint64
	ShmOffset uint64
	Len       uint64
	Flags     uint64
}

const shmemMappingSize = 40

// Encode lays the mapping out as a back-end sends it.
func (m ShmemMapping) Encode() []byte {
	b := make([]byte, shmemMappingSize)
	b[0] = m.ShmID
	ne.PutUint64(b[8:], m.FdOffset)
	ne.PutUint64(b[16:], m.ShmOffset)
	ne.PutUint64(b[24:], m.Len)
	ne.PutUint64(b[32:], m.Flags)
	return b
}

func decodeShmemMapping(b []byte) ShmemMapping {
	return ShmemMapping{ShmID: b[0], FdOffset: ne.Uint64(b[8:]), ShmOffset: ne.Uint64(b[16:]),
		Len: ne.Uint64(b[24:]), Flags: ne.Uint64(b[32:])}
}
