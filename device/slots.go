package device

// slots is a bounded handle table: up to max live objects in slots
// 0..max-1, each kind mapping slot numbers to handles its own way (PDN =
// slot+1, QPN = slot+2, ...). Its memory is bounded by max whatever the
// guest does.
//
// Never-used slots are handed out first and freed slots are reused in the
// order they were freed, so a handle the guest keeps after destroying its
// object names nothing for as long as possible (a stale handle that does
// name a newer object still names one of the same guest's objects).
type slots[T any] struct {
	max   uint32
	items []*T     // index = slot; nil = free; grows up to max
	free  []uint32 // freed slots, oldest first from head
	head  int
	n     uint32 // live objects
}

func newSlots[T any](max uint32) slots[T] { return slots[T]{max: max} }

// len is the number of live objects.
func (s *slots[T]) len() uint32 { return s.n }

// add stores v in a free slot and returns the slot; ok is false when the
// table is full.
func (s *slots[T]) add(v *T) (slot uint32, ok bool) {
	if s.n >= s.max {
		return 0, false
	}
	if uint32(len(s.items)) < s.max {
		slot = uint32(len(s.items))
		s.items = append(s.items, v)
	} else {
		// Every slot has been used and n < max: the free list holds
		// exactly the max-n free slots.
		slot = s.free[s.head]
		s.head++
		if s.head > len(s.free)/2 {
			s.free = append(s.free[:0], s.free[s.head:]...)
			s.head = 0
		}
		s.items[slot] = v
	}
	s.n++
	return slot, true
}

// get returns the object in slot, or nil. slot may be hostile.
func (s *slots[T]) get(slot uint32) *T {
	if slot >= uint32(len(s.items)) {
		return nil
	}
	return s.items[slot]
}

// remove frees a live slot.
func (s *slots[T]) remove(slot uint32) {
	if s.get(slot) == nil {
		return
	}
	s.items[slot] = nil
	// The free list is only drawn from once every never-used slot is
	// gone, so it then holds exactly the free slots.
	s.free = append(s.free, slot)
	s.n--
}

// clear frees every slot and the memory behind them.
func (s *slots[T]) clear() { *s = slots[T]{max: s.max} }
