//go:build linux

package netlab

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func TestLeafSpineBuildCrossAndClose(t *testing.T) {
	requireNetlab(t)
	const hostRate = 200_000_000
	linksBefore := rootLinks(t)
	f := newFabric(t, LeafSpineOptions{HostRate: hostRate, MTU: 9000})

	// Shape: 2 leaves x 2 hosts, 4 spines, one namespace each, all named
	// so Cleanup would find them as this process's.
	names := f.Namespaces()
	if len(names) != 2+4+4 || f.Leaves() != 2 || f.Spines() != 4 || len(f.Hosts()) != 4 {
		t.Fatalf("namespaces %v, leaves %d, spines %d, hosts %d", names, f.Leaves(), f.Spines(), len(f.Hosts()))
	}
	if got := namedWith(t, lsPrefix); !slices.Equal(got, sortedCopy(names)) {
		t.Fatalf("/run/netns has %v, fabric says %v", got, names)
	}
	for _, n := range names {
		if pid, ok := parseNSName(lsPrefix, n); !ok || pid != os.Getpid() {
			t.Fatalf("namespace %q does not parse as this process's (pid %d ok %v)", n, pid, ok)
		}
	}
	bench := netip.MustParsePrefix("198.18.0.0/15")
	seen := map[netip.Addr]bool{}
	for _, h := range f.Hosts() {
		if !bench.Contains(h.Addr()) || seen[h.Addr()] || h.MTU() != 9000 {
			t.Fatalf("host %s: address %v (dup %v), MTU %d", h.Name(), h.Addr(), seen[h.Addr()], h.MTU())
		}
		seen[h.Addr()] = true
		if !f.HostSubnet(hostLeaf(t, f, h)).Contains(h.Addr()) {
			t.Fatalf("host %s address %v outside its leaf's %v", h.Name(), h.Addr(), f.HostSubnet(hostLeaf(t, f, h)))
		}
	}
	if f.Host(0, 2) != nil || f.Host(2, 0) != nil || f.Host(-1, 0) != nil || f.Host(1, 1) == nil {
		t.Fatal("Host(leaf, i) bounds")
	}

	// Routers forward and hash on L4; hosts are left alone.
	for l, ns := range f.leaves {
		for key, want := range map[string]string{
			"net.ipv4.ip_forward": "1", "net.ipv4.fib_multipath_hash_policy": "3",
			"net.ipv4.fib_multipath_hash_fields": "55", // 0x37, read back in decimal "net.ipv4.conf.all.rp_filter": "0",
		} {
			if got, err := ns.getSysctl(key); err != nil || got != want {
				t.Fatalf("leaf %d: %s = %q (%v), want %s", l, key, got, err, want)
			}
		}
		// One ECMP route to the other leaf's hosts, a nexthop per spine.
		mp := ecmpNexthops(t, f, l, 1-l)
		if len(mp) != 4 {
			t.Fatalf("leaf %d: ECMP route has %d nexthops, want 4", l, len(mp))
		}
	}
	for s, ns := range f.spines {
		if got, err := ns.getSysctl("net.ipv4.ip_forward"); err != nil || got != "1" {
			t.Fatalf("spine %d: ip_forward %q (%v)", s, got, err)
		}
	}
	if got, err := f.hosts[0][0].ns.getSysctl("net.ipv4.fib_multipath_hash_policy"); err != nil || got != "0" {
		t.Fatalf("host: hash policy %q (%v); sysctls leaked out of the routers", got, err)
	}

	// HostRate shapes both directions of host links, LinkRate is unset.
	for _, p := range []*port{f.hosts[1][0].port, f.hosts[1][0].port.peer} {
		if rate := tbfRate(t, p); rate != hostRate/8 {
			t.Fatalf("%s: tbf rate %d B/s, want %d", p, rate, hostRate/8)
		}
	}
	if rate := tbfRate(t, f.links[0][0].lp); rate != 0 {
		t.Fatalf("uplink shaped at %d B/s without LinkRate", rate)
	}

	// A datagram crosses from under leaf 0 to under leaf 1 and back,
	// through leaf, spine, leaf: a jumbo one, with DF, at MTU 9000.
	a, b := f.Host(0, 0), f.Host(1, 1)
	ca, cb := listenUDP(t, a, 5000), listenUDP(t, b, 5000)
	setDF(t, ca)
	warmUp(t, ca, cb)
	big := bytes.Repeat([]byte{0x5A}, 9000-28)
	if _, err := ca.WriteToUDPAddrPort(big, addrPort(cb)); err != nil {
		t.Fatal(err)
	}
	got, from, err := recvOne(cb, 2*time.Second)
	if err != nil || !bytes.Equal(got, big) || from != addrPort(ca) {
		t.Fatalf("b got %d bytes from %v (%v), want %d from %v", len(got), from, err, len(big), addrPort(ca))
	}
	if _, err := cb.WriteToUDPAddrPort([]byte("back"), from); err != nil {
		t.Fatal(err)
	}
	if got, _, err := recvOne(ca, 2*time.Second); err != nil || string(got) != "back" {
		t.Fatalf("reply: %q (%v)", got, err)
	}
	// Hosts under one leaf reach each other through it.
	cs := listenUDP(t, f.Host(0, 1), 5000)
	warmUp(t, ca, cs)

	// The socket lives in host a's namespace.
	var inside uint64
	if err := a.Do(func() error { inside = nsInode(t, "/proc/thread-self/ns/net"); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside != nsInode(t, nsDir+"/"+a.Namespace()) || inside == homeNS(t) {
		t.Fatal("Host.Do did not run inside the host's namespace")
	}

	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := namedWith(t, lsPrefix); len(left) > 0 {
		t.Fatalf("Close left namespaces %v", left)
	}
	for _, n := range names {
		if h, err := netns.GetFromName(n); err == nil {
			h.Close()
			t.Fatalf("namespace %s still openable after Close", n)
		}
	}
	if got := rootLinks(t); !slices.Equal(got, linksBefore) {
		t.Fatalf("root namespace links changed: %v -> %v", linksBefore, got)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	for name, err := range map[string]error{
		"SetLinkLoss": f.SetLinkLoss(0, 0, 0.1),
		"BlackHole":   f.BlackHole(0, 0, true),
		"SetLinkUp":   f.SetLinkUp(t.Context(), 0, 0, false),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, err := f.LeafCounters(0); !errors.Is(err, ErrClosed) {
		t.Errorf("LeafCounters after Close: %v", err)
	}
}

func hostLeaf(t *testing.T, f *Fabric, h *Host) int {
	t.Helper()
	for l, hs := range f.hosts {
		if slices.Contains(hs, h) {
			return l
		}
	}
	t.Fatalf("host %s not in fabric", h.Name())
	return -1
}

// ecmpNexthops returns the nexthops of leaf l's route to leaf m's hosts
// that the kernel considers usable.
func ecmpNexthops(t *testing.T, f *Fabric, l, m int) []*netlink.NexthopInfo {
	t.Helper()
	dst := f.HostSubnet(m)
	routes, err := f.leaves[l].nl.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() != dst.String() {
			continue
		}
		nhs := r.MultiPath
		if len(nhs) == 0 { // one nexthop is stored as a plain route
			nhs = []*netlink.NexthopInfo{{LinkIndex: r.LinkIndex, Gw: r.Gw, Flags: r.Flags}}
		}
		var alive []*netlink.NexthopInfo
		for _, nh := range nhs {
			if nh.Flags&(unix.RTNH_F_DEAD|unix.RTNH_F_LINKDOWN) == 0 {
				alive = append(alive, nh)
			}
		}
		return alive
	}
	return nil
}

// tbfRate is the rate in bytes/s of p's root tbf, 0 if it has none.
func tbfRate(t *testing.T, p *port) uint64 {
	t.Helper()
	qs, err := p.ns.nl.QdiscList(p.link())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if tbf, ok := q.(*netlink.Tbf); ok && q.Attrs().Parent == netlink.HANDLE_ROOT {
			return tbf.Rate
		}
	}
	return 0
}

func TestLeafSpineECMPSpread(t *testing.T) {
	f := newFabric(t, LeafSpineOptions{})
	src, dst := f.Host(0, 0), f.Host(1, 0)
	rx := listenUDP(t, dst, 5100)
	const nFlows, perFlow = 128, 8
	flows := openFlows(t, src, nFlows)
	warmUp(t, flows[0], rx)

	before, err := f.LeafCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	got := sendFlows(t, flows, rx, perFlow, 200*time.Millisecond)
	for i, n := range got {
		if n != perFlow {
			t.Errorf("flow %d: %d of %d delivered on a clean fabric", i, n, perFlow)
		}
	}
	spread := routedDelta(t, f, 0, before)
	var total uint64
	for _, n := range spread {
		total += n
	}
	fair := float64(total) / float64(len(spread))
	t.Logf("%d flows x %d datagrams over %d spines: %v (fair share %.0f)", nFlows, perFlow, len(spread), spread, fair)
	if total < nFlows*perFlow {
		t.Fatalf("leaf 0 counted %d packets toward spines, sent %d", total, nFlows*perFlow)
	}
	for s, n := range spread {
		// 128 random flows on 4 spines: mean 32, sd 4.9 flows; empty or
		// doubled is beyond 6 sd, so only a broken hash gets there.
		if n == 0 || float64(n) > 2*fair {
			t.Errorf("spine %d carried %d packets, fair share %.0f: source ports do not spread", s, n, fair)
		}
	}
	// A flow keeps its spine: all of a flow's packets take one link, so
	// each spine's count is a whole number of flows.
	for s, n := range spread {
		if extra := n % perFlow; extra > 4 { // a few ARP frames may cross too
			t.Errorf("spine %d count %d is not whole flows of %d", s, n, perFlow)
		}
	}
}
