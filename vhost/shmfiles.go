package vhost

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// shmFiles knows the files the back-end maps into the guest's shared
// memory regions, and what the front-end says it has mapped.
//
// QEMU maps such a file as RAM inside the shared-memory BAR, and its
// memory listener then reports that range to us like guest RAM (an
// ADD_MEM_REG, or an entry of SET_MEM_TABLE, for the BAR). It is device
// memory, the doorbells: kept out of the memory table, it can never be
// pinned, covered by an MR or used as a DMA target.
//
// QEMU keeps a mapping until SHMEM_UNMAP, a guest reset or the device's
// removal, across back-end reconnects. It refuses nothing (a second
// mapping would overlap the first) but closes the back-end channel on a
// SHMEM_UNMAP of nothing. So the report is how we know what is mapped: a
// mapping of the same file is not made again, and one of an earlier
// incarnation of the file (a restarted daemon's memfd of the same name)
// is unmapped before ours takes its place.
type shmFiles struct {
	mu     sync.Mutex
	ours   []fileID
	echoed []echo // regions reported as guest memory that are shared memory
}

// fileID identifies an open file across descriptors and processes; name
// is its memfd name, the same for every incarnation of a device's file.
type fileID struct {
	dev, ino uint64
	name     string
}

type echo struct {
	r  MemRegion
	id fileID
}

func identify(fd int) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileID{}, fmt.Errorf("fstat: %w", err)
	}
	name, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return fileID{dev: st.Dev, ino: st.Ino, name: name}, nil
}

func (id fileID) sameFile(o fileID) bool { return id.dev == o.dev && id.ino == o.ino }

// isMemfd: memfd names read "/memfd:NAME (deleted)"; other files' names
// are paths and say nothing about incarnations.
func (id fileID) isMemfd() bool { return len(id.name) > 7 && id.name[:7] == "/memfd:" }

// remember records a file of ours.
func (f *shmFiles) remember(id fileID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.ours {
		if o.sameFile(id) {
			return
		}
	}
	f.ours = append(f.ours, id)
}

// isShared reports whether the region behind fd is shared memory: one of
// our files, or an earlier incarnation of one (a memfd of the same name).
func (f *shmFiles) isShared(fd int) (fileID, bool) {
	id, err := identify(fd)
	if err != nil {
		return id, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.ours {
		if o.sameFile(id) || id.isMemfd() && o.name == id.name {
			return id, true
		}
	}
	return id, false
}

// echo records r, a region backed by shared memory.
func (f *shmFiles) echo(r MemRegion, id fileID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.echoed = append(f.echoed, echo{r: r, id: id})
}

// forget drops the echoed region r describes; it reports whether there
// was one.
func (f *shmFiles) forget(r MemRegion) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range f.echoed {
		if e.r.GuestPhys == r.GuestPhys && e.r.Size == r.Size && e.r.UserAddr == r.UserAddr {
			f.echoed = append(f.echoed[:i], f.echoed[i+1:]...)
			return true
		}
	}
	return false
}

// reset forgets every echoed region (a SET_MEM_TABLE replaces them all).
func (f *shmFiles) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.echoed = nil
}

// mapped says what the front-end reported of file id: mapped already
// (same), or an earlier incarnation of it is, with the region's size
// (stale).
func (f *shmFiles) mapped(id fileID) (same bool, stale uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.echoed {
		switch {
		case e.id.sameFile(id):
			return true, 0
		case id.isMemfd() && e.id.name == id.name:
			stale = e.r.Size
		}
	}
	return false, stale
}

// MapShmem implements Env. See shmFiles for what is mapped when.
func (s *session) MapShmem(ctx context.Context, m ShmemMapping, fd int) error {
	id, err := identify(fd)
	if err != nil {
		return fmt.Errorf("%v: %w", BackendShmemMap, err)
	}
	s.shmFiles.remember(id)
	same, stale := s.shmFiles.mapped(id)
	if same {
		s.log.Debug("shared memory already mapped by the front-end", "shmid", m.ShmID)
		return nil
	}
	if stale != 0 {
		// Our mappings are all at offset 0 of their region.
		old := ShmemMapping{ShmID: m.ShmID, ShmOffset: 0, Len: stale}
		if err := s.shmem(ctx, BackendShmemUnmap, old, -1); err != nil {
			return fmt.Errorf("removing an earlier incarnation's mapping: %w", err)
		}
		s.log.Info("replaced an earlier incarnation's shared memory mapping", "shmid", m.ShmID, "len", stale)
	}
	return s.shmem(ctx, BackendShmemMap, m, fd)
}

// UnmapShmem implements Env.
func (s *session) UnmapShmem(ctx context.Context, m ShmemMapping) error {
	return s.shmem(ctx, BackendShmemUnmap, m, -1)
}
