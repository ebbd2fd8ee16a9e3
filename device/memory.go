package device

import (
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// SetMemory implements vhost.MemoryWatcher: the Backend calls it on every
// guest memory change, with the rings quiesced and the old mappings still
// mapped. The engine moves its rings and the MRs onto the new table while
// its data path is paused (an MR whose memory went away stays allocated
// but every DMA through it fails until DEREG_MR); it does so stopped or
// running, so there is one place that rebinds. In the guest-RAM fallback the engine's doorbells are
// guest memory too: the engine restarts on the area's new mapping, or, if
// the area went away, stays stopped and the driver hears DEVICE_FATAL.
func (d *Device) SetMemory(mem *guestmem.Table) error {
	d.omu.Lock()
	defer d.omu.Unlock()
	if d.o.closed {
		return nil
	}
	inFallback := d.o.started && d.o.dbArea != nil
	if inFallback {
		d.stopEngineLocked()
	}
	d.o.mem = mem
	switch {
	case inFallback:
		v, err := mem.Translate(d.o.dbArea.GPA, d.layout.Size())
		if err == nil {
			err = d.startEngineLocked(mem, v)
		}
		if err != nil {
			d.log.Error("guest-RAM doorbell area unusable after a memory change; engine stopped", "err", err)
			d.postEvent(abi.Event{Type: abi.EventDeviceFatal})
		}
	default:
		if err := d.eng.SetMemory(mem); err != nil {
			// The engine has put what it cannot reach in error and
			// told the driver; the device goes on.
			d.log.Warn("engine memory change", "err", err)
		}
	}
	return nil
}
