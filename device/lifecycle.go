package device

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// DoorbellMode says where the guest's doorbells live while the device is
// active.
type DoorbellMode int

const (
	// DoorbellNone: the device is not active.
	DoorbellNone DoorbellMode = iota
	// DoorbellShmem: the doorbell region is mapped at shmid 0.
	DoorbellShmem
	// DoorbellGuestRAM: the fallback; the driver registers a doorbell
	// area in guest RAM with SET_DOORBELL_AREA, which the device will tag
	// as IO memory and never pin.
	DoorbellGuestRAM
)

func (m DoorbellMode) String() string {
	switch m {
	case DoorbellNone:
		return "none"
	case DoorbellShmem:
		return "shmem"
	case DoorbellGuestRAM:
		return "guest-ram"
	}
	return fmt.Sprintf("DoorbellMode(%d)", int(m))
}

// statusBits is the config status word for a mode.
func (m DoorbellMode) statusBits() uint32 {
	switch m {
	case DoorbellShmem:
		return abi.ConfigStatusDoorbellShmem
	case DoorbellGuestRAM:
		return abi.ConfigStatusDoorbellGuestRAM
	}
	return 0
}

// DoorbellMode reports the current doorbell mode.
func (d *Device) DoorbellMode() DoorbellMode {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mode
}

// Activate implements vhost.Device. When the driver acked
// FeatureShmemDoorbell it asks the front-end to map the doorbell region
// at offset 0 of shmid 0, writable, and waits for the acknowledgement. If
// the front-end cannot (SHMEM not negotiated, mapping refused) the device
// still comes up, in the guest-RAM fallback, and says so in config status;
// the driver reads status after DRIVER_OK.
func (d *Device) Activate(ctx context.Context, env vhost.Env) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("device %q: activate: %w", d.name, ErrClosed)
	}
	if d.active.Load() {
		return fmt.Errorf("device %q: activate: %w", d.name, ErrAlreadyActive)
	}
	acked := env.AckedFeatures()
	mode := DoorbellGuestRAM
	if abi.FeatureShmemDoorbell.In(acked) {
		m := vhost.ShmemMapping{
			ShmID:    abi.DoorbellShmID,
			Len:      d.layout.Size(),
			Writable: true,
		}
		if err := env.MapShmem(ctx, m, d.db.Fd()); err != nil {
			d.log.Warn("doorbell region not mapped; using the guest-RAM fallback", "err", err)
		} else {
			mode = DoorbellShmem
		}
	}
	d.mode = mode
	d.status.Store(mode.statusBits())
	d.active.Store(true)
	d.stats.activations.Add(1)
	d.log.Info("device active", "doorbells", mode.String(), "features", abi.FeatureString(acked))
	return nil
}

// Deactivate implements vhost.Device. It waits for running ProcessQueue
// calls, after which the device touches no guest memory. The front-end
// drops shared memory mappings across reset and with its connection, so
// the device only forgets its mapping. With reset the device also drops its
// state: today the doorbell contents; later the PD/CQ/QP/MR/AH tables.
func (d *Device) Deactivate(reset bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.stopLocked()
	if reset {
		d.resetState()
	}
	d.log.Info("device inactive", "reset", reset)
}

// resetState drops what a driver built on the device: today the doorbell
// contents; later the PD/CQ/QP/MR/AH tables. A vhost RESET_DEVICE does it,
// and so does the driver's RESET_STATE when it probes. SET_STATUS 0 does
// not: QEMU sends it on a VM pause too, and a paused guest expects its
// resources back.
func (d *Device) resetState() {
	if err := d.db.Zero(); err != nil {
		d.log.Error("clearing doorbell region", "err", err)
	}
	d.stats.resets.Add(1)
}

// stopLocked marks the device inactive and waits out ProcessQueue.
func (d *Device) stopLocked() {
	d.active.Store(false)
	// An empty critical section: taking the lock waits for every running
	// ProcessQueue; later ones see active cleared and return at once.
	d.run.Lock()
	d.run.Unlock()
	d.mode = DoorbellNone
	d.status.Store(0)
}
