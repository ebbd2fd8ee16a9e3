package vhost

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// shmFiles knows the files the back-end mapped into the guest's shared
// memory regions. QEMU maps such a file as RAM inside the shared-memory
// BAR, and its memory listener then reports that range to us like guest
// RAM (an ADD_MEM_REG for the BAR). It is device memory: the doorbells.
// Kept out of the memory table, it can never be pinned, covered by an MR
// or used as a DMA target, as for any front-end that does not echo it.
type shmFiles struct {
	mu  sync.Mutex
	ids map[fileID]bool
	// echoed are the regions recognised (session goroutine only), so that
	// their REM_MEM_REG is accepted too.
	echoed []MemRegion
}

// fileID identifies an open file across descriptors and processes.
type fileID struct{ dev, ino uint64 }

func identify(fd int) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileID{}, fmt.Errorf("fstat: %w", err)
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// remember records the file behind fd as shared memory.
func (f *shmFiles) remember(fd int) {
	id, err := identify(fd)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[fileID]bool{}
	}
	f.ids[id] = true
}

// isShared reports whether fd is a file we mapped into shared memory.
func (f *shmFiles) isShared(fd int) bool {
	id, err := identify(fd)
	if err != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// echo records r, a region backed by one of our shared-memory files.
func (f *shmFiles) echo(r MemRegion) { f.echoed = append(f.echoed, r) }

// forget drops the echoed region r describes; it reports whether there
// was one.
func (f *shmFiles) forget(r MemRegion) bool {
	for i, e := range f.echoed {
		if e.GuestPhys == r.GuestPhys && e.Size == r.Size && e.UserAddr == r.UserAddr {
			f.echoed = append(f.echoed[:i], f.echoed[i+1:]...)
			return true
		}
	}
	return false
}

// reset forgets every echoed region (a SET_MEM_TABLE replaces them all).
func (f *shmFiles) reset() { f.echoed = nil }
