package guestdriver

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Device is an opened vStellar device. Its methods are safe for
// concurrent use. Close it to stop event delivery.
type Device struct {
	t   Transport
	log *slog.Logger
	mem *dmaPool

	cfgMu sync.Mutex
	cfg   abi.Config
	gid0  abi.GID // GID index 0, read at Open

	dbMu sync.Mutex // serialises doorbell setup (which sends a command)
	db   *doorbells // set up on first use (see doorbells)

	mu  sync.Mutex
	cqs map[uint32]*CQ // live CQs by CQN, for event dispatch
	ev  *eventPump     // never nil after Open
}

// Open reads and validates the device's config space, takes the device
// over from whatever driver ran before (RESET_STATE drops every PD, CQ,
// QP, MR and AH it left, and the doorbell area of the guest-RAM fallback)
// and starts receiving events. The device must be started (DRIVER_OK);
// Open waits for it to go live.
// A previous Device on the same transport must be closed first.
func Open(ctx context.Context, t Transport) (*Device, error) {
	cfg, err := readConfig(ctx, t)
	if err != nil {
		return nil, err
	}
	d := &Device{
		t:   t,
		log: slog.Default().With("component", "guestdriver"),
		mem: newDMAPool(t),
		cfg: cfg,
		cqs: map[uint32]*CQ{},
	}
	// A driver that probes owns the device from scratch: whatever a
	// previous driver (before a guest reboot) created is dropped.
	if _, err := d.command(ctx, abi.OpResetState, nil, 0); err != nil {
		return nil, err
	}
	// The device answers commands only once it is live, and it may go
	// live after DRIVER_OK (QEMU's generic device starts it when the
	// rings start, and mapping the doorbells takes a round trip to the
	// VMM): only now does the status word say where the doorbells are.
	if err := d.Refresh(ctx); err != nil {
		return nil, err
	}
	// The device's own address: link-local, or in its host's prefix on a
	// cross-host fabric, so it is asked for, not derived from the GUID.
	g, err := d.QueryGID(ctx, 0)
	if err != nil {
		return nil, err
	}
	d.gid0 = g.GID
	if d.ev, err = startEvents(ctx, d); err != nil {
		return nil, err
	}
	return d, nil
}

func readConfig(ctx context.Context, t Transport) (abi.Config, error) {
	var cfg abi.Config
	b, err := t.ReadConfig(ctx)
	if err != nil {
		return cfg, err
	}
	if err := cfg.UnmarshalBinary(b); err != nil {
		return cfg, fmt.Errorf("guestdriver: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("guestdriver: %w", err)
	}
	return cfg, nil
}

// Close stops event delivery: WaitEvent and CQ.Wait return ErrClosed.
// Objects created through the device stay on the device (a later Open's
// RESET_STATE drops them). Close is idempotent.
func (d *Device) Close() error {
	d.ev.stop()
	return nil
}

// Config is the config space as last read (by Open or Refresh).
func (d *Device) Config() abi.Config {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	return d.cfg
}

// Limits are the device's advertised limits.
func (d *Device) Limits() abi.Limits { return d.Config().Limits }

// Refresh re-reads config space (the status word changes when the device
// becomes live or is reset).
func (d *Device) Refresh(ctx context.Context) error {
	cfg, err := readConfig(ctx, d.t)
	if err != nil {
		return err
	}
	d.cfgMu.Lock()
	d.cfg = cfg
	d.cfgMu.Unlock()
	return nil
}

// Alloc allocates size bytes of guest DMA memory aligned to align (a power
// of two; buffers are at least cache-line aligned, and page-aligned from a
// page up), zeroed: memory for MRs.
func (d *Device) Alloc(size, align uint64) (Buffer, error) { return d.mem.alloc(size, align) }

// Free returns memory from Alloc for reuse. No MR may cover it any more.
func (d *Device) Free(b Buffer) { d.mem.release(b) }

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

// call sends op with the payload struct req (nil for none) and decodes
// the response into the payload struct resp (nil for none). Responses
// are decoded without abi's request validation: the device may set
// fields a request must leave zero (QUERY_QP's sq_draining).
func (d *Device) call(ctx context.Context, op abi.Opcode, req, resp any) error {
	var payload []byte
	if req != nil {
		payload = abi.EncodePayload(nil, req)
	}
	size := 0
	if resp != nil {
		size = binary.Size(resp)
	}
	body, err := d.command(ctx, op, payload, size)
	if err != nil {
		return err
	}
	if resp != nil {
		if _, err := binary.Decode(body, binary.LittleEndian, resp); err != nil {
			return fmt.Errorf("guestdriver: %v response: %w", op, err)
		}
	}
	return nil
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
// it returns ErrNoDoorbells (the driver's doorbells are then an area of
// guest RAM it registered itself).
func (d *Device) Doorbells() (guestmem.View, error) {
	cfg := d.Config()
	if cfg.Status&abi.ConfigStatusDoorbellShmem == 0 {
		return guestmem.View{}, fmt.Errorf("device status %#x: %w", cfg.Status, ErrNoDoorbells)
	}
	v, err := d.t.Doorbells()
	if err != nil {
		return guestmem.View{}, err
	}
	if v.Len() < cfg.Doorbell.Size() {
		return guestmem.View{}, fmt.Errorf("doorbell region of %d bytes, layout needs %d: %w", v.Len(), cfg.Doorbell.Size(), ErrNoDoorbells)
	}
	return v.Sub(0, cfg.Doorbell.Size())
}
