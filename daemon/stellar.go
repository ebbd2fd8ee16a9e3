package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	stellardev "github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/internal/units"
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
		// Limits the checks above let through (a combination): the
		// operator's error (HTTP 400), on one line without the name the
		// caller gives.
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("device %q: ", spec.Name))
		return Instance{}, &ConfigError{Err: errors.New(strings.ReplaceAll(msg, "\n", "; ")), off: -1}
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

// limitsInput is what a spec's "limits" may say: limitsJSON with the one
// size among them also taken with a unit ("1G").
type limitsInput struct {
	limitsJSON
	MaxMRSize units.Size `json:"max_mr_size"`
}

// parseLimits decodes a spec's limits, refusing unknown fields, zeros
// (leave a field out for its default) and values above
// abi.CeilingLimits. Errors are *ConfigError with paths under "limits"
// and offsets counted from raw; all the out-of-range fields are named
// in one error.
func parseLimits(raw json.RawMessage) (abi.Limits, error) {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return abi.Limits{}, nil
	}
	var in limitsInput
	if err := DecodeStrict(raw, &in); err != nil {
		return abi.Limits{}, underPath("limits", err)
	}
	l := in.limitsJSON
	l.MaxMRSize = uint64(in.MaxMRSize)
	var errs []error
	got, ceil := reflect.ValueOf(l), reflect.ValueOf(limitsJSON(abi.CeilingLimits))
	for _, v := range indexJSON(raw) {
		if len(v.keys) != 1 {
			continue
		}
		i := limitsField(v.path)
		if i < 0 {
			continue
		}
		n, c := got.Field(i).Uint(), ceil.Field(i).Uint()
		name := v.path
		switch {
		case string(raw[v.start:v.end]) == "null":
		case name == "page_size_cap" && n&(1<<12) == 0:
			errs = append(errs, &ConfigError{Path: name, Err: fmt.Errorf("%#x lacks 4 KiB pages (bit 12)", n), off: v.start})
		case n == 0:
			errs = append(errs, &ConfigError{Path: name, Err: errors.New("0 is out of range: leave the key out for the default"), off: v.start})
		case n > c:
			errs = append(errs, &ConfigError{Path: name, Err: fmt.Errorf("%d is out of range (at most %d)", n, c), off: v.start})
		}
	}
	switch len(errs) {
	case 0:
		return abi.Limits(l), nil
	case 1:
		return abi.Limits{}, underPath("limits", errs[0])
	}
	return abi.Limits{}, &ConfigError{Path: "limits", Err: errorList(errs), off: errs[0].(*ConfigError).off}
}

// limitsField is the index in limitsJSON of the field JSON names key
// (case-insensitive, as encoding/json matches), or -1.
func limitsField(key string) int {
	t := reflect.TypeFor[limitsJSON]()
	for i := range t.NumField() {
		if strings.EqualFold(t.Field(i).Tag.Get("json"), key) {
			return i
		}
	}
	return -1
}
