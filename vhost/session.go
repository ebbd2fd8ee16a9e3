package vhost

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// session is the state of one front-end connection. Its fields are owned
// by the connection goroutine; ring workers see only what each vring hands
// them under the vring's lock, and the active flag.
type session struct {
	b    *Backend
	dev  Device
	log  *slog.Logger
	conn *conn
	ctx  context.Context

	features    uint64 // acked virtio features, including bit 30
	featuresSet bool
	owned       bool          // SET_OWNER came (and no RESET_OWNER since)
	proto       atomic.Uint64 // acked protocol features

	statusMu sync.Mutex
	status   virtio.Status

	mem     atomic.Pointer[guestmem.Table]
	rings   []*vring
	channel atomic.Pointer[channel] // back-end channel, or nil
	inflt   *inflight

	// active: the device has been activated and its rings may be
	// serviced. Changed only with every ring's lock held.
	active atomic.Bool
	// activation is the pending activation, if any (activation.go).
	activation *activation
	// shmFiles are the files mapped into shared memory regions, which
	// the front-end may hand back as guest memory (shmfiles.go).
	shmFiles shmFiles

	replyFDs   []int
	afterReply []func()
}

func newSession(b *Backend, c *net.UnixConn) *session {
	s := &session{b: b, dev: b.dev, log: b.log, conn: newConn(c)}
	if f, ok := b.dev.(ShmemFiler); ok {
		for _, fd := range f.ShmemFiles() {
			if id, err := identify(fd); err == nil {
				s.shmFiles.remember(id)
			}
		}
	}
	s.rings = make([]*vring, b.dev.NumQueues())
	for i := range s.rings {
		s.rings[i] = newVring(s, i)
	}
	return s
}

// run reads and dispatches messages until the connection ends.
func (s *session) run(ctx context.Context) error {
	s.ctx = ctx
	for {
		m, err := s.conn.read()
		if err != nil {
			return err
		}
		s.b.stats.Messages.Add(1)
		if err := s.dispatch(m); err != nil {
			return err
		}
	}
}

// teardown releases everything the connection held. The device is
// deactivated without a reset: its state waits for a reconnect.
func (s *session) teardown() {
	s.stopAllRings()
	s.deactivate(false)
	for _, r := range s.rings {
		r.release()
	}
	if w, ok := s.dev.(MemoryWatcher); ok {
		// The device lets go of the memory (unpins it) before it is
		// unmapped; it keeps its objects for a reconnect.
		if err := w.SetMemory(nil); err != nil {
			s.log.Warn("device did not release guest memory", "err", err)
		}
	}
	s.unmapAll(s.mem.Swap(nil))
	if ch := s.channel.Swap(nil); ch != nil {
		ch.close()
	}
	if s.inflt != nil {
		s.inflt.close()
	}
	closeAll(s.replyFDs)
	s.conn.close()
}

func (s *session) protoFeatures() uint64 { return s.proto.Load() }

func (s *session) hasProto(f ProtocolFeature) bool { return s.protoFeatures()&f.Mask() != 0 }

func (s *session) takeReplyFDs() []int {
	fds := s.replyFDs
	s.replyFDs = nil
	return fds
}

func (s *session) after(f func()) { s.afterReply = append(s.afterReply, f) }

func (s *session) runAfterReply() {
	fs := s.afterReply
	s.afterReply = nil
	for _, f := range fs {
		f()
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// lockRings takes every ring's processing lock, so no ProcessQueue call is
// running when it returns.
func (s *session) lockRings() {
	for _, r := range s.rings {
		r.mu.Lock()
	}
}

func (s *session) unlockRings() {
	for _, r := range s.rings {
		r.mu.Unlock()
	}
}

// Env, as seen by the device.

func (s *session) AckedFeatures() uint64 { return s.features &^ FeatureProtocolFeatures }

func (s *session) Memory() *guestmem.Table { return s.mem.Load() }

func (s *session) ConfigChanged(ctx context.Context) error { return s.sendConfigChange(ctx) }

// Schedule wakes the ring's worker without taking any lock: the caller
// may be a goroutine that a running ProcessQueue waits for.
func (s *session) Schedule(idx int) {
	if idx < 0 || idx >= len(s.rings) {
		return
	}
	if r := s.rings[idx]; r.running.Load() {
		r.wakeup()
	}
}

// RingMemory reads each ring's published ranges without taking its lock:
// the caller is a ProcessQueue holding one.
func (s *session) RingMemory() []GuestRange {
	var out []GuestRange
	for _, r := range s.rings {
		if rs := r.ranges.Load(); rs != nil {
			out = append(out, rs[:]...)
		}
	}
	return out
}

var _ Env = (*session)(nil)
