package device

import (
	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// What an operator may see of a device: counts, counters, object handles
// and their attributes. Never guest data, ring contents or host
// addresses.

// Snapshot is a device's state for the management API and metrics.
type Snapshot struct {
	Name     string
	NodeGUID uint64
	GID      abi.GID
	Limits   abi.Limits
	// Doorbells is where the doorbells live while the device is active
	// (DoorbellNone while it is not).
	Doorbells DoorbellMode
	Objects   Objects
	Control   Stats
	Engine    engine.Stats
	// Pins are the device's pinned-memory counters; PinMode and
	// PinBudget its configuration.
	Pins      pvdma.Stats
	PinMode   pvdma.Mode
	PinBudget uint64
	// TranslationMisses counts DMA translations the eMTT refused (no such
	// key, wrong PD, access or range).
	TranslationMisses uint64
}

// Snapshot reads the device's state. Each part is consistent in itself;
// the parts are read one after another while the device runs.
func (d *Device) Snapshot() Snapshot {
	return Snapshot{
		Name: d.name, NodeGUID: d.guid, GID: d.gid0, Limits: d.limits,
		Doorbells:         d.DoorbellMode(),
		Objects:           d.Objects(),
		Control:           d.Stats(),
		Engine:            d.eng.Stats(),
		Pins:              d.pins.Stats(),
		PinMode:           d.pins.Mode(),
		PinBudget:         d.pins.Budget(),
		TranslationMisses: d.mtt.Misses(),
	}
}

// QPs lists the device's QPs in QPN order.
func (d *Device) QPs() []engine.QPInfo { return d.eng.QPs() }

// MRInfo is what an operator sees of a memory region.
type MRInfo struct {
	// Key is both the lkey and the rkey.
	Key    uint32
	PDN    uint32
	Access abi.Access
	IOVA   uint64
	Length uint64
	Type   emtt.MemType
	// Valid is false once the guest memory behind the MR was removed.
	Valid bool
}

// MRs lists the device's memory regions in key-slot order.
func (d *Device) MRs() []MRInfo {
	var out []MRInfo
	d.mtt.Each(func(r *emtt.Region) {
		out = append(out, MRInfo{Key: uint32(r.Key), PDN: r.PD, Access: r.Access, IOVA: r.IOVA,
			Length: r.Length, Type: r.Type, Valid: r.Valid()})
	})
	return out
}
