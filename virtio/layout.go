package virtio

// Split-ring layout (VIRTIO 1.x "Split Virtqueues"). These constants are the
// only code the device and driver sides share.

// MaxQueueSize is the largest split queue size.
const MaxQueueSize = 32768

// Descriptor flags (struct virtq_desc.flags).
const (
	DescFNext     uint16 = 1 // the chain continues at .next
	DescFWrite    uint16 = 2 // device-writable buffer (else device-readable)
	DescFIndirect uint16 = 4 // the buffer is a table of descriptors
)

// Ring flags.
const (
	AvailFNoInterrupt uint16 = 1 // in avail->flags: driver asks for no used-buffer notifications
	UsedFNoNotify     uint16 = 1 // in used->flags: device asks for no kicks
)

// Sizes and alignments.
const (
	DescSize      = 16 // one struct virtq_desc
	UsedElemSize  = 8  // one struct virtq_used_elem
	DescAlign     = 16
	AvailAlign    = 2
	UsedAlign     = 4
	ringHeaderLen = 4 // flags + idx, both rings
	eventFieldLen = 2 // used_event / avail_event
)

// Field offsets inside a descriptor.
const (
	descOffAddr  = 0
	descOffLen   = 8
	descOffFlags = 12
	descOffNext  = 14
)

// Field offsets inside the avail and used rings.
const (
	ringOffFlags = 0
	ringOffIdx   = 2
	ringOffRing  = 4
)

// RingSizes returns the byte sizes of the descriptor table, the available
// ring and the used ring for a queue of size entries. The ring sizes include
// the trailing event fields (used_event, avail_event), which the spec
// counts whether or not EVENT_IDX is negotiated.
func RingSizes(size uint16) (desc, avail, used uint64) {
	n := uint64(size)
	return DescSize * n, ringHeaderLen + 2*n + eventFieldLen, ringHeaderLen + UsedElemSize*n + eventFieldLen
}

// availRingOff is the offset of avail->ring[slot]; availUsedEventOff the
// offset of used_event.
func availRingOff(slot uint16) uint64 { return ringOffRing + 2*uint64(slot) }
func availUsedEventOff(size uint16) uint64 {
	return ringOffRing + 2*uint64(size)
}

// usedRingOff is the offset of used->ring[slot]; usedAvailEventOff the
// offset of avail_event.
func usedRingOff(slot uint16) uint64 { return ringOffRing + UsedElemSize*uint64(slot) }
func usedAvailEventOff(size uint16) uint64 {
	return ringOffRing + UsedElemSize*uint64(size)
}

// validQueueSize reports whether size is a legal split queue size.
func validQueueSize(size uint16) bool {
	return size != 0 && size&(size-1) == 0 && uint32(size) <= MaxQueueSize
}
