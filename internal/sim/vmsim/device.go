package vmsim

import (
	"context"
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/virtio"
)

// Start is the guest driver bringing the device up (its DRIVER_OK) and
// QEMU's generic device reacting (vub_start): negotiate features, lay out
// the rings (only the first time, or after Reset), then SET_FEATURES,
// FEATURES_OK (GET_STATUS, and SET_STATUS if the bit is not set yet), the
// memory table, per-queue ring setup, ring enables and the queues' call
// notifiers unmasked. QEMU sends no DRIVER_OK to the back-end: the rings'
// start is the device's start.
func (vm *VM) Start(ctx context.Context) error {
	vm.loop.Lock()
	defer vm.loop.Unlock()
	if vm.isClosed() {
		return errors.New("vmsim: closed")
	}
	if vm.running {
		return errors.New("vmsim: device already started")
	}
	if vm.fe == nil {
		return errors.New("vmsim: not connected (a reconnect failed)")
	}
	if !vm.driverOK {
		if err := vm.driverInit(); err != nil {
			return err
		}
	}
	if err := vm.startBackend(ctx); err != nil {
		return err
	}
	vm.driverOK = true
	return nil
}

func (vm *VM) isClosed() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.closed
}

// driverInit is the guest driver's part before DRIVER_OK: read the device
// features (QEMU answers from the GET_FEATURES it made at connect), ack a
// subset, and create fresh rings in guest RAM.
func (vm *VM) driverInit() error {
	offered := vm.fe.Features()
	if offered&(1<<featVersion1) == 0 {
		return fmt.Errorf("vmsim: device does not offer VIRTIO_F_VERSION_1 (features %#x)", offered)
	}
	acked := offered & vm.cfg.DeviceFeatures &^ (1 << frontend.FeatureProtocolFeatures)
	eventIdx := acked&(1<<featEventIdx) != 0
	dqs := make([]*virtio.DriverQueue, len(vm.queues))
	for i, q := range vm.queues {
		if q.addrs == (virtio.RingAddrs{}) {
			d, a, u := virtio.RingSizes(vm.cfg.QueueSize)
			var err error
			if q.addrs.Desc, err = vm.ram.alloc(d, 16); err != nil {
				return fmt.Errorf("vmsim: queue %d rings: %w", i, err)
			}
			if q.addrs.Avail, err = vm.ram.alloc(a, 2); err != nil {
				return fmt.Errorf("vmsim: queue %d rings: %w", i, err)
			}
			if q.addrs.Used, err = vm.ram.alloc(u, 4); err != nil {
				return fmt.Errorf("vmsim: queue %d rings: %w", i, err)
			}
			if q.scratch, err = vm.ram.alloc(scratchSize, 4096); err != nil {
				return fmt.Errorf("vmsim: queue %d buffers: %w", i, err)
			}
		}
		dq, err := virtio.NewDriverQueue(vm.ram.table, vm.cfg.QueueSize, q.addrs, eventIdx)
		if err != nil {
			return fmt.Errorf("vmsim: queue %d: %w", i, err)
		}
		dqs[i] = dq
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.acked = acked
	for i, q := range vm.queues {
		q.dq = dqs[i]
		q.lastAvl, q.known = 0, true
	}
	return nil
}

// startBackend replays QEMU's vub_start on the current connection:
// vhost_dev_start, then every queue's call notifier unmasked.
func (vm *VM) startBackend(ctx context.Context) error {
	fe := vm.fe
	features := vm.acked
	protoNegotiated := fe.Features()&(1<<frontend.FeatureProtocolFeatures) != 0
	if protoNegotiated {
		features |= 1 << frontend.FeatureProtocolFeatures
	}
	if err := fe.SetFeatures(ctx, features); err != nil {
		return fmt.Errorf("vmsim: start: %w", err)
	}
	// vhost_user_set_features adds FEATURES_OK when STATUS is negotiated;
	// the back-end keeps its status until a reset nobody sends.
	if fe.HasProtocol(frontend.ProtoStatus) {
		if err := fe.AddStatus(ctx, frontend.StatusFeaturesOK); err != nil {
			return fmt.Errorf("vmsim: start: %w", err)
		}
	}
	if err := vm.syncMemory(ctx, true); err != nil {
		return fmt.Errorf("vmsim: start: %w", err)
	}
	for i, q := range vm.queues {
		if err := vm.startQueue(ctx, uint32(i), q); err != nil {
			return fmt.Errorf("vmsim: start queue %d: %w", i, err)
		}
	}
	if protoNegotiated {
		for i := range vm.queues {
			if err := fe.SetVringEnable(ctx, uint32(i), true); err != nil {
				return fmt.Errorf("vmsim: start: %w", err)
			}
		}
	}
	vm.running = true // from here on GET_VRING_BASE is owed
	// vub_start unmasks every queue's notifier after vhost_dev_start:
	// SET_VRING_CALL with the guest notifier once more.
	for i, q := range vm.queues {
		if err := fe.SetVringCall(ctx, uint32(i), q.callFD); err != nil {
			return fmt.Errorf("vmsim: start: %w", err)
		}
	}
	vm.log.Info("vmsim: device started", "features", fmt.Sprintf("%#x", features), "queues", len(vm.queues))
	return nil
}

// startQueue is vhost_virtqueue_start: NUM, BASE, ADDR (VMM user
// addresses), KICK (the ioeventfd), CALL (the irqfd).
func (vm *VM) startQueue(ctx context.Context, idx uint32, q *queue) error {
	fe := vm.fe
	if err := fe.SetVringNum(ctx, idx, uint32(vm.cfg.QueueSize)); err != nil {
		return err
	}
	if err := fe.SetVringBase(ctx, idx, uint32(q.lastAvl)); err != nil {
		return err
	}
	var addr frontend.VringAddr
	addr.Index = idx
	var err error
	if addr.Desc, err = vm.ram.userAddr(q.addrs.Desc); err != nil {
		return err
	}
	if addr.Used, err = vm.ram.userAddr(q.addrs.Used); err != nil {
		return err
	}
	if addr.Avail, err = vm.ram.userAddr(q.addrs.Avail); err != nil {
		return err
	}
	if err := fe.SetVringAddr(ctx, addr); err != nil {
		return err
	}
	// QEMU arms every host notifier with a count of 1 when it starts the
	// device (event_notifier_init(notifier, 1) in
	// virtio_bus_set_host_notifier), so the back-end's ring starts with a
	// kick and serves what the guest queued while no back-end listened.
	if err := signalEventFD(q.kickFD); err != nil {
		return fmt.Errorf("arming kick eventfd: %w", err)
	}
	if err := fe.SetVringKick(ctx, idx, q.kickFD); err != nil {
		return err
	}
	return fe.SetVringCall(ctx, idx, q.callFD)
}

// Stop is QEMU's vub_stop (a VM stop, a guest reset, the device going
// away): SET_VRING_ENABLE 0 per queue, then GET_VRING_BASE per queue
// (remembered for the next start). QEMU sends no SET_STATUS for it. If
// GET_VRING_BASE fails, the queue resumes at its used index, as QEMU's
// virtio_queue_restore_last_avail_idx.
func (vm *VM) Stop(ctx context.Context) error {
	vm.loop.Lock()
	defer vm.loop.Unlock()
	return vm.stopLocked(ctx)
}

func (vm *VM) stopLocked(ctx context.Context) error {
	if !vm.running {
		return nil
	}
	vm.running = false
	fe := vm.fe
	var errs []error
	if fe.Features()&(1<<frontend.FeatureProtocolFeatures) != 0 {
		for i := range vm.queues {
			if err := fe.SetVringEnable(ctx, uint32(i), false); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	for i, q := range vm.queues {
		base, err := fe.GetVringBase(ctx, uint32(i))
		vm.mu.Lock()
		if err != nil {
			errs = append(errs, err)
			q.lastAvl, q.known = vm.usedIdx(q), false
		} else {
			q.lastAvl, q.known = uint16(base), true
		}
		vm.mu.Unlock()
	}
	vm.log.Info("vmsim: device stopped")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vmsim: stop: %w", err)
	}
	return nil
}

// usedIdx reads the used ring's idx from guest memory.
func (vm *VM) usedIdx(q *queue) uint16 {
	v, err := vm.ram.table.Translate(q.addrs.Used+2, 2)
	if err != nil {
		return 0
	}
	return v.LoadUint16Acquire(0)
}

// Reset is the guest resetting the device (virtio_reset, also on a
// machine reset): Stop, then the driver forgets its rings (the next Start
// lays them out afresh) and every shared memory mapping is dropped, as
// QEMU 11.1 does. The back-end hears of the dropped mappings at the next
// Start, as REM_MEM_REG (see doc.go: QEMU 11.1.3 crashes there instead).
func (vm *VM) Reset(ctx context.Context) error {
	vm.loop.Lock()
	defer vm.loop.Unlock()
	err := vm.stopLocked(ctx)
	vm.driverOK = false
	vm.mu.Lock()
	for _, q := range vm.queues {
		q.dq = nil
		q.lastAvl, q.known = 0, true
	}
	vm.mu.Unlock()
	vm.shmem.DropMappings()
	return err
}

// Reconnect drops the connection and connects again, as QEMU does after
// the back-end went away: a running device is stopped first (its
// GET_VRING_BASE fails if the back-end is gone, and the used index is used
// instead); the new connection is initialised and, if the guest had set
// DRIVER_OK, the device is started again at the remembered ring indices
// with the guest's rings untouched. Shared memory mappings are the
// device's and stay; the new connection hears of them as memory.
func (vm *VM) Reconnect(ctx context.Context) error {
	vm.loop.Lock()
	defer vm.loop.Unlock()
	if vm.isClosed() {
		return errors.New("vmsim: closed")
	}
	if vm.running {
		// Best effort, like QEMU's vub_disconnect: the back-end is
		// probably gone and every message fails.
		_ = vm.stopLocked(ctx)
	}
	if vm.fe != nil { // nil after a failed reconnect
		vm.fe.Close()
		vm.setFrontend(nil)
	}
	if err := vm.connect(ctx); err != nil {
		return err
	}
	if !vm.driverOK {
		return nil
	}
	return vm.startBackend(ctx)
}

// LastAvail is the avail index queue i will resume at, and whether it came
// from the back-end's GET_VRING_BASE (false: restored from the used index).
func (vm *VM) LastAvail(i int) (uint16, bool) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	q := vm.queues[i]
	return q.lastAvl, q.known
}
