package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	stellardev "github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestParseLimits(t *testing.T) {
	l, err := parseLimits(json.RawMessage(`{"max_qp": 8, "max_mr_size": 4096}`))
	if err != nil || l.MaxQP != 8 || l.MaxMRSize != 4096 || l.MaxCQ != 0 {
		t.Fatalf("%+v %v", l, err)
	}
	// The one size among the limits takes a unit too.
	l, err = parseLimits(json.RawMessage(`{"max_mr_size": "1G"}`))
	if err != nil || l.MaxMRSize != 1<<30 {
		t.Fatalf("max_mr_size 1G: %+v %v", l, err)
	}
	if _, err := parseLimits(json.RawMessage(`{"max_mr_size": "1X"}`)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "limits.max_mr_size") {
		t.Fatalf("max_mr_size 1X: %v", err)
	}
	if _, err := parseLimits(json.RawMessage(`{"max_mr_size": "8P"}`)); err == nil {
		t.Fatal("max_mr_size 8P accepted")
	}
	if _, err := parseLimits(json.RawMessage(`{"max_qps": 8}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown field: %v", err)
	}
	if _, err := parseLimits(nil); err != nil {
		t.Fatal(err)
	}
	// Every field of abi.Limits has a JSON name: set all of them and check
	// that none stays zero.
	var all map[string]any
	b, _ := json.Marshal(limitsJSON{})
	json.Unmarshal(b, &all)
	for k := range all {
		all[k] = 1
	}
	all["page_size_cap"] = 4096 // 4 KiB pages are required
	b, _ = json.Marshal(all)
	l, err = parseLimits(b)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("abi.Limits.%s has no JSON field in limitsJSON", v.Type().Field(i).Name)
		}
	}
}

func TestFactoryClassifiesBadLimits(t *testing.T) {
	_, err := StellarDevice(context.Background(), DeviceSpec{Name: "x", Limits: json.RawMessage(`{"max_sge": 4000000000}`)}, Shared{}, nil)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("out-of-range limits: %v", err)
	}
	inst, err := StellarDevice(context.Background(), DeviceSpec{Name: "x"}, Shared{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Device.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFactoryGIDConflict: a device whose GID another device on the
// daemon's fabric holds is a conflict (409), not an internal error.
func TestFactoryGIDConflict(t *testing.T) {
	sh := Shared{Fabric: fabric.NewLocal()}
	inst, err := StellarDevice(context.Background(), DeviceSpec{Name: "x"}, sh, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Device.Close() })
	_, err = StellarDevice(context.Background(), DeviceSpec{Name: "x"}, sh, nil)
	if !errors.Is(err, ErrExists) || !errors.Is(err, stellardev.ErrGIDInUse) || httpStatus(err) != http.StatusConflict {
		t.Fatalf("second device with the same GID: %v (HTTP %d)", err, httpStatus(err))
	}
}

// TestStellarDevicesShareTheDaemonFabric: the Manager hands one fabric to
// every device it creates, and each Stellar device is on it under its own
// GID, so the VMs of one daemon reach each other. Destroying a device
// takes it off.
func TestStellarDevicesShareTheDaemonFabric(t *testing.T) {
	dir, err := os.MkdirTemp("", "vsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var (
		mu      sync.Mutex
		shareds []Shared
		devs    []*stellardev.Device
	)
	cfg := DefaultConfig()
	cfg.RunDir = dir
	cfg.Factory = func(ctx context.Context, spec DeviceSpec, sh Shared, log *slog.Logger) (Instance, error) {
		inst, err := StellarDevice(ctx, spec, sh, log)
		if err == nil {
			mu.Lock()
			shareds = append(shareds, sh)
			devs = append(devs, inst.Device.(*stellardev.Device))
			mu.Unlock()
		}
		return inst, err
	}
	m, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"vm-a", "vm-b"} {
		if _, err := m.CreateDevice(ctx, DeviceSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.DestroyDevice(ctx, name) })
	}
	if len(shareds) != 2 || shareds[0].Fabric == nil || shareds[0].Fabric != shareds[1].Fabric {
		t.Fatalf("fabrics %+v", shareds)
	}
	fab := shareds[0].Fabric
	for _, d := range devs {
		if _, err := fab.Register(d.GID(), nil); !errors.Is(err, fabric.ErrGIDInUse) {
			t.Fatalf("device %s is not on the daemon's fabric: %v", d.Name(), err)
		}
	}
	if err := m.DestroyDevice(ctx, "vm-a"); err != nil {
		t.Fatal(err)
	}
	unreg, err := fab.Register(devs[0].GID(), nil)
	if err != nil {
		t.Fatalf("destroyed device still on the fabric: %v", err)
	}
	unreg()
}

// TestFactoryPinSpec: the spec's pin mode reaches the device (it tells
// the driver whether REG_MR is cheap) and a bad one is the operator's
// error.
func TestFactoryPinSpec(t *testing.T) {
	shared := Shared{Pins: pvdma.NewPool(0, nil)}
	for mode, onDemand := range map[string]bool{"": true, "on-demand": true, "at-reg-mr": false, "all": false} {
		spec := DeviceSpec{Name: "pin-" + mode}
		if mode != "" {
			spec.Pin = &PinSpec{Mode: mode, Budget: 64 << 20}
		}
		inst, err := StellarDevice(context.Background(), spec, shared, nil)
		if err != nil {
			t.Fatal(err)
		}
		dev := inst.Device.(*stellardev.Device)
		attr := dev.Attr()
		if got := attr.DeviceCapFlags&abi.DevCapOnDemandPinning != 0; got != onDemand {
			t.Errorf("mode %q: ON_DEMAND_PINNING %v, want %v", mode, got, onDemand)
		}
		if dev.Pins().Mode().String() != cmp.Or(mode, "on-demand") {
			t.Errorf("mode %q: device pins %v", mode, dev.Pins().Mode())
		}
		inst.Device.Close()
	}
	if _, err := StellarDevice(context.Background(), DeviceSpec{Name: "x", Pin: &PinSpec{Mode: "eager"}}, shared, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad pin mode: %v", err)
	}
}
