package hostnet_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vstellar/vstellar/hostnet"
)

func find(ifcs []hostnet.Interface, name string) *hostnet.Interface {
	for i := range ifcs {
		if ifcs[i].Name == name {
			return &ifcs[i]
		}
	}
	return nil
}

// TestInterfacesHere: the process's own namespace lists its loopback,
// marked, with 127.0.0.1 of host scope that Resolve would never pick.
func TestInterfacesHere(t *testing.T) {
	ifcs, err := hostnet.Interfaces(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var lo *hostnet.Interface
	for i := range ifcs {
		if i > 0 && ifcs[i].Index <= ifcs[i-1].Index {
			t.Fatalf("not by index: %d after %d", ifcs[i].Index, ifcs[i-1].Index)
		}
		if ifcs[i].Loopback {
			lo = &ifcs[i]
		}
	}
	if lo == nil || lo.Kind != "loopback" || lo.MTU <= 0 {
		t.Fatalf("no loopback in %+v", ifcs)
	}
	if !lo.Has(netip.MustParseAddr("127.0.0.1")) {
		t.Fatalf("loopback without 127.0.0.1: %v", lo.Addrs)
	}
	for _, a := range lo.Addrs {
		if a.Usable() {
			t.Errorf("loopback address %v (scope %v) usable", a, a.Scope)
		}
	}
	one, err := hostnet.InterfaceByName(t.Context(), lo.Name)
	if err != nil || one.Index != lo.Index || len(one.Addrs) != len(lo.Addrs) {
		t.Fatalf("InterfaceByName(%s) = %+v, %v; listed %+v", lo.Name, one, err, *lo)
	}
}

// TestInterfacesInNamespace: in a namespace of its own the test builds
// a veth pair (one end up, with IPv4 and IPv6 addresses; the other down,
// in a bridge): every interface is listed, loopback and down ones too,
// with the kind, MTU, hardware address, flags, master and addresses
// the test gave it; the up end runs once its peer is up.
func TestInterfacesInNamespace(t *testing.T) {
	_, h := testNS(t)
	host := hostnet.Host{Handle: h}
	hw := net.HardwareAddr{0x02, 0, 0, 0, 0x9, 0x1}
	a, b := veth(t, h, "vh0", "vh1", 9000, hw)
	addAddr(t, h, a, "10.9.0.1/24", false)
	addAddr(t, h, a, "10.9.0.2/24", false) // a secondary
	addAddr(t, h, a, "fd00:9::1/64", true)
	setUp(t, h, a, true)
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br9"}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetMaster(b, br); err != nil {
		t.Fatal(err)
	}

	ifcs, err := host.Interfaces(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lo, va, vb, bri := find(ifcs, "lo"), find(ifcs, "vh0"), find(ifcs, "vh1"), find(ifcs, "br9")
	if lo == nil || va == nil || vb == nil || bri == nil || len(ifcs) != 4 {
		t.Fatalf("interfaces %+v", ifcs)
	}
	if !lo.Loopback || lo.Kind != "loopback" || lo.Up {
		t.Errorf("lo of a fresh namespace: %+v", *lo)
	}
	if va.Kind != "veth" || va.MTU != 9000 || va.HardwareAddr != hw.String() || !va.Up || va.Running || va.Loopback || va.Master != "" {
		t.Errorf("vh0: %+v", *va)
	}
	if va.OperState != "lowerlayerdown" {
		t.Errorf("vh0 with its peer down: oper state %q", va.OperState)
	}
	if vb.Up || vb.Master != "br9" || bri.Kind != "bridge" {
		t.Errorf("vh1 %+v, br9 %+v", *vb, *bri)
	}
	want := []string{"10.9.0.1/24", "10.9.0.2/24", "fd00:9::1/64"}
	var got []string
	for _, x := range va.Addrs {
		if x.Scope != hostnet.ScopeGlobal {
			continue // the kernel may add fe80::/64 when the link is up
		}
		got = append(got, x.String())
		if !x.Usable() {
			t.Errorf("%v not usable: %+v", x, x)
		}
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("vh0 global addresses %v, want %v", got, want)
	}

	// As the API would carry it: JSON, read back the same.
	js, err := json.Marshal(va)
	if err != nil {
		t.Fatal(err)
	}
	var back hostnet.Interface
	if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(back, *va) {
		t.Fatalf("JSON %s read back as %+v, %v", js, back, err)
	}
	if !strings.Contains(string(js), `"scope":"global"`) || !strings.Contains(string(js), `"hardware_addr":"02:00:00:00:09:01"`) {
		t.Errorf("JSON %s", js)
	}

	setUp(t, h, b, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		one, err := host.InterfaceByName(t.Context(), "vh0")
		if err != nil {
			t.Fatal(err)
		}
		if one.Running && one.OperState == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vh0 not running with its peer up: %+v", one)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInterfaceByNameErrors: a missing interface and a name that cannot
// be one are told apart, and the first lists what there is.
func TestInterfaceByNameErrors(t *testing.T) {
	_, err := hostnet.InterfaceByName(t.Context(), "nosuch0")
	if !errors.Is(err, hostnet.ErrNoInterface) || !strings.Contains(err.Error(), "there are:") {
		t.Fatalf("missing interface: %v", err)
	}
	for _, name := range []string{"", "a/b", "eth0:1", "has space", "sixteen-bytes-xx", ".."} {
		if _, err := hostnet.InterfaceByName(t.Context(), name); !errors.Is(err, hostnet.ErrBadName) {
			t.Errorf("%q: %v", name, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := hostnet.Interfaces(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}
