package device

import (
	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Doorbells and the engine. The engine runs while the device is active
// and has doorbells: from Activate in shared-memory mode, from
// SET_DOORBELL_AREA in the guest-RAM fallback. Every helper here is
// called with omu held.

// needDoorbells refuses CREATE_CQ and CREATE_QP before the doorbells
// exist: the new object's record would be nowhere.
func (d *Device) needDoorbells() error {
	if !d.o.started {
		return fail(abi.StatusBadState, "no doorbells yet (%v mode; the fallback needs SET_DOORBELL_AREA first)", d.o.mode)
	}
	return nil
}

// startEngineLocked starts the engine on mem with doorbells in view.
func (d *Device) startEngineLocked(mem *guestmem.Table, view guestmem.View) error {
	if err := d.eng.Start(mem, view, d.layout); err != nil {
		return err
	}
	d.o.started = true
	return nil
}

// stopEngineLocked stops the engine if it runs; objects are kept.
func (d *Device) stopEngineLocked() {
	if d.o.started {
		d.eng.Stop()
		d.o.started = false
	}
}

// setDoorbellArea is SET_DOORBELL_AREA, the fallback for a front-end
// without shared memory: the driver gives a page-aligned guest RAM range
// at least as large as the doorbell layout. It becomes IO memory (no MR
// may cover it, DMA never reaches it), the device zeroes it, and the
// engine starts watching it. Once per reset.
func (d *Device) setDoorbellArea(c *cmd, payload []byte) ([]byte, error) {
	var r abi.SetDoorbellAreaReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	switch {
	case d.o.mode != DoorbellGuestRAM:
		return nil, fail(abi.StatusBadState, "doorbells are in %v mode", d.o.mode)
	case d.o.dbArea != nil:
		return nil, fail(abi.StatusBadState, "doorbell area already at %#x", d.o.dbArea.GPA)
	case r.Addr%uint64(d.layout.PageSize) != 0:
		return nil, fail(abi.StatusInvalidArgument, "doorbell area at %#x is not %#x-aligned", r.Addr, d.layout.PageSize)
	case r.Length < d.layout.Size():
		return nil, fail(abi.StatusInvalidArgument, "doorbell area of %#x bytes (need %#x)", r.Length, d.layout.Size())
	}
	view, err := c.mem.Translate(r.Addr, r.Length)
	if err != nil {
		return nil, fail(abi.StatusBadAddress, "doorbell area %#x+%#x: %v", r.Addr, r.Length, err)
	}
	if vq, ok := d.overlapsVirtqueue(vhost.GuestRange{GPA: r.Addr, Len: r.Length}); ok {
		// The device zeroes the area and the engine writes it: over a
		// virtqueue it would break the device's own control path.
		return nil, fail(abi.StatusBadAddress, "doorbell area %#x+%#x overlaps virtqueue memory %#x+%#x", r.Addr, r.Length, vq.GPA, vq.Len)
	}
	span := emtt.Span{GPA: r.Addr, Len: r.Length}
	if err := d.mtt.ReserveIO(span); err != nil {
		return nil, mttError(err)
	}
	d.o.dbArea = &span
	view, _ = view.Sub(0, d.layout.Size())
	clear(view.Bytes())
	if err := d.startEngineLocked(c.mem, view); err != nil {
		return nil, fail(abi.StatusDeviceError, "starting the engine: %v", err)
	}
	return c.out, nil
}

// overlapsVirtqueue returns the virtqueue ring memory that g overlaps, if
// any.
func (d *Device) overlapsVirtqueue(g vhost.GuestRange) (vhost.GuestRange, bool) {
	env := d.env.Load()
	if env == nil {
		return vhost.GuestRange{}, false
	}
	for _, vq := range (*env).RingMemory() {
		if vq.Overlaps(g) {
			return vq, true
		}
	}
	return vhost.GuestRange{}, false
}
