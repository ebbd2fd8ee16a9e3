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
	// notifies the driver afterwards if the ring asks for it. An error
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
	// front-end's acknowledgement.
	MapShmem(ctx context.Context, m ShmemMapping, fd int) error
	// UnmapShmem asks the front-end to remove a mapping made by MapShmem.
	UnmapShmem(ctx context.Context, m ShmemMapping) error
	// ConfigChanged tells the driver that config space changed.
	ConfigChanged(ctx context.Context) error
}

// ShmemMapping describes one SHMEM_MAP or SHMEM_UNMAP.
type ShmemMapping struct {
	ShmID     uint8
	FdOffset  uint64
	ShmOffset uint64
	Len       uint64
	Writable  bool
}
