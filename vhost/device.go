package vhost

import (
	"context"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// Device is the device model a Backend serves. The Backend owns the
// protocol, guest memory and the rings; the Device owns what the rings
// carry. Methods are called from the connection's goroutine, except
// ProcessQueue, which runs on the queue's worker.
type Device interface {
	// NumQueues is the number of virtqueues (GET_QUEUE_NUM).
	NumQueues() int
	// MaxQueueSize bounds SET_VRING_NUM.
	MaxQueueSize() uint16
	// Features are the virtio features offered (GET_FEATURES), without
	// VHOST_USER_F_PROTOCOL_FEATURES, which the Backend adds.
	Features() uint64
	// ConfigSize is the size of the device configuration space.
	ConfigSize() uint32
	// ReadConfig fills buf with config space bytes starting at offset.
	// The Backend has checked that the range lies inside ConfigSize.
	ReadConfig(offset uint32, buf []byte)
	// WriteConfig applies a driver write to config space (SET_CONFIG).
	WriteConfig(offset uint32, data []byte) error
	// ShmemRegions returns the size of each shared memory region, indexed
	// by shmid (GET_SHMEM_CONFIG). Sizes are page multiples; 0 = unused.
	ShmemRegions() []uint64

	// Activate is called once the driver has set DRIVER_OK with the
	// features it acked. The device may map shared memory through env
	// and must return before its rings are serviced.
	Activate(ctx context.Context, env Env) error
	// ProcessQueue is called on the queue's worker after a kick (or on
	// start with pending buffers). It pops and pushes chains; the Backend
	// notifies the driver afterwards if the ring asks for it. It may leave
	// buffers posted (buffers waiting for something to fill them); it is
	// then called again on the next kick or Env.Schedule. An error
	// wrapping virtio.ErrBadChain marks the queue broken.
	ProcessQueue(ctx context.Context, idx int, q *virtio.DeviceQueue, mem *guestmem.Table) error
	// Deactivate is called when the device stops being live: the driver
	// reset it (reset=true: drop all device state) or the front-end went
	// away or stopped the rings (reset=false: keep state for a reconnect).
	// The device must not touch guest memory or shared memory mappings
	// after it returns.
	Deactivate(reset bool)
}

// Env is what an active device may use of its connection.
type Env interface {
	// AckedFeatures are the virtio features the driver accepted.
	AckedFeatures() uint64
	// Memory is the current guest memory table.
	Memory() *guestmem.Table
	// MapShmem asks the front-end to map fd (at fdOffset, length bytes)
	// into shared memory region shmid at shmOffset, and waits for the
	// front-end's acknowledgement. A mapping of the same file the
	// front-end reports it has already is not made again; one of an
	// earlier incarnation of the file (a memfd of the same name) is
	// replaced. Mappings are at offset 0 of their region.
	MapShmem(ctx context.Context, m ShmemMapping, fd int) error
	// UnmapShmem asks the front-end to remove a mapping made by MapShmem.
	UnmapShmem(ctx context.Context, m ShmemMapping) error
	// ConfigChanged tells the driver that config space changed.
	ConfigChanged(ctx context.Context) error
	// RingMemory is where the configured virtqueues live in guest
	// memory (descriptor tables, available and used rings): memory the
	// device must never take for anything else, as a hostile driver may
	// ask it to (a doorbell area over the control queue).
	RingMemory() []GuestRange
	// Schedule asks for queue idx to be processed on its worker as if the
	// driver had kicked it: the way a device delivers something that
	// arose outside ProcessQueue (an asynchronous event) into buffers the
	// driver posted earlier. It never blocks and may be called from any
	// goroutine, also from one the device's ProcessQueue is waiting for;
	// it does nothing for an unknown index or a ring that is not running.
	Schedule(idx int)
}

// GuestRange is Len bytes of guest physical memory at GPA.
type GuestRange struct {
	GPA, Len uint64
}

// Overlaps reports whether r and o share a byte.
func (r GuestRange) Overlaps(o GuestRange) bool {
	return r.Len != 0 && o.Len != 0 && r.GPA < o.GPA+o.Len && o.GPA < r.GPA+r.Len
}

// MemoryWatcher is implemented by devices that keep their own references
// into guest memory (translation tables, a data-path engine). The Backend
// calls SetMemory on every guest memory change with the new table, while
// every ring worker is quiesced and before the mappings that went away
// are unmapped, so the device can move off the old table while it is
// still safe to touch. An error refuses the change: the rings stay on the
// old table and the front-end gets an error reply; the device must then
// still work with the old table. When the connection ends the Backend
// calls SetMemory(nil), after Deactivate and before it unmaps the memory;
// its error is only logged.
type MemoryWatcher interface {
	SetMemory(t *guestmem.Table) error
}

// ShmemFiler is implemented by devices that map files into shared memory
// regions. The Backend learns them when a front-end connects, before the
// front-end's memory table, which may already report a mapping of one
// (QEMU keeps mappings across reconnects), so that it is recognised as
// shared memory rather than taken for guest RAM.
type ShmemFiler interface {
	ShmemFiles() []int
}

// ShmemMapping describes one SHMEM_MAP or SHMEM_UNMAP.
type ShmemMapping struct {
	ShmID     uint8
	FdOffset  uint64
	ShmOffset uint64
	Len       uint64
	Writable  bool
}
