package guestdriver

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/vstellar/vstellar/virtio/abi"
)

// MR is a registered memory region: a range of guest memory, addressed by
// IOVA, that work requests may use through its keys.
type MR struct {
	pd     *PD
	lkey   uint32
	rkey   uint32
	iova   uint64
	length uint64
	access abi.Access
	buf    Buffer // the memory, for contiguous registrations
}

// RegMR registers the guest-physically contiguous buffer buf with the
// given access (REG_MR without a page list). The MR's IOVA is the
// buffer's guest physical address, so an SGE or remote address is simply
// a GPA inside buf.
func (pd *PD) RegMR(ctx context.Context, buf Buffer, access abi.Access) (*MR, error) {
	req := abi.RegMRReq{PDN: pd.pdn, Access: access, IOVA: buf.GPA, Length: buf.Len(), Addr: buf.GPA}
	var r abi.RegMRResp
	if err := pd.d.call(ctx, abi.OpRegMR, &req, &r); err != nil {
		return nil, err
	}
	return &MR{pd: pd, lkey: r.LKey, rkey: r.RKey, iova: buf.GPA, length: buf.Len(), access: access, buf: buf}, nil
}

// RegMRPages registers length bytes at iova backed by the guest pages at
// the guest physical addresses pages, each 1<<pageShift bytes and aligned
// to it; iova's offset within a page is the region's offset into the first
// page (REG_MR with a page list). The list is written to guest memory for
// the device to read and freed when the command completes.
func (pd *PD) RegMRPages(ctx context.Context, iova, length uint64, pageShift uint32, pages []uint64, access abi.Access) (*MR, error) {
	if len(pages) == 0 || len(pages) > abi.MaxMRPages {
		return nil, fmt.Errorf("guestdriver: REG_MR with %d pages (1..%d): %w", len(pages), abi.MaxMRPages, abi.ErrBadValue)
	}
	list, err := pd.d.mem.alloc(uint64(len(pages))*8, 8)
	if err != nil {
		return nil, err
	}
	defer pd.d.mem.release(list)
	b := list.Bytes()
	for i, p := range pages {
		binary.LittleEndian.PutUint64(b[8*i:], p)
	}
	req := abi.RegMRReq{PDN: pd.pdn, Access: access, IOVA: iova, Length: length, Addr: list.GPA,
		PageShift: pageShift, NPages: uint32(len(pages))}
	var r abi.RegMRResp
	if err := pd.d.call(ctx, abi.OpRegMR, &req, &r); err != nil {
		return nil, err
	}
	return &MR{pd: pd, lkey: r.LKey, rkey: r.RKey, iova: iova, length: length, access: access}, nil
}

// LKey is the key local work requests use in their SGEs.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the key a peer uses to reach the region remotely.
func (mr *MR) RKey() uint32 { return mr.rkey }

// IOVA is the address of the region's first byte.
func (mr *MR) IOVA() uint64 { return mr.iova }

// Len is the region's length in bytes.
func (mr *MR) Len() uint64 { return mr.length }

// Access are the access flags it was registered with.
func (mr *MR) Access() abi.Access { return mr.access }

// Buffer is the memory of a contiguous registration (RegMR); zero for a
// page-list one.
func (mr *MR) Buffer() Buffer { return mr.buf }

// SGE is the scatter/gather element for n bytes at offset off of the
// region. It does not check the range; the device does.
func (mr *MR) SGE(off uint64, n uint32) abi.SGE {
	return abi.SGE{Addr: mr.iova + off, Length: n, LKey: mr.lkey}
}

// Dereg deregisters the region (DEREG_MR). Its keys then find nothing.
func (mr *MR) Dereg(ctx context.Context) error {
	return mr.pd.d.call(ctx, abi.OpDeregMR, &abi.HandleReq{Handle: mr.lkey}, nil)
}
