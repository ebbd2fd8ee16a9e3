package device

import (
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// localCAAckDelay is reported as in rxe (2^15 * 4.096 us): a software
// device's acknowledgement delay is dominated by scheduling, not wire time.
const localCAAckDelay = 15

// deviceCapFlags are the capabilities the device has: RESIZE_CQ and RNR
// NAKs on RC QPs (a SEND that finds no receive WQE is retried after the
// QP's RNR timer). Not port events: the one port never changes state, so
// the device never sends one. Multipath comes with the transport.
// ON_DEMAND_PINNING is added when the device pins on demand (capFlags).
const deviceCapFlags = abi.DevCapResizeCQ | abi.DevCapRCRNRNAKGen

// capFlags are the device's capability flags: ON_DEMAND_PINNING tells the
// driver that REG_MR is cheap (it pins nothing) unless the operator made
// the device pin at registration or pin all its memory.
func (d *Device) capFlags() uint64 {
	if d.pins.Mode() == pvdma.ModeOnDemand {
		return deviceCapFlags | abi.DevCapOnDemandPinning
	}
	return deviceCapFlags
}

// Attr is what QUERY_DEVICE answers.
func (d *Device) Attr() abi.DeviceAttr { return d.deviceAttr() }

// Pins is the device's pin cache, for its metrics and the operator's view.
func (d *Device) Pins() *pvdma.Cache { return d.pins }

// deviceAttr builds the QUERY_DEVICE response from the limits. Atomics
// are AtomicGlob: the engine performs them with CPU atomic instructions on
// guest memory, so they are atomic with respect to the guest's own CPU
// accesses too, not only to other device atomics.
func (d *Device) deviceAttr() abi.DeviceAttr {
	l := d.limits
	return abi.DeviceAttr{
		FWVersion:       fwVersion,
		NodeGUID:        d.guid,
		SysImageGUID:    d.guid,
		MaxMRSize:       l.MaxMRSize,
		PageSizeCap:     l.PageSizeCap,
		DeviceCapFlags:  d.capFlags(),
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
		AtomicCap:       abi.AtomicGlob,
		PhysPortCnt:     physPorts,
		LocalCAAckDelay: localCAAckDelay,
		MaxSRQ:          l.MaxSRQ,
		MaxSRQWR:        l.MaxSRQWR,
		MaxSRQSGE:       l.MaxSRQSGE,
	}
}

// queryDevice answers QUERY_DEVICE from the attributes fixed at New.
func (d *Device) queryDevice(c *cmd, _ []byte) ([]byte, error) {
	return append(c.out, d.attr...), nil
}
