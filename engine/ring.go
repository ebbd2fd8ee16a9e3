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

// checkRing validates a ring of n entries of stride bytes at gpa for
// creation: aligned to its stride (so no entry straddles anything and
// index arithmetic is a mask), wholly inside one guest RAM region, and not
// overlapping IO memory (the guest-RAM doorbell area), which the device
// must never DMA into. It returns the ring's view.
func (e *Engine) checkRing(what string, gpa uint64, n, stride uint32) (guestmem.View, error) {
	size := uint64(n) * uint64(stride)
	if gpa%uint64(stride) != 0 {
		return guestmem.View{}, statusErr(abi.StatusInvalidArgument, "%s at %#x not aligned to its %d-byte stride", what, gpa, stride)
	}
	if gpa+size < gpa {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s [%#x, +%#x) wraps", what, gpa, size)
	}
	if e.cfg.MTT != nil && e.cfg.MTT.MemTypeOf(emtt.Span{GPA: gpa, Len: size}) == emtt.MemIO {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s [%#x, +%#x) overlaps IO memory", what, gpa, size)
	}
	return e.translateRing(what, gpa, size)
}

// translateRing maps a ring against the current guest memory table. It is
// also used to rebind existing rings after the table changed.
func (e *Engine) translateRing(what string, gpa, size uint64) (guestmem.View, error) {
	if e.mem == nil {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s at %#x: no guest memory yet (SetMemory or Start first)", what, gpa)
	}
	v, err := e.mem.Translate(gpa, size)
	if err != nil {
		return guestmem.View{}, statusErr(abi.StatusBadAddress, "%s: %v", what, err)
	}
	return v, nil
}

// pinRing adds the pins of a ring's memory to h, kept for as long as the
// ring lives: the engine reads WQEs from it and writes CQEs into it all
// the time, as a NIC would DMA. An engine without a pin cache pins
// nothing. On error h is released.
func (e *Engine) pinRing(h *pvdma.Hold, what string, gpa, size uint64) error {
	if e.cfg.MTT == nil || e.cfg.MTT.Pins() == nil {
		return nil
	}
	if err := e.cfg.MTT.Pins().Acquire(h, gpa, size); err != nil {
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
	if e.running && uint64(e.layout.Records) < max {
		max = uint64(e.layout.Records)
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
func (e *Engine) record(idx uint32) (guestmem.View, bool) {
	off, ok := e.layout.RecordOffset(idx)
	if !ok {
		return guestmem.View{}, false
	}
	v, err := e.db.Sub(off, uint64(e.layout.RecordSize))
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
