package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/vstellar/vstellar/api"
	stellardev "github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/internal/confcheck"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// StellarDevice is the DeviceFactory vstellard runs: a vStellar device
// model (package device) served by a vhost-user back-end (package vhost).
// Every device of the daemon is on the daemon's fabric, so the VMs it
// serves reach each other.
func StellarDevice(_ context.Context, spec api.DeviceSpec, shared Shared, log *slog.Logger) (Instance, error) {
	limits, err := confcheck.ParseLimits(spec.Limits)
	if err != nil {
		return Instance{}, err
	}
	mode, err := pinMode(spec)
	if err != nil {
		return Instance{}, err
	}
	cfg := stellardev.Config{Name: spec.Name, Limits: limits, Fabric: shared.Fabric, Pins: shared.Pins, PinMode: mode,
		GIDPrefix: shared.GIDPrefix, Tenant: spec.Tenant, Cores: shared.Cores}
	if spec.Pin != nil {
		cfg.PinBudget = spec.Pin.Budget
	}
	dev, err := stellardev.New(cfg, log)
	switch {
	case errors.Is(err, abi.ErrBadValue):
		// Limits the checks above let through (a combination): the
		// operator's error (HTTP 400), on one line without the name the
		// caller gives.
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("device %q: ", spec.Name))
		return Instance{}, &confcheck.ConfigError{Err: errors.New(strings.ReplaceAll(msg, "\n", "; ")), Offset: -1}
	case errors.Is(err, stellardev.ErrGIDInUse):
		// The GID (fe80:: + a hash of the name) is another device's on
		// the daemon's fabric: a conflict (HTTP 409) the operator
		// resolves by naming the device differently. Guests cannot add
		// link-local GIDs, so only a device can hold it.
		return Instance{}, fmt.Errorf("%w: its GID is another device's (choose another name): %w", api.ErrExists, err)
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

// pinMode is the spec's pin mode (on demand if unset). The API's names
// for the modes are pvdma's (TestPinModesAreTheAPIs).
func pinMode(s api.DeviceSpec) (pvdma.Mode, error) {
	if s.Pin == nil || s.Pin.Mode == "" {
		return pvdma.ModeOnDemand, nil
	}
	if err := confcheck.CheckPinMode(s); err != nil {
		return 0, err
	}
	return pvdma.ParseMode(s.Pin.Mode)
}
