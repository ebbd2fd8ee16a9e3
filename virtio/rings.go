package virtio

import (
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
)

// RingAddrs holds the guest physical addresses of a split queue's three
// parts. (vhost-user's SET_VRING_ADDR carries VMM user addresses; the vhost
// layer converts them with guestmem.Table.UserToGuest first.)
type RingAddrs struct {
	Desc, Avail, Used uint64
}

// ringViews are the translated rings of one queue.
type ringViews struct {
	desc, avail, used guestmem.View
}

// mapRings validates size and addrs and translates the rings through mem.
// Each ring must lie inside one region and be aligned as the spec requires
// in guest physical space.
func mapRings(mem *guestmem.Table, size uint16, a RingAddrs) (ringViews, error) {
	if !validQueueSize(size) {
		return ringViews{}, fmt.Errorf("queue size %d is not a power of two in [1, %d]: %w", size, MaxQueueSize, ErrBadRing)
	}
	dl, al, ul := RingSizes(size)
	parts := []struct {
		name  string
		gpa   uint64
		n     uint64
		align uint64
	}{
		{"descriptor table", a.Desc, dl, DescAlign},
		{"available ring", a.Avail, al, AvailAlign},
		{"used ring", a.Used, ul, UsedAlign},
	}
	var vs [3]guestmem.View
	for i, p := range parts {
		if p.gpa%p.align != 0 {
			return ringViews{}, fmt.Errorf("%s at %#x is not %d-byte aligned: %w", p.name, p.gpa, p.align, ErrBadRing)
		}
		v, err := mem.Translate(p.gpa, p.n)
		if err != nil {
			return ringViews{}, fmt.Errorf("%s [%#x, +%#x): %w: %w", p.name, p.gpa, p.n, ErrBadRing, err)
		}
		// The ordered 16-bit accessors on the avail and used rings need
		// 2-byte alignment in our mapping too (a region mapped at an odd
		// file offset would break it even for an aligned guest address).
		// Plain reads of the descriptor table need none.
		if p.name != "descriptor table" && !v.Aligned(0, 2) {
			return ringViews{}, fmt.Errorf("%s at %#x is misaligned in the host mapping: %w", p.name, p.gpa, ErrBadRing)
		}
		vs[i] = v
	}
	return ringViews{desc: vs[0], avail: vs[1], used: vs[2]}, nil
}
