package guestdriver

import (
	"context"

	"github.com/vstellar/vstellar/virtio/abi"
)

// PD is a protection domain: MRs, AHs and QPs of one PD can be used
// together, and the device refuses any mix across PDs.
type PD struct {
	d   *Device
	pdn uint32
}

// AllocPD allocates a protection domain (ALLOC_PD).
func (d *Device) AllocPD(ctx context.Context) (*PD, error) {
	var r abi.HandleResp
	if err := d.call(ctx, abi.OpAllocPD, nil, &r); err != nil {
		return nil, err
	}
	return &PD{d: d, pdn: r.Handle}, nil
}

// Num is the PD number the device assigned.
func (pd *PD) Num() uint32 { return pd.pdn }

// Device is the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.d }

// Dealloc frees the PD (DEALLOC_PD). The device refuses while MRs, AHs or
// QPs still use it (abi.StatusBusy).
func (pd *PD) Dealloc(ctx context.Context) error {
	return pd.d.call(ctx, abi.OpDeallocPD, &abi.HandleReq{Handle: pd.pdn}, nil)
}

// AH is an address handle: a destination for UD sends (reserved; RC QPs
// take their destination in Connect/Modify).
type AH struct {
	pd  *PD
	ahn uint32
}

// CreateAH creates an address handle for attr (CREATE_AH).
func (pd *PD) CreateAH(ctx context.Context, attr abi.AHAttr) (*AH, error) {
	if attr.Port == 0 {
		attr.Port = Port
	}
	var r abi.HandleResp
	if err := pd.d.call(ctx, abi.OpCreateAH, &abi.CreateAHReq{PDN: pd.pdn, AH: attr}, &r); err != nil {
		return nil, err
	}
	return &AH{pd: pd, ahn: r.Handle}, nil
}

// Num is the AH number the device assigned.
func (ah *AH) Num() uint32 { return ah.ahn }

// Destroy destroys the address handle (DESTROY_AH).
func (ah *AH) Destroy(ctx context.Context) error {
	return ah.pd.d.call(ctx, abi.OpDestroyAH, &abi.HandleReq{Handle: ah.ahn}, nil)
}
