package remote_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/hostnet"
	"github.com/vstellar/vstellar/transport"
)

func validConfig() remote.Config {
	return remote.Config{
		Listen:    netip.MustParseAddrPort("127.0.0.1:0"),
		GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"),
		Peers: []remote.Peer{
			{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: netip.MustParseAddrPort("10.0.0.2:4791")},
			{GIDPrefix: netip.MustParsePrefix("fd00:0:0:3::/64"), Addr: netip.MustParseAddrPort("10.0.0.3:4791")},
		},
		Secret: []byte("0123456789abcdef"),
	}
}

// TestConfigErrors: every invalid field is refused with an error naming
// it.
func TestConfigErrors(t *testing.T) {
	pfx, ap := netip.MustParsePrefix, netip.MustParseAddrPort
	for _, c := range []struct {
		name  string
		mod   func(*remote.Config)
		field string // in the error
	}{
		{"no listen address", func(c *remote.Config) { c.Listen = netip.AddrPort{} }, "Listen"},
		{"negative paths", func(c *remote.Config) { c.Paths = -1 }, "Paths"},
		{"too many paths", func(c *remote.Config) { c.Paths = 5000 }, "Paths"},
		{"negative socket buffer", func(c *remote.Config) { c.SocketBuffer = -1 }, "SocketBuffer"},
		{"huge socket buffer", func(c *remote.Config) { c.SocketBuffer = 2 << 30 }, "SocketBuffer"},
		{"no prefix", func(c *remote.Config) { c.GIDPrefix = netip.Prefix{} }, "GIDPrefix"},
		{"IPv4 prefix", func(c *remote.Config) { c.GIDPrefix = pfx("10.1.0.0/16") }, "::ffff:10.1.0.0/112"},
		{"short secret", func(c *remote.Config) { c.Secret = make([]byte, 15) }, "Secret"},
		{"peer IPv4 prefix", func(c *remote.Config) { c.Peers[1].GIDPrefix = pfx("10.0.0.0/8") }, "Peers[1]: gid prefix"},
		{"peer without prefix", func(c *remote.Config) { c.Peers[0].GIDPrefix = netip.Prefix{} }, "Peers[0]: gid prefix"},
		{"peer without address", func(c *remote.Config) { c.Peers[0].Addr = netip.AddrPort{} }, "Peers[0]: address not set"},
		{"peer unspecified address", func(c *remote.Config) { c.Peers[0].Addr = ap("0.0.0.0:4791") }, "Peers[0]: address"},
		{"peer multicast address", func(c *remote.Config) { c.Peers[0].Addr = ap("224.0.0.1:4791") }, "Peers[0]: address"},
		{"peer port 0", func(c *remote.Config) { c.Peers[1].Addr = ap("10.0.0.3:0") }, "Peers[1]: address 10.0.0.3:0 has port 0"},
		{"peer of another family", func(c *remote.Config) { c.Peers[1].Addr = ap("[fd00::3]:4791") }, "Peers[1]: address [fd00::3]:4791 is not of the family"},
		{"peer holding the local prefix", func(c *remote.Config) { c.Peers[1].GIDPrefix = pfx("fd00::/16") }, "Peers[1]: gid prefix fd00::/16 overlaps"},
		{"peer inside the local prefix", func(c *remote.Config) { c.Peers[0].GIDPrefix = pfx("fd00:0:0:1:8000::/65") }, "Peers[0]: gid prefix"},
		{"two peers, one prefix", func(c *remote.Config) { c.Peers[1].GIDPrefix = pfx("fd00:0:0:2::1/64") }, "Peers[1]: gid prefix fd00:0:0:2::/64 is Peers[0]'s too"},
		{"MTU too small", func(c *remote.Config) { c.MTU = 100 }, "MTU: 100 outside 172..65535"},
		{"MTU too large", func(c *remote.Config) { c.MTU = 70000 }, "MTU"},
		{"bad transport window", func(c *remote.Config) { c.Transport.Window = 1000 }, "Transport"},
		{"bad transport payload", func(c *remote.Config) { c.Transport.MaxPayload = 10 }, "Transport"},
		{"shared congestion control", func(c *remote.Config) { c.Transport.CC = transport.NewFixedWindow(4) }, "Transport: Path and CC"},
		{"bad interface name", func(c *remote.Config) { c.Interface = "eth0:1" }, "Interface: hostnet: invalid interface name"},
		{"no such interface", func(c *remote.Config) { c.Interface = "nosuch0" }, `Interface: hostnet: interface "nosuch0": no such interface`},
		{"interface without listen", func(c *remote.Config) { c.Interface, c.Listen = "lo", netip.AddrPort{} }, "Interface: Listen: not set"},
		{"zone and interface differ", func(c *remote.Config) { c.Interface, c.Listen = "lo", ap("[fe80::1%eth0]:0") }, `Interface: Listen [fe80::1%eth0]:0 has zone "eth0", another interface`},
	} {
		cfg := validConfig()
		c.mod(&cfg)
		f, err := remote.New(t.Context(), cfg)
		if err == nil {
			f.Close()
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.field)
		}
	}
	// The valid one, with a peer prefix written with host bits and an
	// IPv4-mapped GID prefix, is accepted.
	cfg := validConfig()
	cfg.Peers[0].GIDPrefix = pfx("fd00:0:0:2::7/64")
	cfg.Peers = append(cfg.Peers, remote.Peer{GIDPrefix: pfx("::ffff:10.9.0.0/112"), Addr: ap("10.0.0.9:4791")})
	f, err := remote.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a, ok := f.Route(netip.MustParseAddr("fd00:0:0:2::99").As16()); !ok || a != ap("10.0.0.2:4791") {
		t.Fatalf("route of a masked prefix: %v %v", a, ok)
	}
	if a, ok := f.Route(netip.MustParseAddr("::ffff:10.9.1.2").As16()); !ok || a != ap("10.0.0.9:4791") {
		t.Fatalf("route of an IPv4 GID: %v %v", a, ok)
	}
}

// TestRouteLongestPrefix: the longest prefix holding a GID wins,
// whatever the order of the peers.
func TestRouteLongestPrefix(t *testing.T) {
	pfx, ap := netip.MustParsePrefix, netip.MustParseAddrPort
	cfg := validConfig()
	cfg.GIDPrefix = pfx("fd01::/64")
	cfg.Peers = []remote.Peer{
		{GIDPrefix: pfx("fd00:0:0:2:1::/80"), Addr: ap("10.0.0.3:1")},
		{GIDPrefix: pfx("fd00::/16"), Addr: ap("10.0.0.1:1")},
		{GIDPrefix: pfx("fd00:0:0:2::/64"), Addr: ap("10.0.0.2:1")},
	}
	f, err := remote.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		gid  string
		want string // "" = no route
	}{
		{"fd00:0:0:2:1::5", "10.0.0.3:1"},
		{"fd00:0:0:2:2::5", "10.0.0.2:1"},
		{"fd00:0:0:2::5", "10.0.0.2:1"},
		{"fd00:7::1", "10.0.0.1:1"},
		{"fd01::1", ""}, // local
		{"fe80::1", ""},
	} {
		a, ok := f.Route(netip.MustParseAddr(c.gid).As16())
		if c.want == "" {
			if ok {
				t.Errorf("%s routed to %v", c.gid, a)
			}
			continue
		}
		if !ok || a != ap(c.want) {
			t.Errorf("%s: %v %v, want %s", c.gid, a, ok, c.want)
		}
	}
	// SetPeers validates like New and replaces the table.
	if err := f.SetPeers([]remote.Peer{{GIDPrefix: pfx("fd01::/48"), Addr: ap("10.0.0.1:1")}}); err == nil {
		t.Fatal("SetPeers accepted a peer overlapping the local prefix")
	}
	if err := f.SetPeers([]remote.Peer{{GIDPrefix: pfx("fd02::/64"), Addr: ap("10.0.0.5:1")}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Route(netip.MustParseAddr("fd00:0:0:2:1::5").As16()); ok {
		t.Fatal("old route kept")
	}
	if a, ok := f.Route(netip.MustParseAddr("fd02::5").As16()); !ok || a != ap("10.0.0.5:1") {
		t.Fatalf("new route: %v %v", a, ok)
	}
}

// TestParsePeers: the one-line form, its errors, and the JSON form of a
// daemon config.
func TestParsePeers(t *testing.T) {
	got, err := remote.ParsePeers(" fd00:0:0:2::/64=10.0.0.2:4791,fd00:0:0:3::1/64=[fd00::1]:4791\n::ffff:10.0.0.0/104=[::ffff:10.0.0.7]:1 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []remote.Peer{
		{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: netip.MustParseAddrPort("10.0.0.2:4791")},
		{GIDPrefix: netip.MustParsePrefix("fd00:0:0:3::/64"), Addr: netip.MustParseAddrPort("[fd00::1]:4791")},
		{GIDPrefix: netip.MustParsePrefix("::ffff:10.0.0.0/104"), Addr: netip.MustParseAddrPort("10.0.0.7:1")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := remote.ParsePeers(" "); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"fd00::/64", "fd00::/64=", "=10.0.0.1:1", "fd00::/129=10.0.0.1:1", "10.0.0.0/8=10.0.0.1:1",
		"fd00::/64=10.0.0.1", "fd00::/64=10.0.0.1:0", "fd00::/64=0.0.0.0:1", "fd00::/64=10.0.0.1:1=2"} {
		if p, err := remote.ParsePeers(bad); err == nil {
			t.Errorf("%q parsed as %v", bad, p)
		}
	}

	var cfg struct {
		Peers []remote.Peer `json:"peers"`
	}
	if err := json.Unmarshal([]byte(`{"peers": [{"gid_prefix": "fd00:0:0:2::/64", "address": "10.0.0.2:4791"}]}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Peers, want[:1]) {
		t.Fatalf("JSON: %v", cfg.Peers)
	}
	b, err := json.Marshal(cfg.Peers[0])
	if err != nil || string(b) != `{"gid_prefix":"fd00:0:0:2::/64","address":"10.0.0.2:4791"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
}

// FuzzParsePeers: the parser never panics, and what it accepts prints
// back (Peer.String) to the same peers.
func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"fd00:0:0:2::/64=10.0.0.2:4791", "fd00::/8=[fd00::1]:1, ::ffff:1.2.3.0/120=1.2.3.4:5", "=", ",,", "a=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := remote.ParsePeers(s)
		if err != nil {
			return
		}
		var parts []string
		for _, p := range peers {
			if !p.GIDPrefix.Addr().Is6() || p.Addr.Port() == 0 || p.GIDPrefix != p.GIDPrefix.Masked() {
				t.Fatalf("%q: accepted %v", s, p)
			}
			parts = append(parts, p.String())
		}
		again, err := remote.ParsePeers(strings.Join(parts, ","))
		if err != nil || !reflect.DeepEqual(again, peers) {
			t.Fatalf("%q: %v printed as %q parses to %v, %v", s, peers, parts, again, err)
		}
	})
}

// TestInterfaceLoopback: bound to lo by name, the fabric takes 127.0.0.1
// only if asked for by address (lo's addresses are not global), and
// lo's 65536-byte MTU is capped at what an IP packet can hold.
func TestInterfaceLoopback(t *testing.T) {
	cfg := validConfig()
	cfg.Interface, cfg.Peers = "lo", nil
	f, err := remote.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Addr().Addr() != netip.MustParseAddr("127.0.0.1") || f.MTU() > 65535 || f.MTU() < 1500 {
		t.Fatalf("bound %v, MTU %d", f.Addr(), f.MTU())
	}
	cfg.Listen = netip.MustParseAddrPort("0.0.0.0:0")
	if f, err := remote.New(t.Context(), cfg); !errors.Is(err, hostnet.ErrNoAddress) || !errors.Is(err, remote.ErrInterface) {
		if err == nil {
			f.Close()
		}
		t.Fatalf("lo by name alone: %v", err)
	}
}
