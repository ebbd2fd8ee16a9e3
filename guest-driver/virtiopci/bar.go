//go:build linux

package virtiopci

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
)

// mapResource maps a memory BAR through its sysfs resource file, shared
// and uncached (the kernel maps resource files uncached; the prefetchable
// _wc variant would let stores combine, which doorbells and registers
// must not).
func mapResource(path string, size uint64) (*guestmem.Mapping, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("virtiopci: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	m, err := guestmem.MapOwn(fd, 0, size)
	if err != nil {
		return nil, fmt.Errorf("virtiopci: map %s: %w", path, err)
	}
	return m, nil
}
