package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/api"
	stellardev "github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestFactoryClassifiesBadLimits(t *testing.T) {
	_, err := StellarDevice(context.Background(), api.DeviceSpec{Name: "x", Limits: json.RawMessage(`{"max_sge": 4000000000}`)}, Shared{}, nil)
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("out-of-range limits: %v", err)
	}
	inst, err := StellarDevice(context.Background(), api.DeviceSpec{Name: "x"}, Shared{}, nil)
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
	inst, err := StellarDevice(context.Background(), api.DeviceSpec{Name: "x"}, sh, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Device.Close() })
	_, err = StellarDevice(context.Background(), api.DeviceSpec{Name: "x"}, sh, nil)
	if !errors.Is(err, api.ErrExists) || !errors.Is(err, stellardev.ErrGIDInUse) || httpStatus(err) != http.StatusConflict {
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
	cfg.Factory = func(ctx context.Context, spec api.DeviceSpec, sh Shared, log *slog.Logger) (Instance, error) {
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
		if _, err := m.CreateDevice(ctx, api.DeviceSpec{Name: name}); err != nil {
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
		spec := api.DeviceSpec{Name: "pin-" + mode}
		if mode != "" {
			spec.Pin = &api.PinSpec{Mode: mode, Budget: 64 << 20}
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
	if _, err := StellarDevice(context.Background(), api.DeviceSpec{Name: "x", Pin: &api.PinSpec{Mode: "eager"}}, shared, nil); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad pin mode: %v", err)
	}
}

// TestPinModesAreTheAPIs: the pin modes a spec names (api, which
// confcheck checks specs against) are pvdma's, and so is the pinning
// granule that bounds a device budget.
func TestPinModesAreTheAPIs(t *testing.T) {
	modes := map[pvdma.Mode]string{pvdma.ModeOnDemand: api.PinOnDemand, pvdma.ModeAtRegMR: api.PinAtRegMR, pvdma.ModeAll: api.PinAll}
	for m, name := range modes {
		if m.String() != name {
			t.Errorf("pvdma mode %v is %q in the API", m, name)
		}
		spec := api.DeviceSpec{Name: "x", Pin: &api.PinSpec{Mode: name}}
		if got, err := pinMode(spec); err != nil || got != m {
			t.Errorf("pin mode %q: %v %v", name, got, err)
		}
	}
	if pvdma.ChunkSize != api.PinChunkSize {
		t.Errorf("pvdma.ChunkSize %d, api.PinChunkSize %d", pvdma.ChunkSize, api.PinChunkSize)
	}
}

// TestAPIPeersAreRemotes: the API shows the fabric's peers as
// fabric/remote writes them, and leaves none as null.
func TestAPIPeersAreRemotes(t *testing.T) {
	p, err := remote.ParsePeer("fd00:0:0:2::/64=10.0.0.2:4791")
	if err != nil {
		t.Fatal(err)
	}
	got := apiPeers([]remote.Peer{p})
	if len(got) != 1 || got[0].String() != p.String() {
		t.Fatalf("peer %v in the API: %v", p, got)
	}
	a, _ := json.Marshal(got[0])
	r, _ := json.Marshal(p)
	if string(a) != string(r) {
		t.Errorf("peer JSON %s, fabric/remote's %s", a, r)
	}
	if apiPeers(nil) != nil || apiPeers([]remote.Peer{}) == nil {
		t.Error("nil and empty peers differ in JSON (null and [])")
	}
}
