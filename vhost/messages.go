package vhost

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Payloads are in the machine's byte order on the wire; vhost-user only
// runs between processes on one host. vstellard only builds for
// little-endian hosts (see guestmem), so little-endian is native here.
var le = binary.LittleEndian

// ErrBadPayload is wrapped by every payload decoding error.
var ErrBadPayload = errors.New("malformed payload")

func badPayload(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadPayload}, args...)...)
}

func wantSize(p []byte, n int) error {
	if len(p) != n {
		return badPayload("%d bytes, want %d", len(p), n)
	}
	return nil
}

func decodeU64(p []byte) (uint64, error) {
	if err := wantSize(p, 8); err != nil {
		return 0, err
	}
	return le.Uint64(p), nil
}

func encodeU64(v uint64) []byte { return le.AppendUint64(nil, v) }

// VringState is the payload of SET_VRING_NUM/BASE/ENABLE and GET_VRING_BASE.
type VringState struct {
	Index uint32
	Num   uint32
}

func decodeVringState(p []byte) (VringState, error) {
	if err := wantSize(p, 8); err != nil {
		return VringState{}, err
	}
	return VringState{Index: le.Uint32(p), Num: le.Uint32(p[4:])}, nil
}

func (s VringState) encode() []byte {
	return le.AppendUint32(le.AppendUint32(nil, s.Index), s.Num)
}

// VringAddr is the payload of SET_VRING_ADDR. The wire order is
// descriptor, used, available.
type VringAddr struct {
	Index uint32
	Flags uint32
	Desc  uint64
	Used  uint64
	Avail uint64
	Log   uint64
}

// vringFlagLog asks for used-ring dirty logging, which we do not offer.
const vringFlagLog = 1

func decodeVringAddr(p []byte) (VringAddr, error) {
	if err := wantSize(p, 40); err != nil {
		return VringAddr{}, err
	}
	a := VringAddr{
		Index: le.Uint32(p), Flags: le.Uint32(p[4:]),
		Desc: le.Uint64(p[8:]), Used: le.Uint64(p[16:]), Avail: le.Uint64(p[24:]), Log: le.Uint64(p[32:]),
	}
	if a.Flags&^vringFlagLog != 0 {
		return a, badPayload("unknown vring address flags %#x", a.Flags)
	}
	return a, nil
}

// VringFile is the payload of SET_VRING_KICK/CALL/ERR: a ring index and
// whether an eventfd accompanies the message.
type VringFile struct {
	Index uint8
	NoFD  bool
}

const (
	vringIdxMask  = 0xff
	vringNoFDMask = 0x100
)

func decodeVringFile(p []byte) (VringFile, error) {
	v, err := decodeU64(p)
	if err != nil {
		return VringFile{}, err
	}
	if v&^(vringIdxMask|vringNoFDMask) != 0 {
		return VringFile{}, badPayload("reserved bits set in %#x", v)
	}
	return VringFile{Index: uint8(v & vringIdxMask), NoFD: v&vringNoFDMask != 0}, nil
}

// MemRegion is one memory region of SET_MEM_TABLE, ADD_MEM_REG or
// REM_MEM_REG.
type MemRegion struct {
	GuestPhys  uint64
	Size       uint64
	UserAddr   uint64
	MmapOffset uint64
}

const memRegionSize = 32

func decodeMemRegion(p []byte) MemRegion {
	return MemRegion{
		GuestPhys: le.Uint64(p), Size: le.Uint64(p[8:]),
		UserAddr: le.Uint64(p[16:]), MmapOffset: le.Uint64(p[24:]),
	}
}

func (r MemRegion) validate() error {
	switch {
	case r.Size == 0:
		return badPayload("empty memory region")
	case r.GuestPhys+r.Size < r.GuestPhys, r.UserAddr+r.Size < r.UserAddr, r.MmapOffset+r.Size < r.MmapOffset:
		return badPayload("memory region %+v wraps", r)
	}
	return nil
}

// decodeMemTable decodes SET_MEM_TABLE: u32 nregions, u32 padding,
// nregions regions. QEMU sends exactly nregions regions.
func decodeMemTable(p []byte) ([]MemRegion, error) {
	if len(p) < 8 {
		return nil, badPayload("memory table of %d bytes", len(p))
	}
	n := le.Uint32(p)
	if n == 0 || n > maxFDs {
		return nil, badPayload("memory table with %d regions (1..%d)", n, maxFDs)
	}
	if err := wantSize(p, 8+int(n)*memRegionSize); err != nil {
		return nil, err
	}
	rs := make([]MemRegion, n)
	for i := range rs {
		rs[i] = decodeMemRegion(p[8+i*memRegionSize:])
		if err := rs[i].validate(); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// decodeSingleMemRegion decodes ADD_MEM_REG / REM_MEM_REG: u64 padding,
// one region.
func decodeSingleMemRegion(p []byte) (MemRegion, error) {
	if err := wantSize(p, 8+memRegionSize); err != nil {
		return MemRegion{}, err
	}
	r := decodeMemRegion(p[8:])
	return r, r.validate()
}

// ConfigMsg is the payload of GET_CONFIG and SET_CONFIG.
type ConfigMsg struct {
	Offset uint32
	Size   uint32
	Flags  uint32
	Data   []byte
}

const (
	configHeaderSize = 12
	maxConfigSize    = 256 // QEMU's VHOST_USER_MAX_CONFIG_SIZE
	// Config flags: 0 = a driver write to a writable field, 1 = live
	// migration (QEMU's VHOST_SET_CONFIG_TYPE_*).
	configFlagMigration = 1
)

func decodeConfigMsg(p []byte) (ConfigMsg, error) {
	if len(p) < configHeaderSize {
		return ConfigMsg{}, badPayload("config message of %d bytes", len(p))
	}
	c := ConfigMsg{Offset: le.Uint32(p), Size: le.Uint32(p[4:]), Flags: le.Uint32(p[8:])}
	if c.Size > maxConfigSize {
		return c, badPayload("config size %d > %d", c.Size, maxConfigSize)
	}
	if err := wantSize(p, configHeaderSize+int(c.Size)); err != nil {
		return c, err
	}
	if c.Flags > configFlagMigration {
		return c, badPayload("config flags %#x", c.Flags)
	}
	c.Data = p[configHeaderSize:]
	return c, nil
}

func (c ConfigMsg) encode() []byte {
	b := make([]byte, configHeaderSize, configHeaderSize+len(c.Data))
	le.PutUint32(b, c.Offset)
	le.PutUint32(b[4:], uint32(len(c.Data)))
	le.PutUint32(b[8:], c.Flags)
	return append(b, c.Data...)
}

// Inflight is the payload of GET_INFLIGHT_FD and SET_INFLIGHT_FD. QEMU's
// struct is not packed, so it is 24 bytes on the wire (4 bytes of tail
// padding); libvhost-user checks for exactly that size.
type Inflight struct {
	MmapSize   uint64
	MmapOffset uint64
	NumQueues  uint16
	QueueSize  uint16
}

const inflightSize = 24

func decodeInflight(p []byte) (Inflight, error) {
	if err := wantSize(p, inflightSize); err != nil {
		return Inflight{}, err
	}
	return Inflight{
		MmapSize: le.Uint64(p), MmapOffset: le.Uint64(p[8:]),
		NumQueues: le.Uint16(p[16:]), QueueSize: le.Uint16(p[18:]),
	}, nil
}

func (f Inflight) encode() []byte {
	b := make([]byte, inflightSize)
	le.PutUint64(b, f.MmapSize)
	le.PutUint64(b[8:], f.MmapOffset)
	le.PutUint16(b[16:], f.NumQueues)
	le.PutUint16(b[18:], f.QueueSize)
	return b
}

// shmemConfigSize is the GET_SHMEM_CONFIG reply: u32 nregions, u32
// padding, u64 memory_sizes[256] indexed by shmid.
const (
	maxShmemRegions = 256
	shmemConfigSize = 8 + 8*maxShmemRegions
)

func encodeShmemConfig(sizes []uint64) []byte {
	b := make([]byte, shmemConfigSize)
	var n uint32
	for i, s := range sizes {
		if i >= maxShmemRegions {
			break
		}
		if s != 0 {
			n++
		}
		le.PutUint64(b[8+8*i:], s)
	}
	le.PutUint32(b, n)
	return b
}

// shmemMapSize is the SHMEM_MAP/UNMAP payload (VhostUserMMap): u8 shmid,
// 7 bytes padding, u64 fd_offset, u64 shm_offset, u64 len, u64 flags.
const shmemMapSize = 40

const shmemFlagWritable = 1

func (m ShmemMapping) encode() []byte {
	b := make([]byte, shmemMapSize)
	b[0] = m.ShmID
	le.PutUint64(b[8:], m.FdOffset)
	le.PutUint64(b[16:], m.ShmOffset)
	le.PutUint64(b[24:], m.Len)
	if m.Writable {
		le.PutUint64(b[32:], shmemFlagWritable)
	}
	return b
}
