package guestmem

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

var pageSize = uint64(os.Getpagesize())

// PageSize is the host page size that mappings are aligned to.
func PageSize() uint64 { return pageSize }

// Mapping is one MAP_SHARED mapping of a file (normally a memfd holding
// guest RAM). The mapping starts at a page-aligned file offset; the bytes
// the caller asked for start Skew bytes into it.
type Mapping struct {
	mu   sync.Mutex
	mem  []byte // whole mmap, page-aligned and page-rounded; nil once unmapped
	skew uint64 // offset of the requested start inside mem
	size uint64 // requested length
	// checked: a front-end's file, whose accesses race builds check
	// (see Guard).
	checked bool
}

// Map maps size bytes of fd starting at file offset off, read-write and
// shared. off need not be page-aligned. The fd may be closed afterwards.
//
// The file belongs to a front-end, which may shrink it under us at any
// time: every access through the mapping must run inside Guard (race
// builds check it).
func Map(fd int, off, size uint64) (*Mapping, error) {
	m, err := mapFile(fd, off, size)
	if err != nil {
		return nil, err
	}
	m.checked = true
	registerChecked(m)
	return m, nil
}

// MapOwn is Map for a file whose size nobody else can change: a memfd we
// sealed against shrinking, or a simulated guest's own RAM. Accessing it
// cannot fault, so it needs no Guard.
func MapOwn(fd int, off, size uint64) (*Mapping, error) { return mapFile(fd, off, size) }

func mapFile(fd int, off, size uint64) (*Mapping, error) {
	if size == 0 {
		return nil, errors.New("guestmem: zero-sized mapping")
	}
	base := off &^ (pageSize - 1)
	skew := off - base
	total, ok := addNoOverflow(skew, size)
	if !ok || total > maxMapping {
		return nil, fmt.Errorf("guestmem: mapping of %#x bytes at offset %#x is too large", size, off)
	}
	total = roundUp(total, pageSize)
	if base > 1<<62 {
		return nil, fmt.Errorf("guestmem: file offset %#x out of range", off)
	}
	if err := checkFile(fd, off, size); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, int64(base), int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("guestmem: mmap %#x bytes at offset %#x: %w", total, base, err)
	}
	return &Mapping{mem: mem, skew: skew, size: size}, nil
}

// checkFile refuses to map what cannot be backed: touching a page of a
// mapping beyond the end of its file raises SIGBUS, which would take the
// whole daemon down. Guest RAM comes in regular files (memfd, hugetlbfs,
// tmpfs); the range must lie inside the file as it is now. A front-end that
// shrinks an unsealed file later makes the access fault, which Guard turns
// into an error.
func checkFile(fd int, off, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("guestmem: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("guestmem: fd is not a regular file (mode %#o): %w", st.Mode, ErrBadFile)
	}
	if end, ok := addNoOverflow(off, size); !ok || end > uint64(st.Size) {
		return fmt.Errorf("guestmem: [%#x, +%#x) lies beyond the %#x-byte file: %w", off, size, st.Size, ErrBadFile)
	}
	return nil
}

// ErrBadFile is wrapped when a descriptor cannot back guest memory.
var ErrBadFile = errors.New("file cannot back guest memory")

// maxMapping bounds a single mapping (1 TiB of address space per region is
// far beyond any guest we serve from one host, and keeps int conversions
// safe on 64-bit hosts).
const maxMapping = 1 << 46

// Size is the length the mapping was created with.
func (m *Mapping) Size() uint64 { return m.size }

// View returns the whole mapping as a View.
func (m *Mapping) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return View{}
	}
	return View{b: m.mem[m.skew : m.skew+m.size]}
}

// PageRange returns the whole pages of the mmap that hold bytes
// [off, off+n) of the mapping, for callers that pin or advise on pages
// (pvdma). Neighbouring ranges may share a page when off is not page
// aligned. It fails when the range is outside the mapping or the mapping
// is gone.
func (m *Mapping) PageRange(off, n uint64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end, ok := addNoOverflow(off, n)
	switch {
	case m.mem == nil:
		return nil, fmt.Errorf("guestmem: page range of an unmapped mapping: %w", ErrOutOfRange)
	case !ok || n == 0 || end > m.size:
		return nil, fmt.Errorf("guestmem: page range [%#x, +%#x) of a %#x-byte mapping: %w", off, n, m.size, ErrOutOfRange)
	}
	lo := (m.skew + off) &^ (pageSize - 1)
	hi := min(roundUp(m.skew+end, pageSize), uint64(len(m.mem)))
	return m.mem[lo:hi:hi], nil
}

// Unmap releases the mapping. Views into it must no longer be used.
// It is safe to call more than once.
func (m *Mapping) Unmap() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil
	}
	if m.checked {
		unregisterChecked(m)
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	if err != nil {
		return fmt.Errorf("guestmem: munmap: %w", err)
	}
	return nil
}

func roundUp(v, align uint64) uint64 { return (v + align - 1) &^ (align - 1) }

func addNoOverflow(a, b uint64) (uint64, bool) {
	s := a + b
	return s, s >= a
}

// MapAnonymous returns a private anonymous mapping of size bytes. Tests and
// fuzzers use it where a guest would have handed us a memfd.
func MapAnonymous(size uint64) (*Mapping, error) {
	if size == 0 || size > maxMapping {
		return nil, fmt.Errorf("guestmem: anonymous mapping of %#x bytes", size)
	}
	total := roundUp(size, pageSize)
	mem, err := unix.Mmap(-1, 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("guestmem: anonymous mmap of %#x bytes: %w", total, err)
	}
	return &Mapping{mem: mem, size: size}, nil
}
