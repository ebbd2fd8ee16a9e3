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

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
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
		"interface name":   func(f *daemon.FabricSpec) { f.Interface = "eth0:1" },
		"interface, no listen": func(f *daemon.FabricSpec) {
			f.Interface, f.Listen = "eth0", netip.AddrPort{}
		},
	} {
		c := cfg
		f := *cfg.Fabric
		f.Peers = append([]remote.Peer(nil), f.Peers...)
		mutate(&f)
		c.Fabric = &f
		if err := c.Validate(); !errors.Is(err, api.ErrInvalid) {
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
	cfg.Factory = func(ctx context.Context, spec api.DeviceSpec, sh daemon.Shared, log *slog.Logger) (daemon.Instance, error) {
		got = sh
		return f.New(ctx, spec, sh, log)
	}
	m := newManager(t, cfg)
	if _, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "a"}); err != nil {
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
		if _, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "b"}); err == nil || m.Fabric() != nil {
			t.Fatalf("secret %q: device created, fabric %v", secret, m.Fabric())
		}
	}
}

// TestFabricListenForms: "listen" takes ip:port, [ipv6]:port and, for
// binding by interface, :port (0.0.0.0:port); anything else, and an
// unknown field inside "fabric", is refused with ErrInvalid.
func TestFabricListenForms(t *testing.T) {
	parse := func(fabric string) (daemon.Config, error) {
		return daemon.ParseConfig(strings.NewReader(`{"fabric": {` + fabric + `, "gid_prefix": "fd00:0:0:1::/64", "secret_file": "/k"}}`))
	}
	for listen, want := range map[string]string{":4791": "0.0.0.0:4791", "0.0.0.0:1": "0.0.0.0:1", "[::]:4791": "[::]:4791", "10.1.2.3:9": "10.1.2.3:9"} {
		cfg, err := parse(`"interface": "eth1", "listen": "` + listen + `"`)
		if err != nil || cfg.Fabric.Listen.String() != want || cfg.Fabric.Interface != "eth1" || cfg.Fabric.GIDPrefix.Bits() != 64 {
			t.Errorf("listen %q: %+v %v, want %s", listen, cfg.Fabric, err, want)
		}
	}
	for _, bad := range []string{`"listen": ":"`, `"listen": ":65536"`, `"listen": ":-1"`, `"listen": "eth1:4791"`, `"listen": 4791`, `"listen": ":1", "interfce": "eth1"`} {
		if _, err := parse(bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	// Without "listen" (and without an interface) the spec is refused
	// when validated.
	cfg, err := parse(`"mtu": 9000`)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Factory = (&daemontest.Factory{}).New
	if err := cfg.Validate(); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "Listen") {
		t.Fatalf("no listen: %v", err)
	}
	// The forms ParseListen takes, and what it refuses.
	for in, want := range map[string]string{":0": "0.0.0.0:0", "[fd00::1]:7": "[fd00::1]:7"} {
		if ap, err := daemon.ParseListen(in); err != nil || ap.String() != want {
			t.Errorf("ParseListen(%q) = %v, %v", in, ap, err)
		}
	}
	for _, in := range []string{"", ":", ":x", "4791", "1.2.3.4"} {
		if ap, err := daemon.ParseListen(in); err == nil {
			t.Errorf("ParseListen(%q) = %v", in, ap)
		}
	}
}

// TestFabricInterface: given only an interface name and a port, the
// fabric binds the interface's address and takes its MTU, in the
// namespace ListenIn runs it in (a host of a two-namespace testbed); an
// interface that is not there, or has no address of the family asked
// for, fails the device's creation with ErrInvalid.
func TestFabricInterface(t *testing.T) {
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("network namespaces unavailable under CI=true: %v", err)
		}
		t.Skipf("network namespaces unavailable (run as root): %v", err)
	}
	bed, err := netlab.TwoHost(context.Background(), netlab.Options{Prefix: "vsdaemon", MTU: 4000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Error(err)
		}
	})
	h := bed.Hosts()[0]
	for _, c := range []struct {
		name, ifc, listen string
		ok                bool
	}{
		{"by interface", h.Iface(), ":0", true},
		{"missing", "nosuch0", ":0", false},
		{"no IPv6", h.Iface(), "[::]:0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &daemontest.Factory{}
			cfg := testConfig(t, f)
			cfg.Fabric = fabricSpec(t)
			cfg.Fabric.Interface, cfg.Fabric.Peers = c.ifc, nil // IPv4 peers would refuse [::]
			if cfg.Fabric.Listen, err = daemon.ParseListen(c.listen); err != nil {
				t.Fatal(err)
			}
			cfg.ListenIn = h.Do
			m := newManager(t, cfg)
			_, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "a"})
			if !c.ok {
				if !errors.Is(err, api.ErrInvalid) || !errors.Is(err, remote.ErrInterface) || m.Fabric() != nil {
					t.Fatalf("created: %v (fabric %v)", err, m.Fabric())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fab := m.Fabric()
			if fab == nil || fab.Addr().Addr() != h.Addr() || fab.MTU() != 4000 {
				t.Fatalf("fabric %v MTU %d; the interface has %v, MTU %d", fab.Addr(), fab.MTU(), h.Addr(), h.MTU())
			}
			if err := m.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzParseListen: what ParseListen accepts is a valid address that
// reads back the same from its own form; ":port" is 0.0.0.0:port.
func FuzzParseListen(f *testing.F) {
	for _, s := range []string{":4791", "0.0.0.0:0", "[::]:4791", "10.0.0.1:9", ":", ":65536", "[fe80::1%eth0]:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := daemon.ParseListen(s)
		if err != nil {
			return
		}
		back, err := daemon.ParseListen(ap.String())
		if !ap.IsValid() || err != nil || back != ap {
			t.Fatalf("%q -> %v -> %v, %v", s, ap, back, err)
		}
		if strings.HasPrefix(s, ":") && !ap.Addr().IsUnspecified() {
			t.Fatalf("%q -> %v", s, ap)
		}
	})
}
