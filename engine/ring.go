package engine

import (
	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// copyEntry copies entry idx (a free-running counter) of a ring of size
// entries (a power of two) of stride bytes into dst: WQEs are decoded from
// such a private copy, never from guest memory the guest can rewrite.
func copyEntry(dst []byte, ring guestmem.View, idx, size, stride uint32) {
	off := uint64(idx&(size-1)) * uint64(stride)
	copy(dst, ring.Bytes()[off:off+uint64(stride)])
}

// guest is what the engine reaches of the guest: its memory table, the
// doorbell region and its layout, and the MTT that pins the rings. It is
// Engine run state (written under mu with the gate held exclusively,
// read by the data path under the gate shared), so nothing translated
// from it outlives a change unnoticed: gen counts the changes after which
// views of guest memory taken earlier may be dead (start, stop,
// SetMemory, Reset), and a streamed request (stream.go) checks it between
// its steps.
type guest struct {
	mtt    *emtt.Table // cfg.MTT
	mem    *guestmem.Table
	db     guestmem.View // the whole doorbell region
	page   guestmem.View // its device page
	layout abi.DoorbellLayout
	gen    uint64
}

// checkRing validates a ring of n entries of stride bytes at gpa for
// creation: aligned to its stride (so no entry straddles anything and
// index arithmetic is a mask), wholly inside one guest RAM region, and not
// overlapping IO memory (the guest-RAM doorbell area), which the device
// must never DMA into. It returns the ring's view.
func (g *guest) checkRing(what string, gpa uint64, n, stride uint32) (guestmem.View, error) {
	size := uint64(n) * uint64(stride)
	if gpa%uint64(stride) != 0 {
		return guestmem.View{}, statusErr(abi.StatusInvalidArgument, "%s at %#x not aligned to its %d-byte stride", what, gpa, stride)
	}
	if gpa+size < gpa {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s [%#x, +%#x) wraps", what, gpa, size)
	}
	if g.mtt != nil && g.mtt.MemTypeOf(emtt.Span{GPA: gpa, Len: size}) == emtt.MemIO {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s [%#x, +%#x) overlaps IO memory", what, gpa, size)
	}
	return g.translateRing(what, gpa, size)
}

// translateRing maps a ring against the current guest memory table. It is
// also used to rebind existing rings after the table changed.
func (g *guest) translateRing(what string, gpa, size uint64) (guestmem.View, error) {
	if g.mem == nil {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s at %#x: no guest memory yet (SetMemory or Start first)", what, gpa)
	}
	v, err := g.mem.Translate(gpa, size)
	if err != nil {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s: %v", what, err)
	}
	return v, nil
}

// pinRing adds the pins of a ring's memory to h, kept for as long as the
// ring lives: the engine reads WQEs from it and writes CQEs into it all
// the time, as a NIC would DMA. An engine without a pin cache pins
// nothing. On error h is released.
func (g *guest) pinRing(h *pvdma.Hold, what string, gpa, size uint64) error {
	if g.mtt == nil || g.mtt.Pins() == nil {
		return nil
	}
	if err := g.mtt.Pins().Acquire(h, gpa, size); err != nil {
		h.Release()
		return statusErr(abi.StatusNoResources, "%s [%#x, +%#x): %v", what, gpa, size, err)
	}
	return nil
}

// checkDoorbell validates a doorbell record index for a new object: inside
// the layout the limits imply (and the bound layout when running), and not
// used by another object. Caller holds mu.
func (e *Engine) checkDoorbell(idx uint32) error {
	max := e.limits.DoorbellRecords()
	if e.running && uint64(e.guest.layout.Records) < max {
		max = uint64(e.guest.layout.Records)
	}
	if uint64(idx) >= max {
		return statusErr(abi.StatusInvalidArgument, "doorbell record %d outside %d records", idx, max)
	}
	if e.objs.recordUsed(idx) {
		return statusErr(abi.StatusBusy, "doorbell record %d already in use", idx)
	}
	return nil
}

// record returns the view of doorbell record idx in the bound region, or
// false if the layout has no such record. Caller holds gate exclusively
// (or the engine is not running yet).
func (g *guest) record(idx uint32) (guestmem.View, bool) {
	off, ok := g.layout.RecordOffset(idx)
	if !ok {
		return guestmem.View{}, false
	}
	v, err := g.db.Sub(off, uint64(g.layout.RecordSize))
	if err != nil || v.Len() < 16 {
		return guestmem.View{}, false
	}
	return v, true
}

// zeroRecord clears the four counters of a fresh record: a new object
// starts with every index at 0 on both sides.
func zeroRecord(rec guestmem.View) {
	for off := uint64(0); off < 16; off += 4 {
		rec.StoreUint32Release(off, 0)
	}
}
