package device

import (
	"github.com/vstellar/vstellar/virtio/abi"
)

// The device's resource model. Handles follow the numbering every part of
// vStellar agrees on: PDN and AHN are slot+1 (0 is never valid), CQN is
// slot+1 with doorbell record MaxQP+slot, QPN is slot+2 (0 and 1 are
// reserved by IB) with doorbell record slot. MR keys come from the emtt
// table, which also holds the MRs themselves.

// pd is a protection domain.
type pd struct {
	// users counts the QPs, SRQs, MRs and AHs in the PD: DEALLOC_PD is refused
	// while any exists.
	users uint32
}

// cq is a completion queue; the engine holds its ring and size.
type cq struct {
	// users counts QP bindings (a QP using the CQ for both queues counts
	// twice): DESTROY_CQ is refused while any exists.
	users uint32
}

// qp is a queue pair; the engine holds its rings and state.
type qp struct {
	pdn, sendCQN, recvCQN uint32
	srqn                  uint32 // 0: the QP has its own RQ
}

// srq is a shared receive queue; the engine holds its ring.
type srq struct {
	pdn uint32
	// users counts the QPs on the SRQ: DESTROY_SRQ is refused while any
	// exists.
	users uint32
}

// ah is an address handle.
type ah struct {
	pdn  uint32
	attr abi.AHAttr
}

// objects is everything a driver builds on the device, guarded by
// Device.omu.
type objects struct {
	pds  slots[pd]
	cqs  slots[cq]
	qps  slots[qp]
	srqs slots[srq]
	ahs  slots[ah]
	// mrExtraSpans is the span budget the live MRs use (see
	// extraSpanBudget); the MRs themselves live in the emtt table.
	mrExtraSpans uint64

	closed bool
}

func (o *objects) init(l abi.Limits) {
	o.pds = newSlots[pd](l.MaxPD)
	o.cqs = newSlots[cq](l.MaxCQ)
	o.qps = newSlots[qp](l.MaxQP)
	o.srqs = newSlots[srq](l.MaxSRQ)
	o.ahs = newSlots[ah](l.MaxAH)
}

// Handle <-> slot conversions. A hostile handle converts to a slot that
// slots.get rejects (0 wraps to 0xffffffff).
func pdSlot(pdn uint32) uint32 { return pdn - 1 }
func cqSlot(cqn uint32) uint32 { return cqn - 1 }
func qpSlot(qpn uint32) uint32 { return qpn - 2 }
func ahSlot(ahn uint32) uint32 { return ahn - 1 }
func srqSlot(n uint32) uint32  { return n - 1 }

func (o *objects) pd(pdn uint32) *pd { return o.pds.get(pdSlot(pdn)) }
func (o *objects) cq(cqn uint32) *cq { return o.cqs.get(cqSlot(cqn)) }
func (o *objects) qp(qpn uint32) *qp { return o.qps.get(qpSlot(qpn)) }
func (o *objects) ah(ahn uint32) *ah { return o.ahs.get(ahSlot(ahn)) }
func (o *objects) srq(n uint32) *srq { return o.srqs.get(srqSlot(n)) }

// cqDoorbell, srqDoorbell and qpDoorbell are the doorbell record indices.
func (d *Device) cqDoorbell(cqn uint32) uint32 { return d.limits.MaxQP + cqSlot(cqn) }
func (d *Device) srqDoorbell(srqn uint32) uint32 {
	return d.limits.MaxQP + d.limits.MaxCQ + srqSlot(srqn)
}
func qpDoorbell(qpn uint32) uint32 { return qpSlot(qpn) }

// resetObjectsLocked drops everything a driver built: QPs and CQs (in
// the engine), MRs, PDs, AHs, guest GIDs (off the fabric), queued events,
// the doorbell records and the guest-RAM doorbell area. The engine must
// be stopped. Called with omu held.
func (d *Device) resetObjectsLocked() {
	d.eng.Reset()
	d.mtt.Clear()
	// The MRs and queues that used the pinned chunks are gone.
	d.pins.Drop()
	d.o.mrExtraSpans = 0
	d.o.pds.clear()
	d.o.cqs.clear()
	d.o.qps.clear()
	d.o.srqs.clear()
	d.o.ahs.clear()
	d.gids.dropGuests(false)
	d.ev.clear()
	if err := d.db.Zero(); err != nil {
		d.log.Error("clearing doorbell region", "err", err)
	}
	d.dbs.reset()
	d.stats.resets.Add(1)
}

// Objects counts a device's live objects.
type Objects struct {
	PDs, CQs, QPs, SRQs, MRs, AHs, GIDs int
}

// Objects returns the number of live objects of each kind (GIDs include
// the device's own).
func (d *Device) Objects() Objects {
	d.omu.Lock()
	defer d.omu.Unlock()
	n := Objects{
		PDs: int(d.o.pds.len()), CQs: int(d.o.cqs.len()), QPs: int(d.o.qps.len()),
		SRQs: int(d.o.srqs.len()), AHs: int(d.o.ahs.len()), MRs: d.mtt.Len(),
		GIDs: d.gids.live(),
	}
	return n
}
