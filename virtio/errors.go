package virtio

import "errors"

// Sentinel errors, always returned wrapped with detail. Callers use
// errors.Is to tell hostile guest input (ErrBadChain, ErrBadRing,
// ErrBadInflight, possibly together with guestmem.ErrOutOfRange) from
// their own mistakes.
var (
	// ErrBadChain: the guest's avail ring or descriptor chain breaks the
	// rules. The device should stop the queue and set DEVICE_NEEDS_RESET.
	ErrBadChain = errors.New("virtio: bad descriptor chain")
	// ErrBadRing: a queue size or ring address is unusable.
	ErrBadRing = errors.New("virtio: bad ring configuration")
	// ErrBadInflight: an inflight-tracking region is malformed or does not
	// match the queue.
	ErrBadInflight = errors.New("virtio: bad inflight region")
	// ErrQueueFull: the driver side has too few free descriptors.
	ErrQueueFull = errors.New("virtio: queue full")
	// ErrNotInflight: PopInflight was asked for a head that is not pending
	// resubmission.
	ErrNotInflight = errors.New("virtio: head is not pending resubmission")
)
