package vhost

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// inflight is the shared buffer of INFLIGHT_SHMFD: the back-end records in
// it which descriptors it has popped and not yet completed, and the
// front-end keeps it across back-end restarts so a new back-end can
// resubmit them. Queue i's region starts at i * InflightQueueSize.
type inflight struct {
	mapping   *guestmem.Mapping
	queueSize uint16
}

func (f *inflight) close() { f.mapping.Unmap() }

func (f *inflight) queueView(i int) (guestmem.View, error) {
	per := virtio.InflightQueueSize(f.queueSize)
	return f.mapping.View().Sub(uint64(i)*per, per)
}

func (s *session) getInflightFD(m *Message) ([]byte, error) {
	req, err := decodeInflight(m.Payload)
	if err != nil {
		return nil, err
	}
	if req.NumQueues == 0 || int(req.NumQueues) > len(s.rings) {
		return nil, badPayload("inflight for %d queues, device has %d", req.NumQueues, len(s.rings))
	}
	if req.QueueSize == 0 || req.QueueSize > s.dev.MaxQueueSize() {
		return nil, badPayload("inflight queue size %d", req.QueueSize)
	}
	size := uint64(req.NumQueues) * virtio.InflightQueueSize(req.QueueSize)
	fd, err := unix.MemfdCreate("vstellar-inflight", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("inflight memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inflight memfd: %w", err)
	}
	// The front-end must not be able to shrink it under our mapping.
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	if err := s.installInflight(fd, 0, size, req); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s.replyFDs = append(s.replyFDs, fd)
	return Inflight{MmapSize: size, NumQueues: req.NumQueues, QueueSize: req.QueueSize}.encode(), nil
}

func (s *session) setInflightFD(m *Message) ([]byte, error) {
	req, err := decodeInflight(m.Payload)
	if err != nil {
		return nil, err
	}
	if req.NumQueues == 0 || int(req.NumQueues) > len(s.rings) || req.QueueSize == 0 || req.QueueSize > s.dev.MaxQueueSize() {
		return nil, badPayload("inflight for %d queues of %d", req.NumQueues, req.QueueSize)
	}
	if need := uint64(req.NumQueues) * virtio.InflightQueueSize(req.QueueSize); req.MmapSize < need {
		return nil, badPayload("inflight buffer of %d bytes, need %d", req.MmapSize, need)
	}
	fd := m.TakeFD(0)
	defer unix.Close(fd) // the mapping keeps the memory
	return nil, s.installInflight(fd, req.MmapOffset, req.MmapSize, req)
}

// installInflight maps the inflight buffer and hands each queue its region.
func (s *session) installInflight(fd int, off, size uint64, req Inflight) error {
	mp, err := guestmem.Map(fd, off, size)
	if err != nil {
		return fmt.Errorf("inflight buffer: %w", err)
	}
	f := &inflight{mapping: mp, queueSize: req.QueueSize}
	views := make([]guestmem.View, len(s.rings))
	for i := range int(req.NumQueues) {
		if views[i], err = f.queueView(i); err != nil {
			mp.Unmap()
			return fmt.Errorf("inflight buffer: %w", err)
		}
	}
	s.lockRings()
	for i, r := range s.rings {
		if r.worker() {
			s.unlockRings()
			mp.Unmap()
			return fmt.Errorf("inflight buffer: queue %d: %w", i, errRingStarted)
		}
	}
	for i, r := range s.rings {
		r.infl = views[i]
	}
	old := s.inflt
	s.inflt = f
	s.unlockRings()
	if old != nil {
		old.close()
	}
	return nil
}
