package vhost

import (
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
)

// Guest memory handlers. Every change builds a new guestmem.Table, moves
// the rings onto it with all ring workers quiesced, and only then unmaps
// what the old table held: a worker never sees memory disappear under it.
// A change that would leave a configured ring outside guest memory is
// refused and leaves everything as it was.

func (s *session) mapRegion(r MemRegion, fd int) (guestmem.Region, error) {
	mp, err := guestmem.Map(fd, r.MmapOffset, r.Size)
	if err != nil {
		return guestmem.Region{}, fmt.Errorf("region %+v: %w", r, err)
	}
	return guestmem.Region{
		GuestPhys: r.GuestPhys, Size: r.Size, UserAddr: r.UserAddr, MmapOffset: r.MmapOffset, Mapping: mp,
	}, nil
}

func unmapRegions(rs []guestmem.Region) {
	for _, r := range rs {
		r.Mapping.Unmap()
	}
}

func (s *session) unmapAll(t *guestmem.Table) { unmapRegions(t.Regions()) }

// swapMemory installs t, re-translating every configured ring against it,
// tells a MemoryWatcher device, and returns the table it replaced. The
// caller unmaps what went away only after it returns.
func (s *session) swapMemory(t *guestmem.Table) (*guestmem.Table, error) {
	s.lockRings()
	defer s.unlockRings()
	old := s.mem.Load()
	for i, r := range s.rings {
		if err := r.retranslate(t); err != nil {
			s.rollBackRings(i, old)
			return nil, err
		}
	}
	// Installed before the device hears of it: a pending activation reads
	// the table once it holds the device's lock, so it either finds t or
	// runs before SetMemory moves the device onto t, never after it with
	// the old table.
	s.mem.Store(t)
	if w, ok := s.dev.(MemoryWatcher); ok {
		if err := w.SetMemory(t); err != nil {
			s.mem.Store(old)
			s.rollBackRings(len(s.rings), old)
			return nil, fmt.Errorf("device refused the memory change: %w", err)
		}
	}
	return old, nil
}

// rollBackRings moves the first n rings back onto old, where they worked
// before.
func (s *session) rollBackRings(n int, old *guestmem.Table) {
	for _, r := range s.rings[:n] {
		r.retranslate(old)
	}
}

func (s *session) setMemTable(m *Message) ([]byte, error) {
	regs, err := decodeMemTable(m.Payload)
	if err != nil {
		return nil, err
	}
	if len(regs) != m.NumFDs() {
		return nil, badPayload("%d regions but %d file descriptors", len(regs), m.NumFDs())
	}
	var mapped []guestmem.Region
	var echoed []echo
	for i, r := range regs {
		if id, ok := s.shmFiles.isShared(m.fds[i]); ok {
			echoed = append(echoed, echo{r: r, id: id})
			continue
		}
		gr, err := s.mapRegion(r, m.fds[i])
		if err != nil {
			unmapRegions(mapped)
			return nil, err
		}
		mapped = append(mapped, gr)
	}
	t, err := guestmem.NewTable(mapped)
	var old *guestmem.Table
	if err == nil {
		old, err = s.swapMemory(t)
	}
	if err != nil {
		unmapRegions(mapped)
		return nil, fmt.Errorf("memory table: %w", err)
	}
	s.unmapAll(old) // no ring can reach it any more
	s.shmFiles.reset()
	for _, e := range echoed {
		s.keepOut(e.r, e.id)
	}
	return nil, nil
}

// keepOut records a region the front-end reported as guest memory that is
// one of our shared-memory files (shmfiles.go): accepted, never mapped as
// guest RAM.
func (s *session) keepOut(r MemRegion, id fileID) {
	s.shmFiles.echo(r, id)
	s.b.stats.ShmemEchoes.Add(1)
	s.log.Info("shared memory region reported as guest memory; kept out of the memory table",
		"gpa", fmt.Sprintf("%#x", r.GuestPhys), "size", r.Size)
}

func (s *session) addMemReg(m *Message) ([]byte, error) {
	r, err := decodeSingleMemRegion(m.Payload)
	if err != nil {
		return nil, err
	}
	if id, ok := s.shmFiles.isShared(m.fds[0]); ok {
		s.keepOut(r, id)
		return nil, nil
	}
	cur := s.mem.Load()
	if uint64(cur.Len()) >= s.b.opts.MaxMemSlots {
		return nil, fmt.Errorf("memory table is full (%d slots)", s.b.opts.MaxMemSlots)
	}
	gr, err := s.mapRegion(r, m.fds[0])
	if err != nil {
		return nil, err
	}
	t, err := cur.With(gr)
	if err == nil {
		_, err = s.swapMemory(t)
	}
	if err != nil {
		gr.Mapping.Unmap()
		return nil, fmt.Errorf("add region: %w", err)
	}
	return nil, nil
}

func (s *session) remMemReg(m *Message) ([]byte, error) {
	r, err := decodeSingleMemRegion(m.Payload)
	if err != nil {
		return nil, err
	}
	if s.shmFiles.forget(r) {
		return nil, nil
	}
	t, gone, err := s.mem.Load().Without(r.GuestPhys, r.Size, r.UserAddr)
	if err != nil {
		return nil, fmt.Errorf("remove region: %w", err)
	}
	if _, err := s.swapMemory(t); err != nil {
		return nil, fmt.Errorf("remove region %v: %w", gone, err)
	}
	gone.Mapping.Unmap()
	return nil, nil
}
