package frontend

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// Init performs QEMU's connect/realize sequence (vhost_user_backend_init,
// then vhost_dev_init, then the generic device's realize):
//
//	GET_FEATURES
//	GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES   (if feature bit 30)
//	GET_QUEUE_NUM                                  (if MQ)
//	GET_MAX_MEM_SLOTS                              (if CONFIGURE_MEM_SLOTS)
//	SET_BACKEND_REQ_FD                             (if BACKEND_REQ; acked with REPLY_ACK)
//	SET_OWNER
//	GET_FEATURES
//	SET_VRING_CALL, SET_VRING_ERR per queue        (vhost_virtqueue_init: masked and error notifiers)
//	GET_SHMEM_CONFIG                               (if SHMEM)
func (f *Frontend) Init(ctx context.Context) error {
	features, err := f.GetFeatures(ctx)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	f.queueNum = 1
	f.memSlots = MaxMemRegions
	if features&(1<<FeatureProtocolFeatures) != 0 {
		offered, err := f.GetProtocolFeatures(ctx)
		if err != nil {
			return fmt.Errorf("init: %w", err)
		}
		mask := SupportedProtocolFeatures
		if f.opts.ProtocolFeatures != 0 {
			mask &= f.opts.ProtocolFeatures
		}
		proto := offered & mask
		if f.opts.RequireConfig && proto&(1<<ProtoConfig) == 0 {
			return fmt.Errorf("init: device needs PROTOCOL_F_CONFIG but the back-end offers %#x: %w", offered, ErrNotNegotiated)
		}
		if err := f.SetProtocolFeatures(ctx, proto); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		if proto&(1<<ProtoMQ) != 0 {
			if f.queueNum, err = f.GetQueueNum(ctx); err != nil {
				return fmt.Errorf("init: %w", err)
			}
		}
		if proto&(1<<ProtoConfigureMemSlots) != 0 {
			slots, err := f.GetMaxMemSlots(ctx)
			if err != nil {
				return fmt.Errorf("init: %w", err)
			}
			if slots < MaxMemRegions {
				return fmt.Errorf("init: back-end offers %d memory slots, fewer than %d: %w", slots, MaxMemRegions, ErrProtocol)
			}
			f.memSlots = min(slots, 512) // VHOST_USER_MAX_RAM_SLOTS
		}
	} else if f.opts.RequireConfig {
		return fmt.Errorf("init: device needs PROTOCOL_F_CONFIG but the back-end has no protocol features: %w", ErrNotNegotiated)
	}
	if f.opts.NumQueues > 0 && f.queueNum < uint64(f.opts.NumQueues) {
		return fmt.Errorf("init: back-end supports %d queues, device needs %d", f.queueNum, f.opts.NumQueues)
	}
	if f.HasProtocol(ProtoBackendReq) {
		if err := f.SetBackendReqFD(ctx); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	if err := f.SetOwner(ctx); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if _, err := f.GetFeatures(ctx); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := f.initNotifiers(ctx); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if f.HasProtocol(ProtoShmem) {
		if _, err := f.GetShmemConfig(ctx); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	f.log.Info("vhost-user front-end initialised", "features", fmt.Sprintf("%#x", f.Features()),
		"protocol", fmt.Sprintf("%#x", f.ProtocolFeatures()), "queues", f.queueNum)
	return nil
}

// initNotifiers is vhost_virtqueue_init for every queue: an eventfd for the
// masked call notifier (SET_VRING_CALL) and one for errors (SET_VRING_ERR).
func (f *Frontend) initNotifiers(ctx context.Context) error {
	for i := range f.opts.NumQueues {
		var n vqNotifiers
		var err error
		if n.masked, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return fmt.Errorf("eventfd: %w", err)
		}
		if n.err, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			unix.Close(n.masked)
			return fmt.Errorf("eventfd: %w", err)
		}
		f.mu.Lock()
		f.notifiers = append(f.notifiers, n)
		f.mu.Unlock()
		if err := f.SetVringCall(ctx, uint32(i), n.masked); err != nil {
			return err
		}
		if err := f.SetVringErr(ctx, uint32(i), n.err); err != nil {
			return err
		}
	}
	return nil
}

// VringErrors reads and clears queue i's error notifier: the number of
// times the back-end signalled a ring error since the last call.
func (f *Frontend) VringErrors(i int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i < 0 || i >= len(f.notifiers) {
		return 0
	}
	var b [8]byte
	if n, err := unix.Read(f.notifiers[i].err, b[:]); err != nil || n != 8 {
		return 0
	}
	return ne.Uint64(b[:])
}

// SetBackendReqFD creates a socketpair, serves the back-end channel on one
// end and sends the other with SET_BACKEND_REQ_FD (acked when REPLY_ACK is
// negotiated). A previous back-end channel is closed first.
func (f *Frontend) SetBackendReqFD(ctx context.Context) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	ch, err := newBackendChannel(f, fds[0])
	if err != nil {
		unix.Close(fds[1])
		return err
	}
	f.bmu.Lock()
	old := f.backend
	f.backend = ch
	f.bmu.Unlock()
	if old != nil {
		old.close()
	}
	go ch.serve()
	err = f.sendAck(ctx, ReqSetBackendReqFD, nil, []int{fds[1]}, ackIfAck)
	unix.Close(fds[1])
	if err != nil {
		f.bmu.Lock()
		if f.backend == ch {
			f.backend = nil
		}
		f.bmu.Unlock()
		ch.close()
		return err
	}
	return nil
}
