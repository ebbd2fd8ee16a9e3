package pvdma_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"golang.org/x/sys/unix"
)

// recorder is a Pinner that keeps a ledger of pinned pages and fails the
// test on a double pin or an unpin of a page that is not pinned: the two
// ways a stale unpin could undo a live pin. It pins for real through
// inner.
type recorder struct {
	t     testing.TB
	inner pvdma.Pinner
	mu    sync.Mutex
	pages map[uint64]bool // guest physical page -> pinned
	pins  int
	fail  error // next Pin fails with this
}

func newRecorder(t testing.TB, inner pvdma.Pinner) *recorder {
	return &recorder{t: t, inner: inner, pages: make(map[uint64]bool)}
}

func (r *recorder) Pin(gpa uint64, host []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		err := r.fail
		r.fail = nil
		return err
	}
	ps := guestmem.PageSize()
	for p := gpa &^ (ps - 1); p < gpa+uint64(len(host)); p += ps {
		if r.pages[p] {
			r.t.Errorf("page %#x pinned twice", p)
		}
		r.pages[p] = true
	}
	r.pins++
	return r.inner.Pin(gpa, host)
}

func (r *recorder) Unpin(gpa uint64, host []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := guestmem.PageSize()
	for p := gpa &^ (ps - 1); p < gpa+uint64(len(host)); p += ps {
		if !r.pages[p] {
			r.t.Errorf("page %#x unpinned but not pinned", p)
		}
		delete(r.pages, p)
	}
	return r.inner.Unpin(gpa, host)
}

// pinned reports whether guest physical page gpa is pinned.
func (r *recorder) pinned(gpa uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pages[gpa&^(guestmem.PageSize()-1)]
}

func (r *recorder) pinnedPages() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pages)
}

// memfdRegion creates a memfd of size bytes, maps it and places it at
// guest physical gpa.
func memfdRegion(t testing.TB, gpa, size uint64) guestmem.Region {
	t.Helper()
	fd, err := unix.MemfdCreate("pvdma-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := guestmem.Map(fd, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	return guestmem.Region{GuestPhys: gpa, Size: size, UserAddr: 0x7f00_0000_0000 + gpa, Mapping: m}
}

func table(t testing.TB, rs ...guestmem.Region) *guestmem.Table {
	t.Helper()
	tab, err := guestmem.NewTable(rs)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// vmLocked is the process's locked memory (VmLck), in bytes.
func vmLocked(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var kb uint64
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "VmLck: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Fatal("no VmLck in /proc/self/status")
	return 0
}

// needMlock skips (outside CI) when this process may not lock memory.
func needMlock(t testing.TB, n uint64) {
	t.Helper()
	if l := pvdma.DefaultLimit(); l != 0 && l < n {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI must run as root (RLIMIT_MEMLOCK %d < %d)", l, n)
		}
		t.Skipf("mlock of %d bytes needs root or RLIMIT_MEMLOCK >= it (have %d)", n, l)
	}
}
