package guestdriver

import (
	"context"
	"errors"

	"github.com/vstellar/vstellar/guestmem"
)

// ErrNoDoorbells: the transport has no doorbell region mapped (the
// front-end lacks SHMEM, or the device chose the guest-RAM fallback).
var ErrNoDoorbells = errors.New("guestdriver: doorbell region not mapped")

// Transport is how a driver reaches one vStellar device: the seam between
// the verbs logic of this package and the bus the device sits on. The
// control path needs Command and ReadConfig; the data path needs guest
// DMA memory, the doorbell region, the wake-up notification and the event
// queue. A virtio-pci transport maps each method onto the PCI device (BAR
// shared memory, notify area, MSI-X); internal/sim/vmsim's Transport onto
// the simulated VM.
type Transport interface {
	// Command sends one control request (header and payload, as encoded
	// by package abi) on the control queue with a device-writable buffer
	// of respLen bytes, waits for the device to complete it, and returns
	// the bytes the device wrote (the used length).
	Command(ctx context.Context, req []byte, respLen uint32) ([]byte, error)
	// ReadConfig returns the whole device config space.
	ReadConfig(ctx context.Context) ([]byte, error)
	// Doorbells returns the doorbell region (shared memory region
	// abi.DoorbellShmID) as the guest sees it, or an error when the
	// transport has none mapped.
	Doorbells() (guestmem.View, error)

	// AllocDMA allocates size bytes of guest memory, guest-physically
	// contiguous and aligned to align (a power of two), that the device
	// may be told about (rings, buffers, page lists, event records).
	// The memory is zero when first handed out.
	AllocDMA(size, align uint64) (Buffer, error)
	// NotifyWakeup is a bare notification of abi.QueueWakeup: the
	// doorbell wake-up kick. No buffer is posted.
	NotifyWakeup() error
	// PostEventBuffers makes each buffer available to the device on
	// abi.QueueEvent, device-writable, one chain per buffer.
	PostEventBuffers(bufs ...Buffer) error
	// PostedEventBuffers is the number of buffers posted on
	// abi.QueueEvent (by any driver since the queue was set up) that
	// TakeEvent has not returned yet, filled or not. Open reads it so
	// that it posts only what its predecessors' buffers do not cover:
	// a virtio driver cannot take back a buffer it posted.
	PostedEventBuffers() (int, error)
	// TakeEvent returns the next event buffer the device filled (the
	// posted buffer, as far as the transport knows it, and the bytes the
	// device wrote); ok is false when there is none.
	TakeEvent() (buf Buffer, written uint32, ok bool, err error)
	// WaitEvents sleeps until the device returns an event buffer (the
	// queue's used-buffer interrupt) or ctx ends. It may return early;
	// callers loop on TakeEvent.
	WaitEvents(ctx context.Context) error
}
