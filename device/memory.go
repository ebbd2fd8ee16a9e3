package device

import (
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// SetMemory implements vhost.MemoryWatcher: the Backend calls it on every
// guest memory change, with the rings quiesced and the old mappings still
// mapped. The engine moves its rings and the MRs onto the new table while
// its data path is paused (an MR whose memory went away stays allocated
// but every DMA through it fails until DEREG_MR); it does so stopped or
// running, so the engine's Start and SetMemory are the one place that
// rebinds. In the guest-RAM fallback the engine's doorbells are guest
// memory too: the engine restarts on the area's new mapping, or, if the
// area went away, stays stopped (its rings and the MRs still move onto
// the new table, since the old one is unmapped once this returns) and
// the driver hears DEVICE_FATAL.
//
// The pin cache moves first: chunks of memory that went away are unpinned
// and their areas marked gone before anything else (a DMA racing the
// change fails cleanly), and in pvdma.ModeAll new memory is pinned whole,
// which may fail and so refuse the change before anything moved. nil
// (the connection is going, its memory with it) only unpins: the objects
// wait for a reconnect's memory.
func (d *Device) SetMemory(mem *guestmem.Table) error {
	d.omu.Lock()
	defer d.omu.Unlock()
	if d.o.closed {
		return nil
	}
	if err := d.pins.SetMemory(mem); err != nil {
		return fmt.Errorf("device %q: %w", d.name, err)
	}
	if mem == nil {
		return nil
	}
	inFallback := d.dbs.running && d.dbs.area != nil
	if inFallback {
		d.dbs.stop()
	}
	d.mem = mem
	if inFallback {
		v, err := d.dbs.areaView(mem)
		if err == nil {
			err = d.dbs.start(mem, v)
		}
		if err == nil {
			return nil
		}
		d.log.Error("guest-RAM doorbell area unusable after a memory change; engine stopped", "err", err)
		d.postEvent(abi.Event{Type: abi.EventDeviceFatal})
	}
	d.setEngineMemoryLocked(mem)
	return nil
}

// setEngineMemoryLocked moves a stopped or running engine, its rings and
// the MRs onto mem (a started engine got there with Start).
func (d *Device) setEngineMemoryLocked(mem *guestmem.Table) {
	if err := d.eng.SetMemory(mem); err != nil {
		// The engine has put what it cannot reach in error and told the
		// driver; the device goes on.
		d.log.Warn("engine memory change", "err", err)
	}
}
