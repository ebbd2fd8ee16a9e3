package daemon_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/daemon/daemontest"
	"github.com/vstellar/vstellar/fabric/remote"
)

func fabricSpec(t *testing.T) *daemon.FabricSpec {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("  0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &daemon.FabricSpec{
		Listen:     netip.MustParseAddrPort("127.0.0.1:0"),
		GIDPrefix:  netip.MustParsePrefix("fd00:0:0:1::/64"),
		Peers:      []remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: netip.MustParseAddrPort("127.0.0.1:4792")}},
		SecretFile: key,
	}
}

// TestFabricConfig: the "fabric" object parses from JSON, and every bad
// field is refused with ErrInvalid, naming the field.
func TestFabricConfig(t *testing.T) {
	cfg, err := daemon.ParseConfig(strings.NewReader(`{"fabric": {"listen": "10.0.0.1:4791", "gid_prefix": "fd00:0:0:1::/64",
		"peers": [{"gid_prefix": "fd00:0:0:2::/64", "address": "10.0.0.2:4791"}], "secret_file": "/k", "mtu": 9000},
		"devices": [{"name": "a", "tenant": 7}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if f := cfg.Fabric; f == nil || f.Listen.Port() != 4791 || f.Peers[0].Addr.Addr() != netip.MustParseAddr("10.0.0.2") || f.MTU != 9000 || cfg.Devices[0].Tenant != 7 {
		t.Fatalf("parsed %+v", cfg.Fabric)
	}
	cfg.Factory = (&daemontest.Factory{}).New
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*daemon.FabricSpec){
		"gid_prefix":       func(f *daemon.FabricSpec) { f.GIDPrefix = netip.MustParsePrefix("fd00::/48") },
		"link-local":       func(f *daemon.FabricSpec) { f.GIDPrefix = netip.MustParsePrefix("fe80::/64") },
		"host bits":        func(f *daemon.FabricSpec) { f.GIDPrefix = netip.MustParsePrefix("fd00::1/64") },
		"secret_file":      func(f *daemon.FabricSpec) { f.SecretFile = "" },
		"recovery":         func(f *daemon.FabricSpec) { f.Recovery = "tahoe" },
		"overlap":          func(f *daemon.FabricSpec) { f.Peers[0].GIDPrefix = netip.MustParsePrefix("fd00::/16") },
		"peer port":        func(f *daemon.FabricSpec) { f.Peers[0].Addr = netip.MustParseAddrPort("10.0.0.2:0") },
		"listen":           func(f *daemon.FabricSpec) { f.Listen = netip.AddrPort{} },
		"mtu":              func(f *daemon.FabricSpec) { f.MTU = 100 },
		"paths":            func(f *daemon.FabricSpec) { f.Paths = 100000 },
		"duplicate prefix": func(f *daemon.FabricSpec) { f.Peers = append(f.Peers, f.Peers[0]) },
	} {
		c := cfg
		f := *cfg.Fabric
		f.Peers = append([]remote.Peer(nil), f.Peers...)
		mutate(&f)
		c.Fabric = &f
		if err := c.Validate(); !errors.Is(err, daemon.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestFabricStarts: a configured fabric opens with the first device and
// stops with the daemon; the devices get it and the host's prefix; a
// secret file that is missing or too short fails the device's creation.
func TestFabricStarts(t *testing.T) {
	var got daemon.Shared
	f := &daemontest.Factory{}
	cfg := testConfig(t, f)
	cfg.Fabric = fabricSpec(t)
	cfg.Factory = func(ctx context.Context, spec daemon.DeviceSpec, sh daemon.Shared, log *slog.Logger) (daemon.Instance, error) {
		got = sh
		return f.New(ctx, spec, sh, log)
	}
	m := newManager(t, cfg)
	if _, err := m.CreateDevice(context.Background(), daemon.DeviceSpec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	fab := m.Fabric()
	if fab == nil || got.Fabric != fab || got.GIDPrefix != cfg.Fabric.GIDPrefix || !fab.Addr().IsValid() {
		t.Fatalf("shared %+v, fabric %v", got, fab)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	for _, secret := range []string{"", "short"} {
		cfg := testConfig(t, f)
		cfg.Fabric = fabricSpec(t)
		if secret == "" {
			cfg.Fabric.SecretFile += ".missing"
		} else if err := os.WriteFile(cfg.Fabric.SecretFile, []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
		m := newManager(t, cfg)
		if _, err := m.CreateDevice(context.Background(), daemon.DeviceSpec{Name: "b"}); err == nil || m.Fabric() != nil {
			t.Fatalf("secret %q: device created, fabric %v", secret, m.Fabric())
		}
	}
}
