//go:build linux

package virtiopci

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
)

// hugetlb is the real backing: 2 MiB pages from hugetlbfs (a memfd with
// MFD_HUGETLB, so nothing needs mounting and nothing is left behind),
// reserved in the kernel's pool first, mapped shared and locked, with
// physical addresses from /proc/self/pagemap. In a guest with no IOMMU
// (TCG, or KVM without a vIOMMU) a physical address is what the device
// sees as the guest-physical address.
type hugetlb struct {
	sysfs string // /sys
}

func (h hugetlb) chunk(pages int) (*guestmem.Mapping, []uint64, error) {
	if err := h.reserve(pages); err != nil {
		return nil, nil, err
	}
	fd, err := unix.MemfdCreate("vstellar-dma", unix.MFD_CLOEXEC|unix.MFD_HUGETLB|unix.MFD_HUGE_2MB)
	if err != nil {
		return nil, nil, fmt.Errorf("virtiopci: hugetlb memfd: %w", err)
	}
	defer unix.Close(fd)
	size := uint64(pages) * hugePageSize
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, nil, fmt.Errorf("virtiopci: hugetlb memfd of %d pages: %w", pages, err)
	}
	// A shared hugetlb mapping reserves its pages at mmap time, so a
	// short pool fails here rather than with SIGBUS on first touch.
	m, err := guestmem.MapOwn(fd, 0, size)
	if err != nil {
		return nil, nil, fmt.Errorf("virtiopci: %d huge pages: %w", pages, err)
	}
	b, err := m.PageRange(0, size)
	if err == nil {
		err = unix.Mlock(b) // faults every page in and keeps it there
	}
	if err != nil {
		m.Unmap()
		return nil, nil, fmt.Errorf("virtiopci: locking %d huge pages: %w", pages, err)
	}
	pas, err := physAddrs(m.Addr(), pages, hugePageSize)
	if err != nil {
		m.Unmap()
		return nil, nil, err
	}
	return m, pas, nil
}

// reserve makes sure the kernel's 2 MiB pool has pages unreserved pages,
// growing nr_hugepages if not.
func (h hugetlb) reserve(pages int) error {
	dir := filepath.Join(h.sysfs, "kernel/mm/hugepages/hugepages-2048kB")
	avail := func() (int, int, error) {
		var v [3]int
		for i, n := range []string{"nr_hugepages", "free_hugepages", "resv_hugepages"} {
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				return 0, 0, fmt.Errorf("virtiopci: huge pages: %w", err)
			}
			if v[i], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				return 0, 0, fmt.Errorf("virtiopci: huge pages: %s: %w", n, err)
			}
		}
		return v[0], v[1] - v[2], nil
	}
	nr, free, err := avail()
	if err != nil || free >= pages {
		return err
	}
	want := nr + pages - free
	if err := writeAttr(filepath.Join(dir, "nr_hugepages"), strconv.Itoa(want)); err != nil {
		return err
	}
	if nr, free, err = avail(); err != nil {
		return err
	}
	if free < pages {
		return fmt.Errorf("virtiopci: the kernel gave %d of %d huge pages of 2 MiB, %d free, need %d (guest memory too small or fragmented)", nr, want, free, pages)
	}
	return nil
}
