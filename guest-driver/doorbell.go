package guestdriver

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// doorbells is the driver's doorbell region: the device's shared memory
// pages, or, in the guest-RAM fallback, an area of guest RAM the driver
// registered with SET_DOORBELL_AREA. Either way the layout is the one
// config space advertises: the device page (engine_flags) first, then one
// record per QP and per CQ.
type doorbells struct {
	view   guestmem.View
	layout abi.DoorbellLayout
	// area is the fallback area (zero in shmem mode).
	area Buffer
	t    Transport
}

// doorbells returns the doorbell region, setting it up the first time a
// CQ or QP needs it: in shmem mode by checking the mapped region, in the
// fallback by allocating a page-aligned area of the layout's size and
// registering it. Set up lazily so that a device whose data path is never
// used costs no guest memory and no command.
func (d *Device) doorbells(ctx context.Context) (*doorbells, error) {
	d.dbMu.Lock()
	defer d.dbMu.Unlock()
	if d.db != nil {
		return d.db, nil
	}
	cfg := d.Config()
	db := &doorbells{layout: cfg.Doorbell, t: d.t}
	switch {
	case cfg.Status&abi.ConfigStatusDoorbellShmem != 0:
		v, err := d.Doorbells()
		if err != nil {
			return nil, err
		}
		db.view = v
	case cfg.Status&abi.ConfigStatusDoorbellGuestRAM != 0:
		size := cfg.Doorbell.Size()
		// Straight from the transport, not the pool: the area is never
		// freed, and the pool would round it up to a power of two.
		area, err := d.t.AllocDMA(size, uint64(cfg.Doorbell.PageSize))
		if err != nil {
			return nil, fmt.Errorf("guestdriver: doorbell area: %w", err)
		}
		if area.Len() < size || area.GPA%uint64(cfg.Doorbell.PageSize) != 0 {
			return nil, fmt.Errorf("guestdriver: doorbell area of %d bytes at %#x: %w", area.Len(), area.GPA, ErrDevice)
		}
		area, _ = area.Slice(0, size)
		clear(area.Bytes())
		req := abi.SetDoorbellAreaReq{Addr: area.GPA, Length: size}
		if err := d.call(ctx, abi.OpSetDoorbellArea, &req, nil); err != nil {
			return nil, err
		}
		db.view, db.area = area.View, area
	default:
		return nil, fmt.Errorf("device status %#x (not live): %w", cfg.Status, ErrNoDoorbells)
	}
	d.db = db
	return db, nil
}

// DoorbellArea is the area of guest RAM the driver registered for its
// doorbells in the fallback (SET_DOORBELL_AREA), once the first CQ or QP
// needed it; ok is false in shared-memory mode and before. What a driver
// would tell a test that checks the device refuses DMA into it.
func (d *Device) DoorbellArea() (area Buffer, ok bool) {
	d.dbMu.Lock()
	defer d.dbMu.Unlock()
	if d.db == nil || d.db.area.Len() == 0 {
		return Buffer{}, false
	}
	return d.db.area, true
}

// record is the doorbell record at index i, as the device named it in a
// CREATE response (checked: the device is not trusted to stay in range).
func (db *doorbells) record(i uint32) (guestmem.View, error) {
	off, ok := db.layout.RecordOffset(i)
	if !ok {
		return guestmem.View{}, fmt.Errorf("doorbell index %d of %d: %w", i, db.layout.Records, ErrDevice)
	}
	v, err := db.view.Sub(off, uint64(db.layout.RecordSize))
	if err != nil {
		return guestmem.View{}, fmt.Errorf("doorbell index %d: %v: %w", i, err, ErrDevice)
	}
	return v, nil
}

// ring is the second half of the wake-up protocol, after the producer
// index has been stored (an atomic store: the full barrier the protocol
// needs): if the engine said it is idle, kick the wakeup queue. A busy
// engine finds the new index on its own.
func (db *doorbells) ring() error {
	if db.view.LoadUint32Acquire(abi.DevPageOffEngineFlags)&abi.EngineIdle == 0 {
		return nil
	}
	return db.t.NotifyWakeup()
}
