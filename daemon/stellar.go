package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	stellardev "github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// StellarDevice is the DeviceFactory vstellard runs: a vStellar device
// model (package device) served by a vhost-user back-end (package vhost).
// Every device of the daemon is on the daemon's fabric, so the VMs it
// serves reach each other.
func StellarDevice(_ context.Context, spec DeviceSpec, shared Shared, log *slog.Logger) (Instance, error) {
	limits, err := parseLimits(spec.Limits)
	if err != nil {
		return Instance{}, err
	}
	mode, err := spec.PinMode()
	if err != nil {
		return Instance{}, err
	}
	cfg := stellardev.Config{Name: spec.Name, Limits: limits, Fabric: shared.Fabric, Pins: shared.Pins, PinMode: mode,
		GIDPrefix: shared.GIDPrefix, Tenant: spec.Tenant}
	if spec.Pin != nil {
		cfg.PinBudget = spec.Pin.Budget
	}
	dev, err := stellardev.New(cfg, log)
	switch {
	case errors.Is(err, abi.ErrBadValue):
		// Limits out of range: the operator's error (HTTP 400).
		return Instance{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, stellardev.ErrGIDInUse):
		// The GID (fe80:: + a hash of the name) is another device's on
		// the daemon's fabric: a conflict (HTTP 409) the operator
		// resolves by naming the device differently. Guests cannot add
		// link-local GIDs, so only a device can hold it.
		return Instance{}, fmt.Errorf("%w: its GID is another device's (choose another name): %w", ErrExists, err)
	case err != nil:
		return Instance{}, err
	}
	be := vhost.NewBackend(dev, vhost.Options{Name: spec.Name, Logger: log, Withhold: withheldProtocolFeatures})
	return Instance{Backend: be, Device: dev}, nil
}

// withheldProtocolFeatures: QEMU 11.1.3 with CONFIGURE_MEM_SLOTS crashes
// (a NULL dereference in its ADD/REM_MEM_REG bookkeeping) when a guest
// reset takes the shared-memory BAR's mapping out of the memory table,
// which it reports to the back-end as memory (seen in e2e/realvm's
// TestGuestReboot). With SET_MEM_TABLE it does not; the cost is QEMU's
// limit of 8 memory regions per table, which a VM without memory hot-plug
// never reaches.
const withheldProtocolFeatures = 1 << vhost.ProtoConfigureMemSlots

// limitsJSON is the JSON form of a device's "limits" object. Absent or
// zero fields take abi.DefaultLimits.
// limitsJSON is abi.Limits with its JSON names: the same fields in the
// same order, so each converts to the other (which the compiler checks).
type limitsJSON struct {
	MaxQP         uint32 `json:"max_qp"`
	MaxCQ         uint32 `json:"max_cq"`
	MaxMR         uint32 `json:"max_mr"`
	MaxPD         uint32 `json:"max_pd"`
	MaxAH         uint32 `json:"max_ah"`
	MaxQPWR       uint32 `json:"max_qp_wr"`
	MaxCQE        uint32 `json:"max_cqe"`
	MaxSGE        uint32 `json:"max_sge"`
	MaxInlineData uint32 `json:"max_inline_data"`
	MaxQPRdAtom   uint32 `json:"max_qp_rd_atom"`
	MaxGID        uint32 `json:"max_gid"`
	MaxMRSize     uint64 `json:"max_mr_size"`
	PageSizeCap   uint64 `json:"page_size_cap"`
}

// parseLimits decodes a spec's limits, refusing unknown fields. Their
// values are checked by device.New.
func parseLimits(raw json.RawMessage) (abi.Limits, error) {
	var l limitsJSON
	if len(raw) > 0 {
		if err := DecodeStrict(raw, &l); err != nil {
			return abi.Limits{}, fmt.Errorf("%w: limits: %w", ErrInvalid, err)
		}
	}
	return abi.Limits(l), nil
}
