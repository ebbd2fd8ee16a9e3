package vhost

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// vring is the back-end's state for one virtqueue. Its life cycle follows
// the spec: configured by SET_VRING_NUM/BASE/ADDR, started by the first
// kick on the fd from SET_VRING_KICK, enabled by SET_VRING_ENABLE (or at
// once without VHOST_USER_F_PROTOCOL_FEATURES), stopped by GET_VRING_BASE.
// Buffers are processed only while the ring is started, enabled, not
// broken and the device is active.
//
// mu is held by the worker while it processes the ring and by the
// connection goroutine while it changes the ring, so a change never races
// with a ProcessQueue call.
type vring struct {
	s   *session
	idx int

	mu      sync.Mutex
	num     uint16
	base    uint16
	addr    *VringAddr
	q       *virtio.DeviceQueue
	mem     *guestmem.Table
	enabled bool
	started bool
	broken  bool
	callFD  int
	errFD   int
	infl    guestmem.View // this queue's inflight region, if any

	// The worker: runs from SET_VRING_KICK until the ring stops.
	kick     *os.File // nil in polling mode
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	pollMode bool
	// running mirrors worker() for Env.Schedule, which must not take mu.
	running atomic.Bool
	// ranges mirrors q's place in guest memory for Env.RingMemory, which
	// the device calls from inside ProcessQueue (with mu held).
	ranges atomic.Pointer[[3]GuestRange]
}

func newVring(s *session, idx int) *vring {
	return &vring{s: s, idx: idx, callFD: -1, errFD: -1, wake: make(chan struct{}, 1)}
}

// pollInterval is how often a ring without a kick fd (SET_VRING_KICK with
// the NOFD bit) is polled.
const pollInterval = time.Millisecond

func (s *session) ring(idx uint32) (*vring, error) {
	if idx >= uint32(len(s.rings)) {
		return nil, badPayload("queue index %d, device has %d", idx, len(s.rings))
	}
	return s.rings[idx], nil
}

var errRingStarted = errors.New("ring is started")

func (s *session) setVringNum(m *Message) ([]byte, error) {
	st, err := decodeVringState(m.Payload)
	if err != nil {
		return nil, err
	}
	r, err := s.ring(st.Index)
	if err != nil {
		return nil, err
	}
	max := uint32(s.dev.MaxQueueSize())
	if st.Num == 0 || st.Num > max || st.Num&(st.Num-1) != 0 {
		return nil, badPayload("queue size %d (power of two up to %d)", st.Num, max)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.worker() {
		return nil, fmt.Errorf("queue %d: %w", r.idx, errRingStarted)
	}
	r.num, r.q, r.addr = uint16(st.Num), nil, nil
	r.ranges.Store(nil)
	return nil, nil
}

func (s *session) setVringBase(m *Message) ([]byte, error) {
	st, err := decodeVringState(m.Payload)
	if err != nil {
		return nil, err
	}
	r, err := s.ring(st.Index)
	if err != nil {
		return nil, err
	}
	// Split rings: bits 0-15 are the next available index; the rest is
	// for packed rings, which we do not offer.
	if st.Num > 0xffff {
		return nil, badPayload("split-ring base %#x", st.Num)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.worker() {
		return nil, fmt.Errorf("queue %d: %w", r.idx, errRingStarted)
	}
	r.base = uint16(st.Num)
	if r.q != nil {
		r.q.SetNextAvail(r.base)
	}
	return nil, nil
}

func (s *session) setVringAddr(m *Message) ([]byte, error) {
	a, err := decodeVringAddr(m.Payload)
	if err != nil {
		return nil, err
	}
	r, err := s.ring(a.Index)
	if err != nil {
		return nil, err
	}
	if a.Flags&vringFlagLog != 0 {
		return nil, fmt.Errorf("queue %d: dirty logging was not negotiated", r.idx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.worker() {
		return nil, fmt.Errorf("queue %d: %w", r.idx, errRingStarted)
	}
	if r.num == 0 {
		return nil, fmt.Errorf("queue %d: SET_VRING_ADDR before SET_VRING_NUM", r.idx)
	}
	mem := s.mem.Load()
	q, err := newDeviceQueue(mem, r.num, a, r.base, virtio.FeatureEventIdx.In(s.features))
	if err != nil {
		return nil, fmt.Errorf("queue %d: %w", r.idx, err)
	}
	if r.infl.Len() > 0 {
		if err := q.SetInflight(r.infl); err != nil {
			return nil, fmt.Errorf("queue %d: %w", r.idx, err)
		}
	}
	r.addr, r.q, r.mem = &a, q, mem
	ra := q.Addrs()
	d, av, u := virtio.RingSizes(r.num)
	r.ranges.Store(&[3]GuestRange{{ra.Desc, d}, {ra.Avail, av}, {ra.Used, u}})
	return nil, nil
}

// newDeviceQueue translates the front-end's ring addresses (user
// addresses: we do not offer ACCESS_PLATFORM, so never IOVAs) and builds
// the device side of the queue.
func newDeviceQueue(mem *guestmem.Table, num uint16, a VringAddr, base uint16, eventIdx bool) (*virtio.DeviceQueue, error) {
	ra, err := ringAddrs(mem, a)
	if err != nil {
		return nil, err
	}
	q, err := virtio.NewDeviceQueue(mem, num, ra, eventIdx)
	if err != nil {
		return nil, err
	}
	q.SetNextAvail(base)
	return q, nil
}

func ringAddrs(mem *guestmem.Table, a VringAddr) (ra virtio.RingAddrs, err error) {
	if ra.Desc, err = mem.UserToGuest(a.Desc); err != nil {
		return ra, fmt.Errorf("descriptor table: %w", err)
	}
	if ra.Avail, err = mem.UserToGuest(a.Avail); err != nil {
		return ra, fmt.Errorf("available ring: %w", err)
	}
	if ra.Used, err = mem.UserToGuest(a.Used); err != nil {
		return ra, fmt.Errorf("used ring: %w", err)
	}
	return ra, nil
}

// retranslate moves a configured ring onto a new memory table. The ring
// must stay where it is in guest physical memory. Called with r.mu held.
func (r *vring) retranslate(t *guestmem.Table) error {
	if r.q == nil {
		r.mem = t
		return nil
	}
	ra, err := ringAddrs(t, *r.addr)
	if err != nil {
		return fmt.Errorf("queue %d: %w", r.idx, err)
	}
	if ra != r.q.Addrs() {
		return fmt.Errorf("queue %d: ring would move from %+v to %+v", r.idx, r.q.Addrs(), ra)
	}
	if err := r.q.SetMemory(t); err != nil {
		return fmt.Errorf("queue %d: %w", r.idx, err)
	}
	r.mem = t
	return nil
}

func (s *session) getVringBase(m *Message) ([]byte, error) {
	st, err := decodeVringState(m.Payload)
	if err != nil {
		return nil, err
	}
	r, err := s.ring(st.Index)
	if err != nil {
		return nil, err
	}
	base := r.stopAndBase()
	// The stop condition mirrors the start: QEMU's generic device stops
	// (VM stop, guest reset) with GET_VRING_BASE on every ring and no
	// SET_STATUS, so the last ring to stop suspends the device as
	// SET_STATUS 0 does.
	if !s.anyRingRunning() {
		s.deactivate(false)
	}
	return VringState{Index: st.Index, Num: uint32(base)}.encode(), nil
}

func (s *session) anyRingRunning() bool {
	for _, r := range s.rings {
		if r.running.Load() {
			return true
		}
	}
	return false
}

// stopAndBase stops the ring and returns the next available index to
// resume from. Like rust-vmm, stopping drops the kick and call fds: the
// front-end sends fresh ones when it starts the ring again.
func (r *vring) stopAndBase() uint16 {
	r.stopWorker()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q != nil {
		r.base = r.q.NextAvail()
	}
	if r.base != 0 {
		r.s.b.used.Store(true)
	}
	r.started = false
	r.closeFD(&r.callFD)
	return r.base
}

func (s *session) stopAllRings() {
	for _, r := range s.rings {
		r.stopAndBase()
	}
}

// forgetRings drops ring configuration after a device reset; the
// front-end configures the rings from scratch when it starts again.
func (s *session) forgetRings() {
	for _, r := range s.rings {
		r.mu.Lock()
		r.num, r.base, r.addr, r.q = 0, 0, nil, nil
		r.ranges.Store(nil)
		r.enabled, r.broken = s.features&FeatureProtocolFeatures == 0, false
		r.mu.Unlock()
	}
}

// release frees the ring's descriptors at the end of a connection.
func (r *vring) release() {
	r.stopWorker()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeFD(&r.callFD)
	r.closeFD(&r.errFD)
	r.q, r.addr, r.mem = nil, nil, nil
	r.ranges.Store(nil)
}

func (r *vring) closeFD(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}

func (s *session) vringFile(m *Message) (*vring, int, error) {
	f, err := decodeVringFile(m.Payload)
	if err != nil {
		return nil, -1, err
	}
	r, err := s.ring(uint32(f.Index))
	if err != nil {
		return nil, -1, err
	}
	switch {
	case f.NoFD && m.NumFDs() != 0:
		return nil, -1, badPayload("NOFD set but a descriptor was sent")
	case !f.NoFD && m.NumFDs() != 1:
		return nil, -1, badPayload("no descriptor sent and NOFD not set")
	case f.NoFD:
		return r, -1, nil
	}
	if err := checkEventFD(m.fds[0]); err != nil {
		return nil, -1, err
	}
	return r, m.TakeFD(0), nil
}

func (s *session) setVringKick(m *Message) ([]byte, error) {
	r, fd, err := s.vringFile(m)
	if err != nil {
		return nil, err
	}
	if err := r.startWorker(fd); err != nil {
		return nil, err
	}
	s.after(s.activateOnRingStart)
	return nil, nil
}

func (s *session) setVringCall(m *Message) ([]byte, error) {
	return s.setVringEventFD(m, func(r *vring) *int { return &r.callFD }, true)
}

func (s *session) setVringErr(m *Message) ([]byte, error) {
	return s.setVringEventFD(m, func(r *vring) *int { return &r.errFD }, false)
}

// setVringEventFD installs the call or error eventfd of a ring (or none,
// with the NOFD bit). With announce, the new fd is signalled once, as
// libvhost-user does for call fds: after a reconnect the driver may be
// waiting for a completion whose interrupt went to the old fd, and a
// spurious interrupt costs nothing.
func (s *session) setVringEventFD(m *Message, which func(*vring) *int, announce bool) ([]byte, error) {
	r, fd, err := s.vringFile(m)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := which(r)
	r.closeFD(slot)
	*slot = fd
	if announce {
		r.signal(fd)
	}
	return nil, nil
}

func (s *session) setVringEnable(m *Message) ([]byte, error) {
	st, err := decodeVringState(m.Payload)
	if err != nil {
		return nil, err
	}
	if s.features&FeatureProtocolFeatures == 0 {
		return nil, fmt.Errorf("SET_VRING_ENABLE without VHOST_USER_F_PROTOCOL_FEATURES")
	}
	r, err := s.ring(st.Index)
	if err != nil {
		return nil, err
	}
	if st.Num > 1 {
		return nil, badPayload("enable value %d", st.Num)
	}
	r.setEnabled(st.Num == 1)
	s.after(s.activateOnRingStart)
	return nil, nil
}

func (r *vring) setEnabled(on bool) {
	r.mu.Lock()
	r.enabled = on
	r.mu.Unlock()
	if on {
		r.wakeup()
	}
}

func (r *vring) wakeup() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// worker reports whether a worker goroutine runs. Called with r.mu held or
// from the connection goroutine, which alone starts and stops workers.
func (r *vring) worker() bool { return r.done != nil }

// startWorker begins waiting for kicks on fd (or polling when fd < 0),
// replacing any previous worker.
func (r *vring) startWorker(fd int) error {
	r.stopWorker()
	var kick *os.File
	if fd >= 0 {
		// Non-blocking, so reads park in the runtime's poller instead of
		// holding an OS thread, and Close wakes them.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("queue %d: kick fd: %w", r.idx, err)
		}
		kick = os.NewFile(uintptr(fd), fmt.Sprintf("kick%d", r.idx))
	}
	stop, done := make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	r.kick, r.pollMode = kick, kick == nil
	r.stop, r.done = stop, done
	r.running.Store(true)
	r.mu.Unlock()
	// done closes once both goroutines have returned, so a kick read
	// that completes during a stop cannot mark the stopped ring started.
	var wg sync.WaitGroup
	if kick != nil {
		wg.Go(func() { r.readKicks(kick, stop) })
	}
	wg.Go(func() { r.run(stop) })
	go func() {
		wg.Wait()
		close(done)
	}()
	return nil
}

// stopWorker stops the worker and waits until it no longer touches the
// ring.
func (r *vring) stopWorker() {
	r.mu.Lock()
	stop, done, kick := r.stop, r.done, r.kick
	r.stop, r.done, r.kick = nil, nil, nil
	r.running.Store(false)
	r.mu.Unlock()
	if done == nil {
		return
	}
	close(stop)
	if kick != nil {
		kick.Close() // wakes readKicks
	}
	<-done
}

// readKicks turns kick eventfd reads into wake-ups. The first kick starts
// the ring.
func (r *vring) readKicks(kick *os.File, stop chan struct{}) {
	var buf [8]byte
	for {
		n, err := kick.Read(buf[:])
		if err != nil || n != 8 {
			select {
			case <-stop:
			default:
				r.s.log.Warn("kick fd failed; ring no longer wakes on kicks", "queue", r.idx, "err", err)
			}
			return
		}
		r.s.b.stats.Kicks.Add(1)
		r.mu.Lock()
		select {
		case <-stop: // stopping: this kick belongs to the next start
		default:
			r.started = true
		}
		r.mu.Unlock()
		r.wakeup()
	}
}

func (r *vring) run(stop chan struct{}) {
	var tick <-chan time.Time
	if r.pollMode {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		tick = t.C
		r.mu.Lock()
		r.started = true // a polled ring has no first kick to wait for
		r.mu.Unlock()
	}
	for {
		select {
		case <-stop:
			return
		case <-r.wake:
		case <-tick:
		}
		r.service()
	}
}

// service processes the ring once, if it may be processed, and interrupts
// the driver if the ring asks for it.
func (r *vring) service() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || !r.enabled || r.broken || r.q == nil || !r.s.active.Load() {
		return
	}
	var notify bool
	if err := r.guarded(func() error {
		var err error
		notify, err = r.process()
		return err
	}); err != nil {
		r.fail(err)
		return
	}
	if notify {
		r.signal(r.callFD)
		r.s.b.stats.Notifies.Add(1)
	}
}

// process runs the device on the ring until no buffer is left that it
// would take, and says whether the driver wants an interrupt.
func (r *vring) process() (notify bool, err error) {
	for {
		r.q.DisableNotify()
		before := r.q.NextAvail()
		if err := r.s.dev.ProcessQueue(r.s.ctx, r.idx, r.q, r.mem); err != nil {
			return false, err
		}
		// Re-enable kicks, then look again: a buffer added in between
		// would otherwise wait for a kick the driver never sends. A device
		// that took nothing this round leaves the rest posted on purpose
		// (event buffers wait for events): looking again would spin.
		if !r.q.EnableNotify() || r.q.NextAvail() == before {
			break
		}
	}
	return r.q.NeedsNotify(), nil
}

// guarded runs f, which touches guest memory (the rings' indices and
// notification fields as much as the buffers), so that a fault (a
// front-end that shrank the file behind a region) breaks this ring
// instead of taking every device down.
func (r *vring) guarded(f func() error) error {
	err := guestmem.Guard(f)
	if fe, ok := errors.AsType[*guestmem.FaultError](err); ok {
		return fmt.Errorf("queue %d: %w", r.idx, fe)
	}
	return err
}

// fail marks the ring broken after hostile input: it is no longer
// processed, the front-end hears of it on the error eventfd, and the
// driver sees DEVICE_NEEDS_RESET. Other rings and devices go on.
func (r *vring) fail(err error) {
	r.broken = true
	r.s.b.stats.BrokenQueues.Add(1)
	r.s.log.Error("queue broken", "queue", r.idx, "err", err)
	// Status first: a front-end woken by the error fd reads it next.
	r.s.markNeedsReset()
	r.signal(r.errFD)
}

func (r *vring) signal(fd int) {
	if fd < 0 {
		return
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(fd, one[:]) // EAGAIN only if the counter is saturated: the wake-up is pending anyway
}
