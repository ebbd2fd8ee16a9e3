package shmregion

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned by operations on a closed Region.
var ErrClosed = errors.New("shmregion: region closed")

// MaxSize bounds one region; doorbell regions are a few MiB at most.
const MaxSize = 1 << 30

// seals fixes the size of the file for good. F_SEAL_WRITE is left off on
// purpose: both sides must write (the guest rings doorbells, the daemon
// publishes engine state).
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Region is one memfd-backed shared-memory region.
type Region struct {
	name string
	size uint64

	mu sync.Mutex
	fd int // -1 once closed
	m  *guestmem.Mapping
}

// New creates a sealed memfd of size bytes named name (the name shows in
// /proc/*/maps and fdinfo, which is all it is for) and maps it shared.
// size must be a non-zero multiple of the host page size.
func New(name string, size uint64) (*Region, error) {
	ps := guestmem.PageSize()
	if size == 0 || size%ps != 0 || size > MaxSize {
		return nil, fmt.Errorf("shmregion %q: size %#x is not a page multiple in (0, %#x]", name, size, uint64(MaxSize))
	}
	fd, err := unix.MemfdCreate("vstellar:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shmregion %q: memfd_create: %w", name, err)
	}
	fail := func(what string, err error) (*Region, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("shmregion %q: %s: %w", name, what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	m, err := guestmem.MapOwn(fd, 0, size)
	if err != nil {
		return fail("map", err)
	}
	return &Region{name: name, size: size, fd: fd, m: m}, nil
}

// Name is the name the region was created with.
func (r *Region) Name() string { return r.name }

// Size is the region's size in bytes.
func (r *Region) Size() uint64 { return r.size }

// Fd is the memfd to hand to the front-end with SHMEM_MAP. The Region
// keeps ownership: the caller must not close it (the vhost-user layer
// sends it with SCM_RIGHTS, which duplicates it into the receiver). It is
// -1 after Close.
func (r *Region) Fd() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fd
}

// View is the daemon's view of the whole region. It is empty after Close,
// and must not be used after Close.
func (r *Region) View() guestmem.View {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		return guestmem.View{}
	}
	return r.m.View()
}

// Zero returns every page of the region to zero (and to the kernel, which
// frees them until next touched). Used on device reset so that a new
// driver never sees the previous one's doorbell values. The guest may
// still hold a mapping; it sees zeros.
func (r *Region) Zero() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return ErrClosed
	}
	err := unix.Fallocate(r.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(r.size))
	if err != nil {
		// Punching holes is an optimisation; zero by hand where the
		// kernel refuses it.
		clear(r.m.View().Bytes())
	}
	return nil
}

// Close unmaps the region and closes the memfd. The front-end's mapping
// (its own fd and mmap) survives until it unmaps; the memory is freed when
// the last reference goes. Close is idempotent.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return nil
	}
	errUnmap := r.m.Unmap()
	errClose := unix.Close(r.fd)
	r.fd, r.m = -1, nil
	if errClose != nil {
		errClose = fmt.Errorf("shmregion %q: close: %w", r.name, errClose)
	}
	return errors.Join(errUnmap, errClose)
}
