package main

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
)

// memfdBuffer maps size bytes of a fresh memfd, shared, as guest RAM is,
// and touches every page so the copy measures copying, not page faults.
func memfdBuffer(size uint64) (*guestmem.Mapping, error) {
	fd, err := unix.MemfdCreate("vstellar-bench", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	m, err := guestmem.MapOwn(fd, 0, size)
	if err != nil {
		return nil, err
	}
	b := m.View().Bytes()
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return m, nil
}

// memcpyRate copies size bytes between two memfd mappings iters times and
// returns the elapsed time: the baseline an RDMA WRITE between two VMs on
// one host is compared with (it too is one copy between two guests'
// memfds).
func memcpyRate(src, dst []byte, size uint64, iters int) time.Duration {
	s, d := src[:size], dst[:size]
	copy(d, s) // warm
	t0 := time.Now()
	for range iters {
		copy(d, s)
	}
	return time.Since(t0)
}
