package guestdriver

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Device is an opened vStellar device.
type Device struct {
	t   Transport
	cfg abi.Config
}

// Open reads and validates the device's config space. The device must be
// started (DRIVER_OK) for commands to be answered.
func Open(ctx context.Context, t Transport) (*Device, error) {
	b, err := t.ReadConfig(ctx)
	if err != nil {
		return nil, err
	}
	var cfg abi.Config
	if err := cfg.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("guestdriver: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("guestdriver: %w", err)
	}
	d := &Device{t: t, cfg: cfg}
	// A driver that probes owns the device from scratch: whatever a
	// previous driver (before a guest reboot) created is dropped.
	if _, err := d.command(ctx, abi.OpResetState, nil, 0); err != nil {
		return nil, err
	}
	return d, nil
}

// Config is the config space as read by Open.
func (d *Device) Config() abi.Config { return d.cfg }

// Limits are the device's advertised limits.
func (d *Device) Limits() abi.Limits { return d.cfg.Limits }

// Refresh re-reads config space (the status word changes when the device
// becomes live or is reset).
func (d *Device) Refresh(ctx context.Context) error {
	b, err := d.t.ReadConfig(ctx)
	if err != nil {
		return err
	}
	var cfg abi.Config
	if err := cfg.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("guestdriver: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("guestdriver: %w", err)
	}
	d.cfg = cfg
	return nil
}

// command sends op with payload and returns the response payload, which
// must be exactly respSize bytes. A non-OK status is an *abi.StatusError.
func (d *Device) command(ctx context.Context, op abi.Opcode, payload []byte, respSize int) ([]byte, error) {
	req := abi.AppendRequest(make([]byte, 0, abi.RequestHeaderSize+len(payload)), op, payload)
	resp, err := d.t.Command(ctx, req, uint32(abi.ResponseHeaderSize+respSize))
	if err != nil {
		return nil, fmt.Errorf("guestdriver: %v: %w", op, err)
	}
	status, body, err := abi.DecodeResponse(resp)
	if err != nil {
		return nil, fmt.Errorf("guestdriver: %v: %w", op, err)
	}
	if err := abi.CheckStatus(op, status); err != nil {
		return nil, err
	}
	if len(body) != respSize {
		return nil, fmt.Errorf("guestdriver: %v: %d-byte response, want %d: %w", op, len(body), respSize, abi.ErrBadLength)
	}
	return body, nil
}

// QueryDevice returns the device attributes (QUERY_DEVICE).
func (d *Device) QueryDevice(ctx context.Context) (abi.DeviceAttr, error) {
	var a abi.DeviceAttr
	body, err := d.command(ctx, abi.OpQueryDevice, nil, abi.DeviceAttrSize)
	if err != nil {
		return a, err
	}
	if err := a.UnmarshalBinary(body); err != nil {
		return a, fmt.Errorf("guestdriver: %v: %w", abi.OpQueryDevice, err)
	}
	return a, nil
}

// Doorbells returns the doorbell region when the device placed it in
// shared memory (config status DOORBELL_SHMEM), checked to be at least as
// large as the layout config space advertises. In the guest-RAM fallback
// it returns ErrNoDoorbells.
func (d *Device) Doorbells() (guestmem.View, error) {
	if d.cfg.Status&abi.ConfigStatusDoorbellShmem == 0 {
		return guestmem.View{}, fmt.Errorf("device status %#x: %w", d.cfg.Status, ErrNoDoorbells)
	}
	v, err := d.t.Doorbells()
	if err != nil {
		return guestmem.View{}, err
	}
	if v.Len() < d.cfg.Doorbell.Size() {
		return guestmem.View{}, fmt.Errorf("doorbell region of %d bytes, layout needs %d: %w", v.Len(), d.cfg.Doorbell.Size(), ErrNoDoorbells)
	}
	return v.Sub(0, d.cfg.Doorbell.Size())
}
