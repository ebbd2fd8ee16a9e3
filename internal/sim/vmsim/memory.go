package vmsim

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/frontend"
)

// Guest physical layout (QEMU q35 with its default 2 GiB below 4 GiB when
// RAM does not fit under the PCI hole).
const (
	lowRAMMax   = 2 << 30 // RAM below the PCI hole
	highRAMBase = 4 << 30 // GPA where the rest of RAM continues
	allocBase   = 1 << 20 // the allocator leaves the first MiB alone
)

// guestRAM is the memfd behind guest RAM and the VMM's mapping of it.
type guestRAM struct {
	fd      int
	size    uint64
	mapping *guestmem.Mapping // whole memfd, file offset 0
	regions []frontend.MemRegion
	table   *guestmem.Table

	mu   sync.Mutex
	next uint64 // allocator cursor in low RAM
	end  uint64 // end of low RAM
}

func newGuestRAM(size uint64) (*guestRAM, error) {
	ps := guestmem.PageSize()
	if size == 0 || size%ps != 0 {
		return nil, fmt.Errorf("guest RAM of %#x bytes is not a positive page multiple", size)
	}
	if size < 2*allocBase {
		return nil, fmt.Errorf("guest RAM of %#x bytes is too small (min %#x)", size, 2*allocBase)
	}
	fd, err := unix.MemfdCreate("vstellar-guest-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	r := &guestRAM{fd: fd, size: size}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		r.close()
		return nil, fmt.Errorf("ftruncate guest RAM to %#x: %w", size, err)
	}
	// memory-backend-memfd seals by default (seal=on).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		r.close()
		return nil, fmt.Errorf("sealing guest RAM: %w", err)
	}
	if r.mapping, err = guestmem.MapOwn(fd, 0, size); err != nil {
		r.close()
		return nil, err
	}
	base := r.mapping.Addr()
	low := min(size, lowRAMMax)
	r.end = low
	r.next = allocBase
	r.regions = []frontend.MemRegion{{GuestPhys: 0, Size: low, UserAddr: base, MmapOffset: 0}}
	tregs := []guestmem.Region{{GuestPhys: 0, Size: low, UserAddr: base, MmapOffset: 0, Mapping: r.mapping}}
	if size > lowRAMMax {
		hi := size - lowRAMMax
		w, err := r.mapping.Window(lowRAMMax, hi)
		if err != nil {
			r.close()
			return nil, err
		}
		r.regions = append(r.regions, frontend.MemRegion{GuestPhys: highRAMBase, Size: hi, UserAddr: base + lowRAMMax, MmapOffset: lowRAMMax})
		tregs = append(tregs, guestmem.Region{GuestPhys: highRAMBase, Size: hi, UserAddr: base + lowRAMMax, MmapOffset: lowRAMMax, Mapping: w})
	}
	if r.table, err = guestmem.NewTable(tregs); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// errNoMemory is returned when low RAM is exhausted.
var errNoMemory = errors.New("guest low RAM exhausted")

// alloc hands out guest physical memory in low RAM. It never touches the
// memory and never frees it.
func (r *guestRAM) alloc(size, align uint64) (uint64, error) {
	if size == 0 {
		return 0, errors.New("zero-sized allocation")
	}
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("alignment %#x is not a power of two", align)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	gpa := (r.next + align - 1) &^ (align - 1)
	if gpa < r.next || gpa+size < gpa || gpa+size > r.end {
		return 0, fmt.Errorf("allocating %#x bytes: %w", size, errNoMemory)
	}
	r.next = gpa + size
	return gpa, nil
}

// userAddr translates a guest physical address to the VMM's address.
func (r *guestRAM) userAddr(gpa uint64) (uint64, error) {
	for _, reg := range r.regions {
		if reg.GuestPhys <= gpa && gpa-reg.GuestPhys < reg.Size {
			return reg.UserAddr + (gpa - reg.GuestPhys), nil
		}
	}
	return 0, fmt.Errorf("guest physical %#x: %w", gpa, guestmem.ErrOutOfRange)
}

func (r *guestRAM) close() {
	if r.mapping != nil {
		r.mapping.Unmap()
		r.mapping = nil
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}
