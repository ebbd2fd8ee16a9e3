package pvdma

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Pinner makes guest memory usable for DMA and releases it. host is the
// daemon's mapping of the guest physical range starting at gpa, page
// aligned and page rounded; calls for different ranges never overlap.
// Pin and Unpin are called from the control path and from the engine's
// slow path, never with a pool or cache lock held that the fast path
// needs.
type Pinner interface {
	Pin(gpa uint64, host []byte) error
	Unpin(gpa uint64, host []byte) error
}

// MlockPinner is the default Pinner: it faults the pages in writable
// (MADV_POPULATE_WRITE) and locks them (mlock), so the engine's copies
// never wait for a page fault and the memory cannot be swapped out or
// moved by compaction while a DMA may use it. It needs CAP_IPC_LOCK or a
// large enough RLIMIT_MEMLOCK.
type MlockPinner struct{}

// Pin populates and locks host.
func (MlockPinner) Pin(gpa uint64, host []byte) error {
	// Populating first makes mlock's own population a no-op and
	// allocates shared memory writable, as DMA will use it. Kernels
	// before 5.14 lack the advice; mlock alone populates then.
	if err := unix.Madvise(host, unix.MADV_POPULATE_WRITE); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("pvdma: populate guest physical [%#x, +%#x): %w", gpa, len(host), err)
	}
	if err := unix.Mlock(host); err != nil {
		return fmt.Errorf("pvdma: mlock guest physical [%#x, +%#x): %w (needs CAP_IPC_LOCK or RLIMIT_MEMLOCK)", gpa, len(host), err)
	}
	return nil
}

// Unpin unlocks host.
func (MlockPinner) Unpin(gpa uint64, host []byte) error {
	if err := unix.Munlock(host); err != nil {
		return fmt.Errorf("pvdma: munlock guest physical [%#x, +%#x): %w", gpa, len(host), err)
	}
	return nil
}

// NopPinner pins nothing: the cache's bookkeeping, budgets and metrics
// work as with a real pinner. For unit tests and benchmarks of the cache
// itself.
type NopPinner struct{}

// Pin does nothing.
func (NopPinner) Pin(uint64, []byte) error { return nil }

// Unpin does nothing.
func (NopPinner) Unpin(uint64, []byte) error { return nil }

// DefaultLimit is the host budget when the operator sets none: no limit
// for root (which has CAP_IPC_LOCK), else the process's RLIMIT_MEMLOCK,
// beyond which mlock would fail anyway.
func DefaultLimit() uint64 {
	if os.Geteuid() == 0 {
		return 0
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return lim.Cur
}
