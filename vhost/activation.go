package vhost

import (
	"context"
	"fmt"
)

// Activation. A device goes live on either of two signals, whichever
// comes first:
//   - SET_STATUS with DRIVER_OK, from front-ends that negotiated STATUS
//     and send it (our simulated VMM, Cloud Hypervisor);
//   - the rings' start: every ring has a kick descriptor and is enabled.
//     QEMU's generic vhost-user device never sends DRIVER_OK
//     (vhost_user_dev_start returns early for it), so for QEMU this is
//     the only signal.
//
// Activating may map shared memory through the back-end channel, and QEMU
// serves that channel only from its main loop, after it has our reply to
// whatever it asked last and has finished starting the device. So the
// device activates on a goroutine of its own while the connection keeps
// answering the front-end; a deactivation first cancels and waits for a
// pending activation.
type activation struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// ready: the driver's set-up has reached the point where the device may
// start.
func (s *session) ready() bool { return s.featuresSet && s.mem.Load() != nil }

// ringsStarted: the vhost-user start condition, every ring kicked-ready
// and enabled.
func (s *session) ringsStarted() bool {
	for _, r := range s.rings {
		r.mu.Lock()
		ok := r.worker() && r.enabled && r.q != nil
		r.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// activateOnRingStart activates the device once the rings have started.
func (s *session) activateOnRingStart() {
	if s.ringsStarted() {
		s.startActivation()
	}
}

// startActivation activates the device in the background unless it is
// active, being activated, or not ready. Called on the connection
// goroutine only, which alone reads and writes s.activation.
func (s *session) startActivation() {
	if s.active.Load() || s.activation != nil || !s.ready() {
		return
	}
	s.dropStaleState()
	ctx, cancel := context.WithCancel(s.ctx)
	a := &activation{cancel: cancel, done: make(chan struct{})}
	s.activation = a
	env := &activationEnv{session: s, features: s.AckedFeatures()}
	go func() {
		defer close(a.done)
		s.activate(ctx, env)
	}()
}

// dropStaleState drops the device's state when a new driver starts it.
// QEMU forwards no guest reset to the back-end: a reboot, or a new QEMU
// on the device's socket, looks like a VM resumed after a pause, except
// that every ring restarts at index 0 where a resumed one restarts where
// it stopped. Keeping the previous driver's rings, MRs and doorbell area
// until its successor's RESET_STATE would let the device write into
// memory the new driver now owns.
func (s *session) dropStaleState() {
	for _, r := range s.rings {
		r.mu.Lock()
		fresh := r.base == 0
		r.mu.Unlock()
		if !fresh {
			return
		}
	}
	if s.b.used.Swap(false) {
		s.log.Info("a new driver started the rings at index 0: dropping the previous driver's state")
		s.dev.Deactivate(true)
	}
}

// waitActivation cancels a pending activation and waits for it: after it
// returns, the device is either active or was never activated.
func (s *session) waitActivation() {
	a := s.activation
	if a == nil {
		return
	}
	a.cancel()
	<-a.done
	s.activation = nil
}

// activate starts the device, then wakes every ring so buffers queued
// before activation are serviced.
func (s *session) activate(ctx context.Context, env Env) {
	if err := s.dev.Activate(ctx, env); err != nil {
		if ctx.Err() == nil {
			s.log.Error("device activation failed", "err", err)
			s.markNeedsReset()
		}
		return
	}
	s.lockRings()
	s.active.Store(true)
	s.unlockRings()
	for _, r := range s.rings {
		r.wakeup()
	}
	s.b.stats.Activations.Add(1)
	// The device logs "device active" with the features by name.
	s.log.Debug("rings live", "features", fmt.Sprintf("%#x", env.AckedFeatures()), "protocol_features", fmt.Sprintf("%#x", s.protoFeatures()))
}

// deactivate stops the device being live (after a pending activation);
// with reset it also drops the device's state.
func (s *session) deactivate(reset bool) {
	s.waitActivation()
	s.lockRings()
	was := s.active.Swap(false)
	s.unlockRings()
	if was || reset {
		s.dev.Deactivate(reset)
	}
}

// activationEnv is the session as an activating device sees it: the
// features are those acked when activation began (the connection goroutine
// may be handling the next SET_FEATURES meanwhile, which is refused only
// once the device is active).
type activationEnv struct {
	*session
	features uint64
}

func (e *activationEnv) AckedFeatures() uint64 { return e.features }
