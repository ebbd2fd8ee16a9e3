package twolevel

import (
	"fmt"
	"slices"

	"github.com/vstellar/vstellar/guestmem"
)

// hostAlign aligns every mapping's host physical base, and the first base
// is hostAlign too: 0 is never a host address.
const hostAlign = 1 << 30

// HostMemory is the host physical address space: every guest memory
// mapping a device uses gets a range of it, once, however many devices
// share the mapping.
type HostMemory struct {
	spans []hostSpan                   // sorted by base
	bases map[*guestmem.Mapping]uint64 // mapping -> base
	next  uint64
}

type hostSpan struct {
	base uint64
	m    *guestmem.Mapping
}

// NewHostMemory returns an empty host physical address space.
func NewHostMemory() *HostMemory {
	return &HostMemory{bases: make(map[*guestmem.Mapping]uint64), next: hostAlign}
}

// Add gives m a host physical range (the one it already has if added
// before) and returns its base.
func (h *HostMemory) Add(m *guestmem.Mapping) uint64 {
	if b, ok := h.bases[m]; ok {
		return b
	}
	b := h.next
	h.next += (m.Size() + hostAlign - 1) &^ (hostAlign - 1)
	h.bases[m] = b
	h.spans = append(h.spans, hostSpan{base: b, m: m})
	return b
}

// Base returns m's host physical base, if it has one.
func (h *HostMemory) Base(m *guestmem.Mapping) (uint64, bool) {
	b, ok := h.bases[m]
	return b, ok
}

// View returns the n bytes at host physical address hpa, which must lie
// in one mapping.
func (h *HostMemory) View(hpa, n uint64) (guestmem.View, error) {
	i, _ := slices.BinarySearchFunc(h.spans, hpa, func(s hostSpan, a uint64) int {
		switch {
		case s.base+s.m.Size() <= a:
			return -1
		case s.base > a:
			return 1
		}
		return 0
	})
	if i == len(h.spans) || hpa < h.spans[i].base {
		return guestmem.View{}, fmt.Errorf("host physical %#x: %w", hpa, guestmem.ErrOutOfRange)
	}
	s := h.spans[i]
	v, err := s.m.View().Sub(hpa-s.base, n)
	if err != nil {
		return guestmem.View{}, fmt.Errorf("host physical [%#x, +%#x): %w", hpa, n, err)
	}
	return v, nil
}
