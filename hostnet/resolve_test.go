package hostnet_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/hostnet"
)

// TestResolve: in a namespace of its own, an interface with IPv4 and
// IPv6 addresses resolves to its first of the family asked for (IPv4
// first when any will do), with the port; the address is one a socket
// in that namespace binds. Each way to fail has its error, saying what
// the interface has instead.
func TestResolve(t *testing.T) {
	ns, h := testNS(t)
	host := hostnet.Host{Handle: h}
	ctx := t.Context()

	a, _ := veth(t, h, "vr0", "vr1", 1500, nil)
	addAddr(t, h, a, "fd00:7::1/64", true) // IPv6 first: AnyFamily still takes IPv4
	addAddr(t, h, a, "10.7.0.1/24", false)
	addAddr(t, h, a, "10.7.0.2/24", false)
	setUp(t, h, a, true)
	for _, c := range []struct {
		fam  hostnet.Family
		want string
	}{{hostnet.AnyFamily, "10.7.0.1:4791"}, {hostnet.IPv4, "10.7.0.1:4791"}, {hostnet.IPv6, "[fd00:7::1]:4791"}} {
		ap, ifc, err := host.Resolve(ctx, "vr0", 4791, c.fam)
		if err != nil || ap.String() != c.want || ifc.Name != "vr0" || ifc.MTU != 1500 {
			t.Errorf("%v: %v %+v %v, want %s", c.fam, ap, ifc, err, c.want)
		}
	}
	// The answer is bindable there (the point of it).
	ap, _, err := host.Resolve(ctx, "vr0", 0, hostnet.AnyFamily)
	if err != nil {
		t.Fatal(err)
	}
	if err := inNS(ns, func() error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("bind %v: %v", ap, err)
	}

	// Down (administratively).
	d, _ := veth(t, h, "vd0", "vd1", 1500, nil)
	addAddr(t, h, d, "10.8.0.1/24", false)
	if _, _, err := host.Resolve(ctx, "vd0", 1, hostnet.AnyFamily); !errors.Is(err, hostnet.ErrInterfaceDown) || !strings.Contains(err.Error(), "ip link set vd0 up") {
		t.Errorf("down: %v", err)
	}

	// Up without carrier (its peer is down): IPv6 addresses stay
	// tentative, so nothing usable; only link-local and tentative
	// addresses and an IPv4 link-local one.
	n, _ := veth(t, h, "vn0", "vn1", 1500, nil)
	addAddr(t, h, n, "fd00:8::1/64", false)
	addAddr(t, h, n, "169.254.3.3/16", false)
	setUp(t, h, n, true)
	_, ifc, err := host.Resolve(ctx, "vn0", 1, hostnet.IPv6)
	if !errors.Is(err, hostnet.ErrNoAddress) || !strings.Contains(err.Error(), "fd00:8::1/64 (tentative") {
		t.Errorf("tentative only: %v", err)
	}
	if ifc.Name != "vn0" || ifc.Running {
		t.Errorf("with the error, the interface: %+v", ifc)
	}
	if _, _, err := host.Resolve(ctx, "vn0", 1, hostnet.IPv4); !errors.Is(err, hostnet.ErrNoAddress) || !strings.Contains(err.Error(), "169.254.3.3/16 (link-local)") {
		t.Errorf("IPv4 link-local only: %v", err)
	}
	// Loopback: host scope.
	if _, _, err := host.Resolve(ctx, "lo", 1, hostnet.AnyFamily); !errors.Is(err, hostnet.ErrInterfaceDown) {
		t.Errorf("lo (down in a fresh namespace): %v", err)
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	setUp(t, h, lo, true)
	if _, _, err := host.Resolve(ctx, "lo", 1, hostnet.AnyFamily); !errors.Is(err, hostnet.ErrNoAddress) || !strings.Contains(err.Error(), "127.0.0.1/8 (loopback)") {
		t.Errorf("lo: %v", err)
	}
	// No interface; no address at all; a bad name; a bad family.
	if _, _, err := host.Resolve(ctx, "vx0", 1, hostnet.AnyFamily); !errors.Is(err, hostnet.ErrNoInterface) || !strings.Contains(err.Error(), "vr0") {
		t.Errorf("missing: %v", err)
	}
	e, _ := veth(t, h, "ve0", "ve1", 1500, nil)
	setUp(t, h, e, true)
	if _, _, err := host.Resolve(ctx, "ve1", 1, hostnet.IPv4); !errors.Is(err, hostnet.ErrInterfaceDown) {
		t.Errorf("ve1: %v", err)
	}
	if _, _, err := host.Resolve(ctx, "ve0", 1, hostnet.IPv4); !errors.Is(err, hostnet.ErrNoAddress) {
		t.Errorf("no address: %v", err)
	}
	if _, _, err := host.Resolve(ctx, "v/0", 1, hostnet.IPv4); !errors.Is(err, hostnet.ErrBadName) {
		t.Errorf("bad name: %v", err)
	}
	if _, _, err := host.Resolve(ctx, "vr0", 1, hostnet.Family(9)); err == nil {
		t.Error("family 9 accepted")
	}
}

// TestFamilyOf: IPv4-mapped addresses are IPv4.
func TestFamilyOf(t *testing.T) {
	for s, want := range map[string]hostnet.Family{"0.0.0.0": hostnet.IPv4, "::ffff:10.0.0.1": hostnet.IPv4, "::": hostnet.IPv6, "fd00::1": hostnet.IPv6} {
		if got := hostnet.FamilyOf(netip.MustParseAddr(s)); got != want {
			t.Errorf("%s: %v", s, got)
		}
	}
	if hostnet.FamilyOf(netip.Addr{}) != hostnet.AnyFamily {
		t.Error("zero Addr")
	}
}
