package abi

import (
	"encoding/binary"
	"fmt"
)

// QUERY_DEVICE: the request has no payload; the response payload is a
// DeviceAttr.
const (
	QueryDeviceReqSize = 0
	DeviceAttrSize     = 160
)

// Device capability flags (DeviceAttr.DeviceCapFlags). These are vStellar
// bits; the guest kernel driver translates them to IB_DEVICE_* flags.
const (
	// DevCapResizeCQ: RESIZE_CQ works.
	DevCapResizeCQ uint64 = 1 << 0
	// DevCapRCRNRNAKGen: the device generates RNR NAKs on RC QPs when no
	// receive is posted, instead of dropping.
	DevCapRCRNRNAKGen uint64 = 1 << 1
	// DevCapPortActiveEvent: port state changes are reported as events.
	DevCapPortActiveEvent uint64 = 1 << 2
	// DevCapOnDemandPinning: REG_MR does not pin; guest memory is pinned
	// on first DMA (PVDMA), so registering a large MR is cheap.
	DevCapOnDemandPinning uint64 = 1 << 3
	// DevCapMultipath: traffic between hosts is sprayed over many paths.
	DevCapMultipath uint64 = 1 << 4
)

// Atomic capability (DeviceAttr.AtomicCap), as in IB.
const (
	AtomicNone uint8 = 0 // no atomics
	AtomicHCA  uint8 = 1 // atomic with respect to other device atomics only
	AtomicGlob uint8 = 2 // atomic with respect to CPU accesses too
)

// DeviceAttr offsets.
const (
	attrOffFWVersion      = 0x00 // le64
	attrOffNodeGUID       = 0x08 // le64
	attrOffSysImageGUID   = 0x10 // le64
	attrOffMaxMRSize      = 0x18 // le64
	attrOffPageSizeCap    = 0x20 // le64
	attrOffDeviceCapFlags = 0x28 // le64
	attrOffVendorID       = 0x30 // le32
	attrOffVendorPartID   = 0x34 // le32
	attrOffHWVer          = 0x38 // le32
	attrOffMaxQP          = 0x3c // le32
	attrOffMaxQPWR        = 0x40 // le32
	attrOffMaxSGE         = 0x44 // le32
	attrOffMaxSGERd       = 0x48 // le32
	attrOffMaxCQ          = 0x4c // le32
	attrOffMaxCQE         = 0x50 // le32
	attrOffMaxMR          = 0x54 // le32
	attrOffMaxPD          = 0x58 // le32
	attrOffMaxQPRdAtom    = 0x5c // le32
	attrOffMaxQPInitRdAt  = 0x60 // le32
	attrOffMaxAH          = 0x64 // le32
	attrOffMaxInlineData  = 0x68 // le32
	attrOffAtomicCap      = 0x6c // u8
	attrOffPhysPortCnt    = 0x6d // u8
	attrOffLocalCAAckDel  = 0x6e // u8
	attrOffReserved0      = 0x6f // u8, zero
	attrOffMaxSRQ         = 0x70 // le32 (ABI 1.1)
	attrOffMaxSRQWR       = 0x74 // le32
	attrOffMaxSRQSGE      = 0x78 // le32
	attrOffReserved       = 0x7c // reserved to DeviceAttrSize, zero
)

// DeviceAttr is the QUERY_DEVICE response: the ibv_device_attr subset a
// verbs provider needs.
type DeviceAttr struct {
	FWVersion       uint64 // major<<32 | minor<<16 | patch
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	DeviceCapFlags  uint64 // DevCap* bits
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           uint32
	MaxQPWR         uint32
	MaxSGE          uint32
	MaxSGERd        uint32
	MaxCQ           uint32
	MaxCQE          uint32
	MaxMR           uint32
	MaxPD           uint32
	MaxQPRdAtom     uint32
	MaxQPInitRdAtom uint32
	MaxAH           uint32
	MaxInlineData   uint32
	AtomicCap       uint8 // Atomic* value
	PhysPortCnt     uint8
	LocalCAAckDelay uint8 // 4.096 us * 2^value
	MaxSRQ          uint32
	MaxSRQWR        uint32
	MaxSRQSGE       uint32
}

// AppendBinary appends the DeviceAttrSize-byte encoding of a to b.
func (a DeviceAttr) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, DeviceAttrSize)...)
	p := b[start:]
	le := binary.LittleEndian
	le.PutUint64(p[attrOffFWVersion:], a.FWVersion)
	le.PutUint64(p[attrOffNodeGUID:], a.NodeGUID)
	le.PutUint64(p[attrOffSysImageGUID:], a.SysImageGUID)
	le.PutUint64(p[attrOffMaxMRSize:], a.MaxMRSize)
	le.PutUint64(p[attrOffPageSizeCap:], a.PageSizeCap)
	le.PutUint64(p[attrOffDeviceCapFlags:], a.DeviceCapFlags)
	le.PutUint32(p[attrOffVendorID:], a.VendorID)
	le.PutUint32(p[attrOffVendorPartID:], a.VendorPartID)
	le.PutUint32(p[attrOffHWVer:], a.HWVer)
	le.PutUint32(p[attrOffMaxQP:], a.MaxQP)
	le.PutUint32(p[attrOffMaxQPWR:], a.MaxQPWR)
	le.PutUint32(p[attrOffMaxSGE:], a.MaxSGE)
	le.PutUint32(p[attrOffMaxSGERd:], a.MaxSGERd)
	le.PutUint32(p[attrOffMaxCQ:], a.MaxCQ)
	le.PutUint32(p[attrOffMaxCQE:], a.MaxCQE)
	le.PutUint32(p[attrOffMaxMR:], a.MaxMR)
	le.PutUint32(p[attrOffMaxPD:], a.MaxPD)
	le.PutUint32(p[attrOffMaxQPRdAtom:], a.MaxQPRdAtom)
	le.PutUint32(p[attrOffMaxQPInitRdAt:], a.MaxQPInitRdAtom)
	le.PutUint32(p[attrOffMaxAH:], a.MaxAH)
	le.PutUint32(p[attrOffMaxInlineData:], a.MaxInlineData)
	p[attrOffAtomicCap] = a.AtomicCap
	p[attrOffPhysPortCnt] = a.PhysPortCnt
	p[attrOffLocalCAAckDel] = a.LocalCAAckDelay
	le.PutUint32(p[attrOffMaxSRQ:], a.MaxSRQ)
	le.PutUint32(p[attrOffMaxSRQWR:], a.MaxSRQWR)
	le.PutUint32(p[attrOffMaxSRQSGE:], a.MaxSRQSGE)
	return b, nil
}

// MarshalBinary encodes a into DeviceAttrSize bytes.
func (a DeviceAttr) MarshalBinary() ([]byte, error) {
	return a.AppendBinary(make([]byte, 0, DeviceAttrSize))
}

// UnmarshalBinary decodes exactly DeviceAttrSize bytes; the reserved tail
// is ignored (device-written).
func (a *DeviceAttr) UnmarshalBinary(p []byte) error {
	if len(p) != DeviceAttrSize {
		return fmt.Errorf("device attributes of %d bytes, want %d: %w", len(p), DeviceAttrSize, lenErr(len(p), DeviceAttrSize))
	}
	le := binary.LittleEndian
	*a = DeviceAttr{
		FWVersion:       le.Uint64(p[attrOffFWVersion:]),
		NodeGUID:        le.Uint64(p[attrOffNodeGUID:]),
		SysImageGUID:    le.Uint64(p[attrOffSysImageGUID:]),
		MaxMRSize:       le.Uint64(p[attrOffMaxMRSize:]),
		PageSizeCap:     le.Uint64(p[attrOffPageSizeCap:]),
		DeviceCapFlags:  le.Uint64(p[attrOffDeviceCapFlags:]),
		VendorID:        le.Uint32(p[attrOffVendorID:]),
		VendorPartID:    le.Uint32(p[attrOffVendorPartID:]),
		HWVer:           le.Uint32(p[attrOffHWVer:]),
		MaxQP:           le.Uint32(p[attrOffMaxQP:]),
		MaxQPWR:         le.Uint32(p[attrOffMaxQPWR:]),
		MaxSGE:          le.Uint32(p[attrOffMaxSGE:]),
		MaxSGERd:        le.Uint32(p[attrOffMaxSGERd:]),
		MaxCQ:           le.Uint32(p[attrOffMaxCQ:]),
		MaxCQE:          le.Uint32(p[attrOffMaxCQE:]),
		MaxMR:           le.Uint32(p[attrOffMaxMR:]),
		MaxPD:           le.Uint32(p[attrOffMaxPD:]),
		MaxQPRdAtom:     le.Uint32(p[attrOffMaxQPRdAtom:]),
		MaxQPInitRdAtom: le.Uint32(p[attrOffMaxQPInitRdAt:]),
		MaxAH:           le.Uint32(p[attrOffMaxAH:]),
		MaxInlineData:   le.Uint32(p[attrOffMaxInlineData:]),
		AtomicCap:       p[attrOffAtomicCap],
		PhysPortCnt:     p[attrOffPhysPortCnt],
		LocalCAAckDelay: p[attrOffLocalCAAckDel],
		MaxSRQ:          le.Uint32(p[attrOffMaxSRQ:]),
		MaxSRQWR:        le.Uint32(p[attrOffMaxSRQWR:]),
		MaxSRQSGE:       le.Uint32(p[attrOffMaxSRQSGE:]),
	}
	return nil
}

// FWVersion packs a firmware version for DeviceAttr.FWVersion.
func FWVersion(major, minor, patch uint16) uint64 {
	return uint64(major)<<32 | uint64(minor)<<16 | uint64(patch)
}
