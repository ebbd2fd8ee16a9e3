package hostnet

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRDMALinksHere: on this host, either the kernel lists its RDMA
// devices (each with its ports), or it has no RDMA netlink support and
// the error says so plainly. Which one must match what the kernel has:
// a kernel with /sys/class/infiniband has ib_core loaded.
func TestRDMALinksHere(t *testing.T) {
	links, err := RDMALinks(t.Context())
	_, serr := os.Stat("/sys/class/infiniband")
	if err != nil {
		if !errors.Is(err, ErrNoRDMA) || !strings.Contains(err.Error(), "no RDMA netlink support (kernel without CONFIG_INFINIBAND / no ib_core)") {
			t.Fatalf("error %v", err)
		}
		if serr == nil {
			t.Fatalf("/sys/class/infiniband exists, yet %v", err)
		}
		t.Logf("as expected on this kernel: %v", err)
		return
	}
	for _, l := range links {
		if l.Name == "" || len(l.Ports) == 0 || l.Ports[0].Port != 1 {
			t.Errorf("device %+v", l)
		}
	}
	t.Logf("%d RDMA devices: %+v", len(links), links)
}

// TestRDMAPortsSysfs reads a sysfs tree laid out as the kernel's: a
// Soft-RoCE device whose GID table names its interface (the first
// entries unreadable, as unused GIDs are), a port sysfs says nothing
// of, and an InfiniBand device found through its PCI function.
func TestRDMAPortsSysfs(t *testing.T) {
	root := t.TempDir()
	put := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rxe := "class/infiniband/rxe0/ports/1/"
	put(rxe+"state", "4: ACTIVE\n")
	put(rxe+"link_layer", "Ethernet\n")
	if err := os.MkdirAll(filepath.Join(root, rxe+"gid_attrs/ndevs/0"), 0o755); err != nil { // unreadable
		t.Fatal(err)
	}
	put(rxe+"gid_attrs/ndevs/10", "eth9\n")
	put(rxe+"gid_attrs/ndevs/2", "eth1\n")
	h := Host{Sysfs: root}
	ports, devs := h.rdmaPorts("rxe0", 2)
	if len(ports) != 2 || ports[0] != (RDMAPort{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", NetDev: "eth1"}) || ports[1] != (RDMAPort{Port: 2}) {
		t.Errorf("rxe0 ports %+v", ports)
	}
	if len(devs) != 1 || devs[0] != "eth1" {
		t.Errorf("rxe0 devs %v", devs)
	}
	put("class/infiniband/mlx5_0/ports/1/state", "1: DOWN")
	put("class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand")
	put("class/infiniband/mlx5_0/device/net/ib1/x", "")
	put("class/infiniband/mlx5_0/device/net/ib0/x", "")
	ports, devs = h.rdmaPorts("mlx5_0", 1)
	if len(ports) != 1 || ports[0].State != "DOWN" || ports[0].NetDev != "" || len(devs) != 2 || devs[0] != "ib0" || devs[1] != "ib1" {
		t.Errorf("mlx5_0: %+v %v", ports, devs)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if p, d := h.rdmaPorts(bad, 1); p != nil || d != nil {
			t.Errorf("%q: %v %v", bad, p, d)
		}
	}
}

// TestGUID: netlink's form (the value's bytes, least significant first)
// reads back to the value, shown as rdma(8) and sysfs show it.
func TestGUID(t *testing.T) {
	g, err := parseNetlinkGUID("c3:b2:a1:00:03:c9:02:00")
	if err != nil || g != 0x0002c90300a1b2c3 || g.String() != "0002:c903:00a1:b2c3" {
		t.Fatalf("%#x %v %v", uint64(g), g, err)
	}
	for _, bad := range []string{"", "00:11:22:33:44:55", "zz:b2:a1:00:03:c9:02:00"} {
		if _, err := parseNetlinkGUID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	b, err := json.Marshal(RDMALink{Name: "rxe0", NodeGUID: g})
	var back RDMALink
	if err != nil || !strings.Contains(string(b), `"node_guid":"0002:c903:00a1:b2c3"`) || json.Unmarshal(b, &back) != nil || back.NodeGUID != g {
		t.Fatalf("JSON %s %v, back %+v", b, err, back)
	}
	for _, bad := range []string{"", "0002:c903:00a1:b2c", "0002-c903-00a1-b2c3", "+002:c903:00a1:b2c3", "000g:c903:00a1:b2c3"} {
		if _, err := ParseGUID(bad); err == nil {
			t.Errorf("ParseGUID(%q) accepted", bad)
		}
	}
}

func FuzzParseGUID(f *testing.F) {
	f.Add("0002:c903:00a1:b2c3", uint64(7))
	f.Add("ffff:ffff:ffff:ffff", uint64(0))
	f.Fuzz(func(t *testing.T, s string, v uint64) {
		if g, err := ParseGUID(GUID(v).String()); err != nil || uint64(g) != v {
			t.Fatalf("%#x: %v %v", v, g, err)
		}
		if g, err := ParseGUID(s); err == nil && !strings.EqualFold(g.String(), s) {
			t.Fatalf("%q read as %v", s, g)
		}
	})
}

// netlinkGUID formats v as vishvananda/netlink does.
func netlinkGUID(v uint64) string {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, v)
	return net.HardwareAddr(b.Bytes()).String()
}

func FuzzNetlinkGUID(f *testing.F) {
	f.Add(uint64(0x0002c90300a1b2c3), "c3:b2:a1:00:03:c9:02:00")
	f.Add(uint64(0), "")
	f.Add(uint64(1), "0001.0203.0405.0607")
	f.Fuzz(func(t *testing.T, v uint64, s string) {
		if g, err := parseNetlinkGUID(netlinkGUID(v)); err != nil || uint64(g) != v {
			t.Fatalf("%#x: %#x %v", v, uint64(g), err)
		}
		g, err := parseNetlinkGUID(s)
		if err != nil {
			return
		}
		b, merr := net.ParseMAC(s)
		if merr != nil || len(b) != 8 || binary.LittleEndian.Uint64(b) != uint64(g) {
			t.Fatalf("%q read as %#x (bytes %x, %v)", s, uint64(g), b, merr)
		}
	})
}

func FuzzPortState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "1: DOWN", "", ":", "ACTIVE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := portState(s)
		if n, st, ok := strings.Cut(s, ":"); ok && got != strings.TrimSpace(st) {
			t.Fatalf("%q (number %q) -> %q", s, n, got)
		}
		if !strings.Contains(s, ":") && got != s {
			t.Fatalf("%q -> %q", s, got)
		}
	})
}
