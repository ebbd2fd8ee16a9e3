package device

import (
	"fmt"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/guestmem"
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

// doorbells is where the guest's doorbells are and whether the engine
// runs on them. The engine runs while the device is active and has
// doorbells: from Activate in shared-memory mode, from SET_DOORBELL_AREA
// in the guest-RAM fallback.
//
// Invariants:
//   - running is true exactly while the engine is started; CQs, QPs and
//     SRQs are created only then, as their doorbell records would be
//     nowhere before (need).
//   - area is set only in the fallback, once per reset, page-aligned and
//     at least the layout's size (checkArea); the device reserves it as
//     IO memory in its eMTT, so no MR covers it. The engine zeroes each
//     record when it binds a new QP or CQ to it.
//   - lastMode is the mode the driver's objects were built under:
//     re-activation in another mode drops them (their records are not
//     where the driver left them).
//
// Guarded by Device.omu.
type doorbells struct {
	eng    *engine.Engine
	layout abi.DoorbellLayout

	// mode is where the doorbells live while the device is active
	// (DoorbellNone while it is not).
	mode     DoorbellMode
	lastMode DoorbellMode
	running  bool
	area     *emtt.Span
}

// need refuses CREATE_CQ, CREATE_QP and CREATE_SRQ before the doorbells
// exist.
func (b *doorbells) need() error {
	if !b.running {
		return fail(abi.StatusBadState, "no doorbells yet (%v mode; the fallback needs SET_DOORBELL_AREA first)", b.mode)
	}
	return nil
}

// start starts the engine on mem with doorbells in view.
func (b *doorbells) start(mem *guestmem.Table, view guestmem.View) error {
	if err := b.eng.Start(mem, view, b.layout); err != nil {
		return err
	}
	b.running = true
	return nil
}

// stop stops the engine if it runs; objects are kept.
func (b *doorbells) stop() {
	if b.running {
		b.eng.Stop()
		b.running = false
	}
}

// reset forgets the guest-RAM area and the mode the objects were built
// under: a reset dropped them.
func (b *doorbells) reset() {
	b.area = nil
	b.lastMode = DoorbellNone
}

// checkArea checks SET_DOORBELL_AREA's range against the mode and the
// layout.
func (b *doorbells) checkArea(addr, length uint64) error {
	switch {
	case b.mode != DoorbellGuestRAM:
		return fail(abi.StatusBadState, "doorbells are in %v mode", b.mode)
	case b.area != nil:
		return fail(abi.StatusBadState, "doorbell area already at %#x", b.area.GPA)
	case addr%uint64(b.layout.PageSize) != 0:
		return fail(abi.StatusInvalidArgument, "doorbell area at %#x is not %#x-aligned", addr, b.layout.PageSize)
	case length < b.layout.Size():
		return fail(abi.StatusInvalidArgument, "doorbell area of %#x bytes (need %#x)", length, b.layout.Size())
	}
	return nil
}

// areaView is the registered guest-RAM area's doorbells in mem.
func (b *doorbells) areaView(mem *guestmem.Table) (guestmem.View, error) {
	return mem.Translate(b.area.GPA, b.layout.Size())
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
	if err := d.dbs.checkArea(r.Addr, r.Length); err != nil {
		return nil, err
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
	d.dbs.area = &span
	view, _ = view.Sub(0, d.layout.Size())
	clear(view.Bytes())
	if err := d.dbs.start(c.mem, view); err != nil {
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
