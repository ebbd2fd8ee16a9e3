package guestdriver

import (
	"context"

	"github.com/vstellar/vstellar/guestmem"
)

// Transport is how a driver reaches one vStellar device.
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
}
