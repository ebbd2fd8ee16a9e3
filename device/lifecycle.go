package device

import (
	"context"
	"fmt"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// DoorbellMode reports the current doorbell mode.
func (d *Device) DoorbellMode() DoorbellMode {
	d.omu.Lock()
	defer d.omu.Unlock()
	return d.dbs.mode
}

// Activate implements vhost.Device. When the driver acked
// FeatureShmemDoorbell it asks the front-end to map the doorbell region
// at offset 0 of shmid 0, writable, and waits for the acknowledgement. If
// the front-end cannot (SHMEM not negotiated, mapping refused) the device
// still comes up, in the guest-RAM fallback, and says so in config status;
// the driver reads status after DRIVER_OK. In shared-memory mode the
// engine starts here; in the fallback it starts at SET_DOORBELL_AREA (or
// here, on a re-activation that finds the area registered before).
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
	// A driver without IDLE_WAKEUP never kicks the wakeup queue: the
	// engine must find its doorbells on its own even while idle.
	if abi.FeatureIdleWakeup.In(acked) {
		d.eng.SetIdlePoll(0)
	} else {
		d.eng.SetIdlePoll(idlePollWithoutKicks)
	}
	d.omu.Lock()
	err := d.activateLocked(mode, env.Memory())
	if err != nil {
		d.dbs.mode = DoorbellNone
	}
	d.omu.Unlock()
	if err != nil {
		return fmt.Errorf("device %q: activate: %w", d.name, err)
	}
	d.events.Store(abi.FeatureEventQueue.In(acked))
	d.env.Store(&env)
	d.status.Store(mode.statusBits())
	d.active.Store(true)
	d.stats.activations.Add(1)
	d.log.Info("device active", "doorbells", mode.String(), "features", abi.FeatureString(acked))
	return nil
}

// idlePollWithoutKicks is how often an idle engine rescans for a driver
// that did not negotiate IDLE_WAKEUP: a thousand cheap wake-ups a second
// rather than a lost doorbell.
const idlePollWithoutKicks = time.Millisecond

// activateLocked moves the objects onto mem and starts the engine if the
// doorbells exist. The engine's Start (or, when it stays stopped, its
// SetMemory) moves the rings and the MRs onto mem. Called with omu held.
func (d *Device) activateLocked(mode DoorbellMode, mem *guestmem.Table) error {
	if d.dbs.lastMode != DoorbellNone && d.dbs.lastMode != mode {
		// The QPs' and CQs' doorbell records are not where the driver
		// left them: its objects are of no use any more.
		d.log.Warn("doorbell mode changed across re-activation; dropping the driver's objects",
			"was", d.dbs.lastMode.String(), "now", mode.String())
		d.resetObjectsLocked()
	}
	d.dbs.mode, d.dbs.lastMode = mode, mode
	// A Backend reports memory changes through SetMemory; this covers a
	// host that activates on memory the device has not seen.
	moved := mem != d.mem
	if moved {
		if err := d.pins.SetMemory(mem); err != nil {
			return err
		}
	}
	d.mem = mem
	var err error
	switch {
	case mode == DoorbellShmem:
		err = d.dbs.start(mem, d.db.View())
	case d.dbs.area != nil:
		// Re-activation in the fallback: the area registered before is
		// where the records are.
		v, terr := d.dbs.areaView(mem)
		if terr == nil {
			err = d.dbs.start(mem, v)
			break
		}
		d.log.Warn("guest-RAM doorbell area gone; dropping the driver's objects", "area", d.dbs.area.GPA, "err", terr)
		d.resetObjectsLocked()
		d.dbs.lastMode = mode
	}
	if moved && !d.dbs.running {
		// No Start moved the rings and MRs: move them without one.
		d.setEngineMemoryLocked(mem)
	}
	return err
}

// Deactivate implements vhost.Device. It waits for running ProcessQueue
// calls and stops the engine, after which the device touches no guest
// memory. The front-end drops shared memory mappings across reset and with
// its connection, so the device only forgets its mapping. Without reset
// (a disconnect, a VM pause: SET_STATUS 0) the device keeps everything the
// driver built for the next activation; with reset it drops it all.
func (d *Device) Deactivate(reset bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.stopLocked()
	d.omu.Lock()
	d.dbs.stop()
	d.dbs.mode = DoorbellNone
	if reset {
		d.resetObjectsLocked()
	}
	d.omu.Unlock()
	d.log.Info("device inactive", "reset", reset)
}

// stopLocked marks the device inactive and waits out ProcessQueue.
func (d *Device) stopLocked() {
	d.active.Store(false)
	d.env.Store(nil)
	// An empty critical section: taking the lock waits for every running
	// ProcessQueue; later ones see active cleared and return at once.
	d.run.Lock()
	d.run.Unlock()
	d.events.Store(false)
	d.status.Store(0)
}

// resetStateCmd is RESET_STATE: the driver's probe drops whatever a
// previous driver left. In shared-memory mode the engine comes straight
// back up on the cleared doorbells; in the guest-RAM fallback it waits
// for the next SET_DOORBELL_AREA.
func (d *Device) resetStateCmd(c *cmd, _ []byte) ([]byte, error) {
	d.dbs.stop()
	d.resetObjectsLocked()
	d.dbs.lastMode = d.dbs.mode
	if d.dbs.mode == DoorbellShmem {
		if err := d.dbs.start(d.mem, d.db.View()); err != nil {
			return nil, fail(abi.StatusDeviceError, "restarting the engine: %v", err)
		}
	}
	return c.out, nil
}

// resetObjectsLocked drops everything a driver built: QPs and CQs (in
// the engine), MRs, PDs, AHs, guest GIDs (off the fabric), queued events,
// the doorbell records and the guest-RAM doorbell area. The engine must
// be stopped. Called with omu held.
func (d *Device) resetObjectsLocked() {
	d.eng.Reset()
	d.mtt.Clear()
	// The MRs and queues that used the pinned chunks are gone.
	d.pins.Drop()
	d.o.clear()
	d.gids.dropGuests(false)
	d.ev.clear()
	if err := d.db.Zero(); err != nil {
		d.log.Error("clearing doorbell region", "err", err)
	}
	d.dbs.reset()
	d.stats.resets.Add(1)
}
