package abi

import (
	"encoding/binary"
	"fmt"
)

// ABI version: major changes break compatibility, minor ones only give
// meaning to reserved fields and add opcodes. A driver accepts any minor
// of its major.
const (
	ABIMajor = 1
	ABIMinor = 1
	// ABIVersion is the config space abi_version value: major<<16 | minor.
	ABIVersion = ABIMajor<<16 | ABIMinor
)

// Config status bits (config space "status"). The device sets them when it
// becomes live (after DRIVER_OK) and clears them on reset; the driver reads
// status after DRIVER_OK before it uses doorbells.
const (
	// ConfigStatusDoorbellShmem: the doorbell region is mapped at offset 0
	// of shared memory region DoorbellShmID.
	ConfigStatusDoorbellShmem uint32 = 1 << 0
	// ConfigStatusDoorbellGuestRAM: shared memory is unavailable (the
	// driver did not ack FeatureShmemDoorbell, or the front-end could not
	// map the region); doorbells use the guest-RAM fallback that the
	// driver registers with SET_DOORBELL_AREA.
	ConfigStatusDoorbellGuestRAM uint32 = 1 << 1
)

// ConfigSize is the size of the device configuration space.
const ConfigSize = 256

// Config space field offsets. Every field is read-only for the driver.
const (
	ConfigOffABIVersion      = 0x00 // le32
	ConfigOffStatus          = 0x04 // le32
	ConfigOffNodeGUID        = 0x08 // le64
	ConfigOffMaxMRSize       = 0x10 // le64
	ConfigOffPageSizeCap     = 0x18 // le64
	ConfigOffMaxQP           = 0x20 // le32
	ConfigOffMaxCQ           = 0x24 // le32
	ConfigOffMaxMR           = 0x28 // le32
	ConfigOffMaxPD           = 0x2c // le32
	ConfigOffMaxAH           = 0x30 // le32
	ConfigOffMaxQPWR         = 0x34 // le32
	ConfigOffMaxCQE          = 0x38 // le32
	ConfigOffMaxSGE          = 0x3c // le32
	ConfigOffMaxInlineData   = 0x40 // le32
	ConfigOffMaxQPRdAtom     = 0x44 // le32
	ConfigOffMaxGID          = 0x48 // le32
	ConfigOffPhysPortCnt     = 0x4c // u8
	ConfigOffDoorbellShmID   = 0x4d // u8
	ConfigOffDoorbellRecSize = 0x4e // le16
	ConfigOffDoorbellPageSz  = 0x50 // le32
	ConfigOffDoorbellPages   = 0x54 // le32
	ConfigOffDoorbellRecOff  = 0x58 // le32
	ConfigOffDoorbellRecords = 0x5c // le32
	ConfigOffMaxSRQ          = 0x60 // le32 (ABI 1.1)
	ConfigOffMaxSRQWR        = 0x64 // le32
	ConfigOffMaxSRQSGE       = 0x68 // le32
	ConfigOffReserved        = 0x6c // reserved to ConfigSize, zero
)

// Config is the device configuration space.
type Config struct {
	ABIVersion  uint32
	Status      uint32 // ConfigStatus* bits
	NodeGUID    uint64
	Limits      Limits
	PhysPortCnt uint8
	Doorbell    DoorbellLayout
}

// AppendBinary appends the ConfigSize-byte encoding of c to b.
func (c Config) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, ConfigSize)...)
	p := b[start:]
	le := binary.LittleEndian
	le.PutUint32(p[ConfigOffABIVersion:], c.ABIVersion)
	le.PutUint32(p[ConfigOffStatus:], c.Status)
	le.PutUint64(p[ConfigOffNodeGUID:], c.NodeGUID)
	le.PutUint64(p[ConfigOffMaxMRSize:], c.Limits.MaxMRSize)
	le.PutUint64(p[ConfigOffPageSizeCap:], c.Limits.PageSizeCap)
	le.PutUint32(p[ConfigOffMaxQP:], c.Limits.MaxQP)
	le.PutUint32(p[ConfigOffMaxCQ:], c.Limits.MaxCQ)
	le.PutUint32(p[ConfigOffMaxMR:], c.Limits.MaxMR)
	le.PutUint32(p[ConfigOffMaxPD:], c.Limits.MaxPD)
	le.PutUint32(p[ConfigOffMaxAH:], c.Limits.MaxAH)
	le.PutUint32(p[ConfigOffMaxQPWR:], c.Limits.MaxQPWR)
	le.PutUint32(p[ConfigOffMaxCQE:], c.Limits.MaxCQE)
	le.PutUint32(p[ConfigOffMaxSGE:], c.Limits.MaxSGE)
	le.PutUint32(p[ConfigOffMaxInlineData:], c.Limits.MaxInlineData)
	le.PutUint32(p[ConfigOffMaxQPRdAtom:], c.Limits.MaxQPRdAtom)
	le.PutUint32(p[ConfigOffMaxGID:], c.Limits.MaxGID)
	le.PutUint32(p[ConfigOffMaxSRQ:], c.Limits.MaxSRQ)
	le.PutUint32(p[ConfigOffMaxSRQWR:], c.Limits.MaxSRQWR)
	le.PutUint32(p[ConfigOffMaxSRQSGE:], c.Limits.MaxSRQSGE)
	p[ConfigOffPhysPortCnt] = c.PhysPortCnt
	p[ConfigOffDoorbellShmID] = c.Doorbell.ShmID
	le.PutUint16(p[ConfigOffDoorbellRecSize:], c.Doorbell.RecordSize)
	le.PutUint32(p[ConfigOffDoorbellPageSz:], c.Doorbell.PageSize)
	le.PutUint32(p[ConfigOffDoorbellPages:], c.Doorbell.Pages)
	le.PutUint32(p[ConfigOffDoorbellRecOff:], c.Doorbell.RecordsOffset)
	le.PutUint32(p[ConfigOffDoorbellRecords:], c.Doorbell.Records)
	return b, nil
}

// MarshalBinary encodes c into ConfigSize bytes.
func (c Config) MarshalBinary() ([]byte, error) { return c.AppendBinary(make([]byte, 0, ConfigSize)) }

// UnmarshalBinary decodes ConfigSize bytes. The reserved tail is ignored
// (device-written; a newer minor version may use it). It does not judge
// the values; see [Config.Validate].
func (c *Config) UnmarshalBinary(p []byte) error {
	if len(p) != ConfigSize {
		return fmt.Errorf("config space of %d bytes, want %d: %w", len(p), ConfigSize, lenErr(len(p), ConfigSize))
	}
	le := binary.LittleEndian
	*c = Config{
		ABIVersion: le.Uint32(p[ConfigOffABIVersion:]),
		Status:     le.Uint32(p[ConfigOffStatus:]),
		NodeGUID:   le.Uint64(p[ConfigOffNodeGUID:]),
		Limits: Limits{
			MaxMRSize:     le.Uint64(p[ConfigOffMaxMRSize:]),
			PageSizeCap:   le.Uint64(p[ConfigOffPageSizeCap:]),
			MaxQP:         le.Uint32(p[ConfigOffMaxQP:]),
			MaxCQ:         le.Uint32(p[ConfigOffMaxCQ:]),
			MaxMR:         le.Uint32(p[ConfigOffMaxMR:]),
			MaxPD:         le.Uint32(p[ConfigOffMaxPD:]),
			MaxAH:         le.Uint32(p[ConfigOffMaxAH:]),
			MaxQPWR:       le.Uint32(p[ConfigOffMaxQPWR:]),
			MaxCQE:        le.Uint32(p[ConfigOffMaxCQE:]),
			MaxSGE:        le.Uint32(p[ConfigOffMaxSGE:]),
			MaxInlineData: le.Uint32(p[ConfigOffMaxInlineData:]),
			MaxQPRdAtom:   le.Uint32(p[ConfigOffMaxQPRdAtom:]),
			MaxGID:        le.Uint32(p[ConfigOffMaxGID:]),
			MaxSRQ:        le.Uint32(p[ConfigOffMaxSRQ:]),
			MaxSRQWR:      le.Uint32(p[ConfigOffMaxSRQWR:]),
			MaxSRQSGE:     le.Uint32(p[ConfigOffMaxSRQSGE:]),
		},
		PhysPortCnt: p[ConfigOffPhysPortCnt],
		Doorbell: DoorbellLayout{
			ShmID:         p[ConfigOffDoorbellShmID],
			RecordSize:    le.Uint16(p[ConfigOffDoorbellRecSize:]),
			PageSize:      le.Uint32(p[ConfigOffDoorbellPageSz:]),
			Pages:         le.Uint32(p[ConfigOffDoorbellPages:]),
			RecordsOffset: le.Uint32(p[ConfigOffDoorbellRecOff:]),
			Records:       le.Uint32(p[ConfigOffDoorbellRecords:]),
		},
	}
	return nil
}

// Validate checks what a driver must check before trusting config space:
// an ABI major version it speaks, sane limits, at least one port, and a
// doorbell layout with a record for every QP and CQ.
func (c Config) Validate() error {
	if c.ABIVersion>>16 != ABIMajor {
		return fmt.Errorf("config abi_version %d.%d, want %d.x: %w", c.ABIVersion>>16, c.ABIVersion&0xffff, ABIMajor, ErrVersion)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("config limits: %w", err)
	}
	if c.PhysPortCnt == 0 {
		return fmt.Errorf("config phys_port_cnt 0: %w", ErrBadValue)
	}
	if c.Doorbell.ShmID != DoorbellShmID {
		return fmt.Errorf("config doorbell shmid %d: %w", c.Doorbell.ShmID, ErrBadValue)
	}
	if err := c.Doorbell.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if uint64(c.Doorbell.Records) < c.Limits.DoorbellRecords() {
		return fmt.Errorf("config: %d doorbell records for %d QPs, %d CQs and %d SRQs: %w",
			c.Doorbell.Records, c.Limits.MaxQP, c.Limits.MaxCQ, c.Limits.MaxSRQ, ErrBadValue)
	}
	return nil
}

// FormatGUID writes a GUID as ibv_devinfo and the rdma tool do, four
// groups of four hex digits ("0af1:0107:b58d:6690"), so that every
// program of ours prints a device's node GUID the same way.
func FormatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}
