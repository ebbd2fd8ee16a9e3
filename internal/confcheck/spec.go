package confcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/units"
	"github.com/vstellar/vstellar/virtio/abi"
)

// ValidateSpec checks a device spec: its name, pin policy and limits,
// as vstellard does before creating the device and vstellarctl before
// sending it. Errors are *ConfigError (so wrap api.ErrInvalid) with
// paths inside the spec ("limits.max_qp"); several limits out of range
// are reported together.
func ValidateSpec(s api.DeviceSpec) error {
	if err := api.ValidateName(s.Name); err != nil {
		return UnderPath("name", err)
	}
	if err := CheckPinMode(s); err != nil {
		return err
	}
	if s.Pin != nil && s.Pin.Budget != 0 {
		switch {
		case s.Pin.Mode == api.PinAll:
			// Mode all pins whole regions against the host budget only
			// (pvdma): a device budget would silently do nothing.
			return BadValue("pin.budget_bytes", "has no effect with mode all, which pins all guest memory against the host's pin_budget_bytes")
		case s.Pin.Budget < api.PinChunkSize:
			return BadValue("pin.budget_bytes", "%d is below one pinning chunk (%s)", s.Pin.Budget, units.FormatSize(api.PinChunkSize))
		}
	}
	_, err := ParseLimits(s.Limits)
	return err
}

// CheckPinMode checks the spec's pin mode: unset (on demand) or one of
// api.PinOnDemand, api.PinAtRegMR and api.PinAll.
func CheckPinMode(s api.DeviceSpec) error {
	if s.Pin == nil {
		return nil
	}
	switch s.Pin.Mode {
	case "", api.PinOnDemand, api.PinAtRegMR, api.PinAll:
		return nil
	}
	return BadValue("pin.mode", "%q: want on-demand, at-reg-mr or all", s.Pin.Mode)
}

// limitsInput is what a spec's "limits" may say: api.Limits with the one
// size among them also taken with a unit ("1G").
type limitsInput struct {
	api.Limits
	MaxMRSize units.Size `json:"max_mr_size"`
}

// ParseLimits decodes a spec's limits, refusing unknown fields, zeros
// (leave a field out for its default) and values above
// abi.CeilingLimits. Errors are *ConfigError with paths under "limits"
// and offsets counted from raw; all the out-of-range fields are named
// in one error.
func ParseLimits(raw json.RawMessage) (abi.Limits, error) {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return abi.Limits{}, nil
	}
	var in limitsInput
	if err := DecodeStrict(raw, &in); err != nil {
		return abi.Limits{}, UnderPath("limits", err)
	}
	l := in.Limits
	l.MaxMRSize = uint64(in.MaxMRSize)
	var errs []error
	got, ceil := reflect.ValueOf(l), reflect.ValueOf(api.Limits(abi.CeilingLimits))
	for _, v := range Index(raw) {
		if len(v.Keys) != 1 {
			continue
		}
		i := limitsField(v.Path)
		if i < 0 {
			continue
		}
		n, c := got.Field(i).Uint(), ceil.Field(i).Uint()
		name := v.Path
		switch {
		case string(raw[v.Start:v.End]) == "null":
		case name == "page_size_cap" && n&(1<<12) == 0:
			errs = append(errs, &ConfigError{Path: name, Err: fmt.Errorf("%#x lacks 4 KiB pages (bit 12)", n), Offset: v.Start})
		case n == 0:
			errs = append(errs, &ConfigError{Path: name, Err: errors.New("0 is out of range: leave the key out for the default"), Offset: v.Start})
		case n > c:
			errs = append(errs, &ConfigError{Path: name, Err: fmt.Errorf("%d is out of range (at most %d)", n, c), Offset: v.Start})
		}
	}
	switch len(errs) {
	case 0:
		return abi.Limits(l), nil
	case 1:
		return abi.Limits{}, UnderPath("limits", errs[0])
	}
	return abi.Limits{}, &ConfigError{Path: "limits", Err: errorList(errs), Offset: errs[0].(*ConfigError).Offset}
}

// limitsField is the index in api.Limits of the field JSON names key
// (case-insensitive, as encoding/json matches), or -1.
func limitsField(key string) int {
	t := reflect.TypeFor[api.Limits]()
	for i := range t.NumField() {
		if strings.EqualFold(t.Field(i).Tag.Get("json"), key) {
			return i
		}
	}
	return -1
}
