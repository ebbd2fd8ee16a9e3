//go:build linux

package virtiopci

import (
	"context"
	"fmt"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// driverFeatures are the virtio features this driver accepts when
// offered, the same as the simulated VMM's driver
// (vmsim.DefaultDriverFeatures): VERSION_1, EVENT_IDX (virtio.DriverQueue
// implements it), INDIRECT_DESC and the device-specific bits;
// negotiate drops SHMEM_DOORBELL when the device shows no doorbell
// region large enough.
const driverFeatures = 1<<virtio.FeatureVersion1 | 1<<virtio.FeatureEventIdx | 1<<virtio.FeatureIndirectDesc | abi.DeviceFeatureBits

// initDevice is the driver initialisation of VIRTIO 1.2 §3.1.1: reset,
// ACKNOWLEDGE, DRIVER, features, FEATURES_OK (checked), the queues, and
// DRIVER_OK. On failure the device is left FAILED.
func (t *Transport) initDevice(ctx context.Context) error {
	cc := t.cc
	if err := cc.reset(ctx); err != nil {
		return err
	}
	cc.addStatus(virtio.StatusAcknowledge)
	cc.addStatus(virtio.StatusDriver)
	if err := t.negotiate(); err != nil {
		cc.addStatus(virtio.StatusFailed)
		return err
	}
	if err := t.setupQueues(); err != nil {
		cc.addStatus(virtio.StatusFailed)
		return err
	}
	cc.addStatus(virtio.StatusDriverOK)
	if s := cc.status(); s&virtio.StatusDeviceNeedsReset != 0 || !s.Has(virtio.StatusDriverOK) {
		return fmt.Errorf("virtiopci: device status %v after DRIVER_OK", s)
	}
	return nil
}

// negotiate accepts the features both sides support and checks that the
// device took them (FEATURES_OK reads back).
func (t *Transport) negotiate() error {
	offered := t.cc.deviceFeatures()
	if !virtio.FeatureVersion1.In(offered) {
		return fmt.Errorf("virtiopci: device offers no VIRTIO_F_VERSION_1 (features %#x): not a modern device", offered)
	}
	want := uint64(driverFeatures)
	if !t.doorbellRegionFits() {
		want &^= abi.FeatureShmemDoorbell.Mask()
	}
	t.features = offered & want
	t.cc.setDriverFeatures(t.features)
	t.cc.addStatus(virtio.StatusFeaturesOK)
	if s := t.cc.status(); !s.Has(virtio.StatusFeaturesOK) {
		return fmt.Errorf("virtiopci: device refused features %#x (offered %#x; status %v)", t.features, offered, s)
	}
	return nil
}

// doorbellRegionFits reports whether the device has a shared memory
// region abi.DoorbellShmID at least as large as the doorbell region its
// config space advertises (the condition for acking SHMEM_DOORBELL).
// Config space may be read before FEATURES_OK (spec §3.1.1 step 4); only
// the two words that give the size are read, as each read of a
// vhost-user device's config space is a round trip to its back-end.
func (t *Transport) doorbellRegionFits() bool {
	if t.shm.Len() == 0 || t.devcfg.Len() < abi.ConfigOffDoorbellPages+4 {
		return false
	}
	for range maxConfigTries {
		gen := t.cc.generation()
		pageSize := uint64(t.devcfg.MMIORead32(abi.ConfigOffDoorbellPageSz))
		pages := uint64(t.devcfg.MMIORead32(abi.ConfigOffDoorbellPages))
		if t.cc.generation() == gen {
			return pageSize > 0 && pages > 0 && t.shm.Len() >= pageSize*pages
		}
	}
	return false
}

// setupQueues lays out every queue of the ABI in DMA memory with the
// device's queue size and enables it.
func (t *Transport) setupQueues() error {
	n := t.cc.numQueues()
	if int(n) < abi.NumQueues {
		return fmt.Errorf("virtiopci: device has %d queues, the ABI needs %d", n, abi.NumQueues)
	}
	eventIdx := virtio.FeatureEventIdx.In(t.features)
	for i := range uint16(abi.NumQueues) {
		size, notifyOff := t.cc.selectQueue(i)
		if size == 0 || size&(size-1) != 0 || size > virtio.MaxQueueSize {
			return fmt.Errorf("virtiopci: queue %d has size %d", i, size)
		}
		off := uint64(notifyOff) * uint64(t.layout.NotifyMultiplier)
		if off+2 > t.notify.Len() {
			return fmt.Errorf("virtiopci: queue %d notify offset %#x beyond the %#x-byte notify area", i, off, t.notify.Len())
		}
		d, a, u := virtio.RingSizes(size)
		var addrs virtio.RingAddrs
		for _, r := range []struct {
			n     uint64
			align uint64
			dst   *uint64
		}{{d, virtio.DescAlign, &addrs.Desc}, {a, virtio.AvailAlign, &addrs.Avail}, {u, virtio.UsedAlign, &addrs.Used}} {
			b, err := t.dma.alloc(r.n, max(r.align, 64))
			if err != nil {
				return fmt.Errorf("virtiopci: queue %d rings: %w", i, err)
			}
			*r.dst = b.GPA
		}
		mem, err := t.dma.table()
		if err != nil {
			return err
		}
		dq, err := virtio.NewDriverQueue(mem, size, addrs, eventIdx)
		if err != nil {
			return fmt.Errorf("virtiopci: queue %d: %w", i, err)
		}
		t.cc.enableQueue(queueSetup{index: i, size: size, addrs: addrs})
		t.queues = append(t.queues, &queue{index: i, dq: dq, notifyOff: off, posted: make([]guestdriver.Buffer, size)})
	}
	return nil
}
