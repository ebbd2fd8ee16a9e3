package frontend

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
)

// ShmemSpace holds a device's VIRTIO shared memory regions as the VMM sees
// them: one reserved (PROT_NONE) address range per shmid, sized by
// GET_SHMEM_CONFIG, into which the back-end's SHMEM_MAP requests map their
// fds. It plays the part of QEMU's shared-memory BAR.
//
// Touching a part of a region that nothing is mapped into faults the whole
// process, so the guest side should only read through ShmemSpace.View with
// a range Mapped reports as covered.
//
// As in QEMU, the space belongs to the device, not to a connection: a
// mapping stays until SHMEM_UNMAP, DropMappings (the device's reset) or
// Close, and the space keeps a descriptor of each mapped file so the VMM
// can report the mapping as guest memory (Files).
type ShmemSpace struct {
	mu      sync.Mutex
	regions map[uint8]*shmemRegion
	closed  bool
}

type shmemRegion struct {
	res  *guestmem.Mapping
	size uint64
	maps []shmemMap // sorted by ShmOffset, non-overlapping
}

// shmemMap is one mapping and the file behind it, a descriptor of our own.
type shmemMap struct {
	ShmemMapping
	fd int
}

// MappedFile is one mapping as a VMM reports it to the back-end as
// memory: where it lies in this process and the file behind it.
type MappedFile struct {
	ShmemMapping
	// Addr is the mapping's address in this process.
	Addr uint64
	// FD is the mapped file, owned by the ShmemSpace: valid until the
	// mapping goes.
	FD int
}

// NewShmemSpace returns an empty space; GET_SHMEM_CONFIG configures it.
func NewShmemSpace() *ShmemSpace {
	return &ShmemSpace{regions: map[uint8]*shmemRegion{}}
}

// Configure reserves address space for every non-zero size (indexed by
// shmid). Sizes must be page multiples. Configuring again with the same
// sizes (a reconnect's GET_SHMEM_CONFIG) keeps the regions and their
// mappings; different sizes are an error, because the regions are fixed
// for the device's lifetime.
func (s *ShmemSpace) Configure(sizes []uint64) error {
	if len(sizes) > MaxShmemRegions {
		return fmt.Errorf("%d shared memory regions (max %d)", len(sizes), MaxShmemRegions)
	}
	ps := guestmem.PageSize()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("shared memory space closed")
	}
	if len(s.regions) > 0 {
		for id, sz := range sizes {
			r := s.regions[uint8(id)]
			if (r == nil) != (sz == 0) || (r != nil && r.size != sz) {
				return fmt.Errorf("shared memory region %d changed size to %#x: %w", id, sz, ErrProtocol)
			}
		}
		return nil
	}
	for id, sz := range sizes {
		if sz == 0 {
			continue
		}
		if sz%ps != 0 || sz > 1<<40 {
			s.closeLocked()
			return fmt.Errorf("shared memory region %d of %#x bytes is not a usable page multiple: %w", id, sz, ErrProtocol)
		}
		res, err := guestmem.ReserveAddressSpace(sz)
		if err != nil {
			s.closeLocked()
			return fmt.Errorf("shared memory region %d: %w", id, err)
		}
		s.regions[uint8(id)] = &shmemRegion{res: res, size: sz}
	}
	return nil
}

// Sizes returns the configured region sizes indexed by shmid (nil before
// Configure).
func (s *ShmemSpace) Sizes() map[uint8]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint8]uint64{}
	for id, r := range s.regions {
		out[id] = r.size
	}
	return out
}

// Map places fd into region m.ShmID as SHMEM_MAP asks, and keeps a
// duplicate of fd for as long as the mapping lasts. The range must be
// inside the region, page-aligned, non-empty and must not overlap an
// existing mapping; flags must be 0 (read-only) or ShmemMapRW.
func (s *ShmemSpace) Map(m ShmemMapping, fd int) error {
	ps := guestmem.PageSize()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.regions[m.ShmID]
	switch {
	case s.closed:
		return errors.New("shared memory space closed")
	case r == nil:
		return fmt.Errorf("no shared memory region %d", m.ShmID)
	case m.Flags&^ShmemMapRW != 0:
		return fmt.Errorf("unknown SHMEM_MAP flags %#x", m.Flags)
	case m.Len == 0 || m.ShmOffset+m.Len < m.ShmOffset || m.ShmOffset+m.Len > r.size:
		return fmt.Errorf("range [%#x, +%#x) outside %#x-byte region %d", m.ShmOffset, m.Len, r.size, m.ShmID)
	case m.ShmOffset%ps != 0 || m.Len%ps != 0 || m.FdOffset%ps != 0:
		return fmt.Errorf("range [%#x, +%#x) at file offset %#x is not page-aligned", m.ShmOffset, m.Len, m.FdOffset)
	}
	for _, old := range r.maps {
		if m.ShmOffset < old.ShmOffset+old.Len && old.ShmOffset < m.ShmOffset+m.Len {
			return fmt.Errorf("range [%#x, +%#x) overlaps mapping [%#x, +%#x) in region %d",
				m.ShmOffset, m.Len, old.ShmOffset, old.Len, m.ShmID)
		}
	}
	own, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("keeping the mapped file: %w", err)
	}
	if err := r.res.MapFileFixed(m.ShmOffset, m.Len, fd, m.FdOffset, m.Flags&ShmemMapRW != 0); err != nil {
		unix.Close(own)
		return err
	}
	i, _ := slices.BinarySearchFunc(r.maps, m.ShmOffset, func(x shmemMap, off uint64) int {
		return cmpU64(x.ShmOffset, off)
	})
	r.maps = slices.Insert(r.maps, i, shmemMap{ShmemMapping: m, fd: own})
	return nil
}

// Unmap removes the mapping that covers exactly [m.ShmOffset, +m.Len) of
// region m.ShmID, leaving the range inaccessible again.
func (s *ShmemSpace) Unmap(m ShmemMapping) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.regions[m.ShmID]
	if s.closed || r == nil {
		return fmt.Errorf("no shared memory region %d", m.ShmID)
	}
	i := slices.IndexFunc(r.maps, func(x shmemMap) bool { return x.ShmOffset == m.ShmOffset && x.Len == m.Len })
	if i < 0 {
		return fmt.Errorf("range [%#x, +%#x) of region %d is not exactly one mapping", m.ShmOffset, m.Len, m.ShmID)
	}
	if err := r.res.ReleaseFixed(m.ShmOffset, m.Len); err != nil {
		return err
	}
	unix.Close(r.maps[i].fd)
	r.maps = slices.Delete(r.maps, i, i+1)
	return nil
}

// Mappings lists region shmid's current mappings in offset order.
func (s *ShmemSpace) Mappings(shmid uint8) []ShmemMapping {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ShmemMapping
	if r := s.regions[shmid]; r != nil {
		for _, m := range r.maps {
			out = append(out, m.ShmemMapping)
		}
	}
	return out
}

// Files lists every mapping of every region, by shmid and offset, with
// its address and file. The descriptors stay the space's: use them before
// the mapping can go.
func (s *ShmemSpace) Files() []MappedFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []MappedFile
	for id := range MaxShmemRegions {
		r := s.regions[uint8(id)]
		if r == nil {
			continue
		}
		for _, m := range r.maps {
			out = append(out, MappedFile{ShmemMapping: m.ShmemMapping, Addr: r.res.Addr() + m.ShmOffset, FD: m.fd})
		}
	}
	return out
}

// View returns the whole of region shmid, or false if there is none. Only
// ranges Mapped reports as covered may be touched.
func (s *ShmemSpace) View(shmid uint8) (guestmem.View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.regions[shmid]
	if r == nil || s.closed {
		return guestmem.View{}, false
	}
	return r.res.View(), true
}

// Mapped returns a view of n bytes at off in region shmid if every byte is
// currently backed by a back-end mapping, and an error otherwise.
func (s *ShmemSpace) Mapped(shmid uint8, off, n uint64) (guestmem.View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.regions[shmid]
	if r == nil || s.closed {
		return guestmem.View{}, fmt.Errorf("no shared memory region %d", shmid)
	}
	at, end := off, off+n
	if end < off || end > r.size {
		return guestmem.View{}, fmt.Errorf("range [%#x, +%#x) of region %d: %w", off, n, shmid, guestmem.ErrOutOfRange)
	}
	for _, m := range r.maps {
		if at >= end {
			break
		}
		if m.ShmOffset <= at && at < m.ShmOffset+m.Len {
			at = m.ShmOffset + m.Len
		}
	}
	if at < end {
		return guestmem.View{}, fmt.Errorf("byte %#x of region %d is not mapped", at, shmid)
	}
	return r.res.View().Sub(off, n)
}

// DropMappings removes every mapping from every region (device reset).
func (s *ShmemSpace) DropMappings() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
}

func (s *ShmemSpace) dropLocked() {
	for _, r := range s.regions {
		for _, m := range r.maps {
			_ = r.res.ReleaseFixed(m.ShmOffset, m.Len)
			unix.Close(m.fd)
		}
		r.maps = nil
	}
}

// Close releases every region and its mappings. Views of them must no
// longer be used.
func (s *ShmemSpace) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
	s.closed = true
}

func (s *ShmemSpace) closeLocked() {
	s.dropLocked()
	for id, r := range s.regions {
		_ = r.res.Unmap()
		delete(s.regions, id)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
