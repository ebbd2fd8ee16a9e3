package device

import "github.com/vstellar/vstellar/virtio/abi"

// localCAAckDelay is reported as in rxe (2^15 * 4.096 us): a software
// device's acknowledgement delay is dominated by scheduling, not wire time.
const localCAAckDelay = 15

// deviceAttr builds the QUERY_DEVICE response from the limits. Capability
// flags and atomic support stay zero until the data path implements them:
// the device never advertises what it cannot do.
func (d *Device) deviceAttr() abi.DeviceAttr {
	l := d.limits
	return abi.DeviceAttr{
		FWVersion:       fwVersion,
		NodeGUID:        d.guid,
		SysImageGUID:    d.guid,
		MaxMRSize:       l.MaxMRSize,
		PageSizeCap:     l.PageSizeCap,
		DeviceCapFlags:  0,
		VendorID:        abi.PCIVendorID,
		VendorPartID:    abi.PCIDeviceID,
		HWVer:           abi.ABIVersion,
		MaxQP:           l.MaxQP,
		MaxQPWR:         l.MaxQPWR,
		MaxSGE:          l.MaxSGE,
		MaxSGERd:        l.MaxSGE,
		MaxCQ:           l.MaxCQ,
		MaxCQE:          l.MaxCQE,
		MaxMR:           l.MaxMR,
		MaxPD:           l.MaxPD,
		MaxQPRdAtom:     l.MaxQPRdAtom,
		MaxQPInitRdAtom: l.MaxQPRdAtom,
		MaxAH:           l.MaxAH,
		MaxInlineData:   l.MaxInlineData,
		AtomicCap:       abi.AtomicNone,
		PhysPortCnt:     physPorts,
		LocalCAAckDelay: localCAAckDelay,
	}
}
