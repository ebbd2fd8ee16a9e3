package vmm

import (
	"context"
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/vhost/frontend"
	"github.com/vstellar/vstellar/virtio"
)

// Start is the guest driver bringing the device up plus QEMU's reaction to
// DRIVER_OK (vhost_dev_start): negotiate features, lay out the rings (only
// the first time, or after Reset), then SET_FEATURES, status, memory table,
// per-queue ring setup, ring enables and DRIVER_OK.
func (vm *VM) Start(ctx context.Context) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return errors.New("vmm: closed")
	}
	if vm.running {
		return errors.New("vmm: device already started")
	}
	if vm.fe == nil {
		return errors.New("vmm: not connected (a reconnect failed)")
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

// driverInit is the guest driver's part before DRIVER_OK: read the device
// features (QEMU answers from the GET_FEATURES it made at connect), ack a
// subset, and create fresh rings in guest RAM.
func (vm *VM) driverInit() error {
	offered := vm.fe.Features()
	if offered&(1<<featVersion1) == 0 {
		return fmt.Errorf("vmm: device does not offer VIRTIO_F_VERSION_1 (features %#x)", offered)
	}
	vm.acked = offered & vm.cfg.DeviceFeatures &^ (1 << frontend.FeatureProtocolFeatures)
	eventIdx := vm.acked&(1<<featEventIdx) != 0
	for i, q := range vm.queues {
		if q.addrs == (virtio.RingAddrs{}) {
			d, a, u := virtio.RingSizes(vm.cfg.QueueSize)
			var err error
			if q.addrs.Desc, err = vm.ram.alloc(d, 16); err != nil {
				return fmt.Errorf("vmm: queue %d rings: %w", i, err)
			}
			if q.addrs.Avail, err = vm.ram.alloc(a, 2); err != nil {
				return fmt.Errorf("vmm: queue %d rings: %w", i, err)
			}
			if q.addrs.Used, err = vm.ram.alloc(u, 4); err != nil {
				return fmt.Errorf("vmm: queue %d rings: %w", i, err)
			}
			if q.scratch, err = vm.ram.alloc(scratchSize, 4096); err != nil {
				return fmt.Errorf("vmm: queue %d buffers: %w", i, err)
			}
		}
		dq, err := virtio.NewDriverQueue(vm.ram.table, vm.cfg.QueueSize, q.addrs, eventIdx)
		if err != nil {
			return fmt.Errorf("vmm: queue %d: %w", i, err)
		}
		q.dq = dq
		q.lastAvl, q.known = 0, true
	}
	return nil
}

// startBackend replays QEMU's vhost_dev_start on the current connection.
func (vm *VM) startBackend(ctx context.Context) error {
	fe := vm.fe
	features := vm.acked
	protoNegotiated := fe.Features()&(1<<frontend.FeatureProtocolFeatures) != 0
	if protoNegotiated {
		features |= 1 << frontend.FeatureProtocolFeatures
	}
	if err := fe.SetFeatures(ctx, features); err != nil {
		return fmt.Errorf("vmm: start: %w", err)
	}
	hasStatus := fe.HasProtocol(frontend.ProtoStatus)
	if hasStatus {
		if err := fe.AddStatus(ctx, frontend.StatusFeaturesOK); err != nil {
			return fmt.Errorf("vmm: start: %w", err)
		}
	}
	if err := vm.sendMemory(ctx); err != nil {
		return fmt.Errorf("vmm: start: %w", err)
	}
	for i, q := range vm.queues {
		if err := vm.startQueue(ctx, uint32(i), q); err != nil {
			return fmt.Errorf("vmm: start queue %d: %w", i, err)
		}
	}
	if protoNegotiated {
		for i := range vm.queues {
			if err := fe.SetVringEnable(ctx, uint32(i), true); err != nil {
				return fmt.Errorf("vmm: start: %w", err)
			}
		}
	}
	vm.running = true // from here on GET_VRING_BASE is owed
	if hasStatus {
		if err := fe.AddStatus(ctx, frontend.StatusAcknowledge|frontend.StatusDriver|frontend.StatusDriverOK); err != nil {
			return fmt.Errorf("vmm: start: %w", err)
		}
	}
	vm.log.Info("vmm: device started", "features", fmt.Sprintf("%#x", features), "queues", len(vm.queues))
	return nil
}

// sendMemory sends the memory table: SET_MEM_TABLE with one fd per region,
// or (UseAddMemReg) one ADD_MEM_REG per region not yet sent on this
// connection, as QEMU's shadow-region bookkeeping does.
func (vm *VM) sendMemory(ctx context.Context) error {
	regions := vm.ram.regions
	if !vm.cfg.UseAddMemReg {
		fds := make([]int, len(regions))
		for i := range fds {
			fds[i] = vm.ram.fd
		}
		return vm.fe.SetMemTable(ctx, regions, fds)
	}
	if vm.memSent {
		return nil
	}
	for _, r := range regions {
		if err := vm.fe.AddMemReg(ctx, r, vm.ram.fd); err != nil {
			return err
		}
	}
	vm.memSent = true
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

// Stop is QEMU's vhost_dev_stop (VM stop, or the first half of a reset):
// SET_VRING_ENABLE 0 per queue, GET_VRING_BASE per queue (remembered for
// the next start), SET_STATUS 0. If GET_VRING_BASE fails, the queue
// resumes at its used index, as QEMU's virtio_queue_restore_last_avail_idx.
func (vm *VM) Stop(ctx context.Context) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
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
		if err != nil {
			errs = append(errs, err)
			q.lastAvl, q.known = vm.usedIdx(q), false
			continue
		}
		q.lastAvl, q.known = uint16(base), true
	}
	if fe.HasProtocol(frontend.ProtoStatus) {
		if err := fe.SetStatus(ctx, 0); err != nil {
			errs = append(errs, err)
		}
	}
	vm.log.Info("vmm: device stopped")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vmm: stop: %w", err)
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

// Reset is the guest resetting the device: Stop, then the driver forgets
// its rings (the next Start lays them out afresh) and every shared memory
// mapping is dropped (virtio_reset).
func (vm *VM) Reset(ctx context.Context) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	err := vm.stopLocked(ctx)
	vm.driverOK = false
	for _, q := range vm.queues {
		q.dq = nil
		q.lastAvl, q.known = 0, true
	}
	vm.shmem.DropMappings()
	return err
}

// Reconnect drops the connection and connects again, as QEMU does after
// the back-end went away: a running device is stopped first (its
// GET_VRING_BASE fails if the back-end is gone, and the used index is used
// instead); the new connection is initialised and, if the guest had set
// DRIVER_OK, the device is started again at the remembered ring indices
// with the guest's rings untouched.
func (vm *VM) Reconnect(ctx context.Context) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return errors.New("vmm: closed")
	}
	if vm.running {
		// Best effort, like QEMU's vub_disconnect: the back-end is
		// probably gone and every message fails.
		_ = vm.stopLocked(ctx)
	}
	if vm.fe != nil { // nil after a failed reconnect
		vm.fe.Close()
		vm.fe = nil
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
