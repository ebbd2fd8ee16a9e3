package device

import (
	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/engine"
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

// objects is the resource model: the PDs, CQs, QPs, SRQs, AHs and MRs a
// driver builds, and the commands that build them. The engine holds the
// CQs', QPs' and SRQs' rings and state, the emtt table the MRs; objects
// keeps the handles and the rules that tie the objects together.
//
// Invariants:
//   - A CQ, QP or SRQ handle is in its table exactly while the engine has
//     the object (the slot is given back if the engine refuses it); an MR
//     is the emtt table's.
//   - users counts an object's live dependents (QPs, SRQs, MRs and AHs in
//     a PD; QP bindings of a CQ; QPs on an SRQ), so destroying a used
//     object is BUSY, and a QP's SRQ is in the QP's PD (PERMISSION).
//   - The tables stop at the limits (NO_RESOURCES, nothing allocated) and
//     the MRs' extra page-list spans stay within the span budget (mr.go).
//   - A destroyed CQ's, QP's or SRQ's pending events are dropped, so a
//     reused handle never receives the old object's events.
//
// Guarded by Device.omu.
type objects struct {
	limits abi.Limits
	eng    *engine.Engine
	mtt    *emtt.Table
	ev     *eventQueue
	gids   *gidTable  // address vectors' source GIDs
	dbs    *doorbells // CQs, QPs and SRQs need them

	pds  slots[pd]
	cqs  slots[cq]
	qps  slots[qp]
	srqs slots[srq]
	ahs  slots[ah]
	// mrExtraSpans is the span budget the live MRs use (see
	// extraSpanBudget).
	mrExtraSpans uint64

	closed bool
}

// init makes empty tables for d's limits.
func (o *objects) init(d *Device) {
	l := d.limits
	*o = objects{
		limits: l, eng: d.eng, mtt: d.mtt, ev: &d.ev, gids: &d.gids, dbs: &d.dbs,
		pds: newSlots[pd](l.MaxPD), cqs: newSlots[cq](l.MaxCQ), qps: newSlots[qp](l.MaxQP),
		srqs: newSlots[srq](l.MaxSRQ), ahs: newSlots[ah](l.MaxAH),
	}
}

// clear empties the tables, as the engine and the emtt table are reset.
func (o *objects) clear() {
	o.pds.clear()
	o.cqs.clear()
	o.qps.clear()
	o.srqs.clear()
	o.ahs.clear()
	o.mrExtraSpans = 0
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
func (o *objects) cqDoorbell(cqn uint32) uint32 { return o.limits.MaxQP + cqSlot(cqn) }
func (o *objects) srqDoorbell(srqn uint32) uint32 {
	return o.limits.MaxQP + o.limits.MaxCQ + srqSlot(srqn)
}
func qpDoorbell(qpn uint32) uint32 { return qpSlot(qpn) }

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
