package guestmem

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file serves the VMM side (internal/sim/vmsim and
// internal/sim/frontend, which simulate QEMU in tests): address-space reservations that files are mapped into at
// fixed addresses (a device's VIRTIO shared memory region, where the
// back-end's SHMEM_MAP places its pages), windows onto part of one mapping
// (guest RAM split around the PCI hole), and the host address of a mapping
// (the vhost-user "user address").

// ReserveAddressSpace reserves size bytes (rounded up to whole pages) of
// address space with an inaccessible anonymous mapping and returns it as a
// Mapping. Files are placed inside it with MapFileFixed and removed with
// ReleaseFixed; Unmap releases the reservation together with everything
// mapped into it. Touching a byte that is not currently file-backed faults,
// so callers must only hand out views of ranges they have mapped.
func ReserveAddressSpace(size uint64) (*Mapping, error) {
	if size == 0 || size > maxMapping {
		return nil, fmt.Errorf("guestmem: reservation of %#x bytes", size)
	}
	total := roundUp(size, pageSize)
	mem, err := unix.Mmap(-1, 0, int(total), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("guestmem: reserve %#x bytes of address space: %w", total, err)
	}
	return &Mapping{mem: mem, size: size}, nil
}

// MapFileFixed maps n bytes of fd, starting at file offset fdOff, over
// [off, off+n) of m with MAP_SHARED|MAP_FIXED, replacing whatever was there.
// off, n and fdOff must be page multiples and the range must lie inside m.
// The fd may be closed afterwards.
func (m *Mapping) MapFileFixed(off, n uint64, fd int, fdOff uint64, writable bool) error {
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	if fdOff%pageSize != 0 || fdOff > 1<<62 {
		return fmt.Errorf("guestmem: file offset %#x is not a usable page offset", fdOff)
	}
	return m.fixed(off, n, fd, int64(fdOff), prot, unix.MAP_SHARED|unix.MAP_FIXED)
}

// ReleaseFixed replaces [off, off+n) of m with inaccessible anonymous
// memory, dropping any file mapped there. off and n must be page multiples.
func (m *Mapping) ReleaseFixed(off, n uint64) error {
	return m.fixed(off, n, -1, 0, unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
}

func (m *Mapping) fixed(off, n uint64, fd int, fdOff int64, prot, flags int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return errors.New("guestmem: mapping is unmapped")
	}
	end, ok := addNoOverflow(off, n)
	switch {
	case n == 0 || !ok || end > m.size:
		return fmt.Errorf("guestmem: range [%#x, +%#x) of a %#x-byte mapping: %w", off, n, m.size, ErrOutOfRange)
	case m.skew != 0 || off%pageSize != 0 || n%pageSize != 0:
		return fmt.Errorf("guestmem: range [%#x, +%#x) is not page-aligned", off, n)
	}
	addr := unsafe.Pointer(&m.mem[off])
	got, err := unix.MmapPtr(fd, fdOff, addr, uintptr(n), prot, flags)
	if err != nil {
		return fmt.Errorf("guestmem: fixed mmap of [%#x, +%#x): %w", off, n, err)
	}
	if got != addr {
		// Cannot happen with MAP_FIXED; never leave a stray mapping.
		_ = unix.MunmapPtr(got, uintptr(n))
		return fmt.Errorf("guestmem: fixed mmap landed at %p, not %p", got, addr)
	}
	return nil
}

// Addr is the host virtual address of the mapping's first requested byte:
// what a VMM sends as a region's or a ring's user address. It is 0 once the
// mapping is unmapped.
func (m *Mapping) Addr() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&m.mem[m.skew])))
}

// Window returns a Mapping for the n bytes at off inside m that shares m's
// memory, so one mapping can back several table regions (guest RAM below
// and above the PCI hole). The window does not own the memory: m.Unmap
// releases it and invalidates the window, and calling Unmap on the window
// only detaches it (the kernel mapping stays; the error reports that).
// A window cannot cover all of m; use m itself.
func (m *Mapping) Window(off, n uint64) (*Mapping, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil, errors.New("guestmem: mapping is unmapped")
	}
	end, ok := addNoOverflow(off, n)
	if n == 0 || !ok || end > m.size {
		return nil, fmt.Errorf("guestmem: window [%#x, +%#x) of a %#x-byte mapping: %w", off, n, m.size, ErrOutOfRange)
	}
	start := m.skew + off
	base := start &^ (pageSize - 1)
	stop := roundUp(m.skew+end, pageSize)
	if base == 0 && stop == uint64(len(m.mem)) {
		return nil, errors.New("guestmem: window covers the whole mapping")
	}
	// mem's length differs from its capacity or it starts past the mapping's
	// first byte, so munmap through it is refused: the window never owns.
	return &Mapping{mem: m.mem[base:stop], skew: start - base, size: n}, nil
}
