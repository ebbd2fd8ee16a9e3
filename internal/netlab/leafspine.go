//go:build linux

package netlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Leaf-spine limits. Leaves and hosts per leaf index one octet of the
// address plan (see addressing below); 16 spines already give a 16-way
// ECMP group, more than the transport's path counts need.
const (
	MaxLeaves       = 8
	MaxHostsPerLeaf = 8
	MaxSpines       = 16
)

// LeafSpineOptions configures a leaf-spine fabric. The zero value is 2
// leaves with 2 hosts each and 4 spines, 1500-byte MTU, no rate limits.
type LeafSpineOptions struct {
	// Prefix starts every namespace name (default DefaultPrefix).
	Prefix string
	// Leaves is the number of leaf routers (default 2, 2..MaxLeaves).
	Leaves int
	// HostsPerLeaf is the number of hosts under each leaf (default 2,
	// 1..MaxHostsPerLeaf).
	HostsPerLeaf int
	// Spines is the number of spine routers, i.e. of equal-cost paths
	// between two leaves (default 4, 1..MaxSpines).
	Spines int
	// MTU of every link (default 1500; 68..65535, e.g. 9000).
	MTU int
	// LinkRate limits each direction of every leaf<->spine link to this
	// many bits/s of L2 frames via tbf (0 = unlimited, else >= MinRate).
	// A leaf's uplink capacity, and with two leaves the bisection
	// capacity, is then Spines*LinkRate per direction; one flow (one
	// 5-tuple) gets at most LinkRate.
	LinkRate uint64
	// HostRate limits each direction of every host<->leaf link the same
	// way (0 = unlimited), standing in for the host's NIC speed.
	HostRate uint64
	// LossCorrelation in [0, 1) makes SetLinkLoss losses bursty at the
	// same average rate (see loss.go).
	LossCorrelation float64
	// HashSeed, if nonzero, is written to the leaves'
	// net.ipv4.fib_multipath_hash_seed so the flow-to-spine mapping is
	// the same in every run (kernels >= 6.11; older ones fail with
	// ErrUnsupported). 0 keeps the kernel's random seed.
	HashSeed uint32
	// Logger receives construction and teardown events (default: discard).
	Logger *slog.Logger

	// testHook, if set, is called after each construction step; an error
	// aborts construction there (tests use it to inject failures).
	testHook func(step string) error
}

func (o LeafSpineOptions) withDefaults() (LeafSpineOptions, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := validatePrefix(o.Prefix); err != nil {
		return o, err
	}
	def := func(v *int, d, lo, hi int, what string) error {
		if *v == 0 {
			*v = d
		}
		if *v < lo || *v > hi {
			return fmt.Errorf("netlab: %s %d outside %d..%d", what, *v, lo, hi)
		}
		return nil
	}
	if err := errors.Join(
		def(&o.Leaves, 2, 2, MaxLeaves, "leaves"),
		def(&o.HostsPerLeaf, 2, 1, MaxHostsPerLeaf, "hosts per leaf"),
		def(&o.Spines, 4, 1, MaxSpines, "spines"),
		def(&o.MTU, 1500, 68, 65535, "MTU"),
	); err != nil {
		return o, err
	}
	if err := validRate(o.LinkRate); err != nil {
		return o, fmt.Errorf("link rate: %w", err)
	}
	if err := validRate(o.HostRate); err != nil {
		return o, fmt.Errorf("host rate: %w", err)
	}
	if err := validLoss(0, o.LossCorrelation); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Addressing (all in 198.18.0.0/15, RFC 2544 benchmarking space): every
// link is a /31.
//
//	host i under leaf l:  198.18.l.(2i+1)/31, its leaf 198.18.l.(2i)/31
//	leaf l's hosts:       198.18.l.0/24 (what spines and other leaves route)
//	leaf l <-> spine s:   leaf 198.19.l.(2s)/31, spine 198.19.l.(2s+1)/31
func hostSubnet(leaf int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(leaf), 0}), 24)
}

func hostLinkAddrs(leaf, i int) (leafEnd, hostEnd netip.Prefix) {
	a := netip.AddrFrom4([4]byte{198, 18, byte(leaf), byte(2 * i)})
	return netip.PrefixFrom(a, 31), netip.PrefixFrom(a.Next(), 31)
}

func uplinkAddrs(leaf, spine int) (leafEnd, spineEnd netip.Prefix) {
	a := netip.AddrFrom4([4]byte{198, 19, byte(leaf), byte(2 * spine)})
	return netip.PrefixFrom(a, 31), netip.PrefixFrom(a.Next(), 31)
}

// uplink is the link between one leaf and one spine, with what the caller
// asked for on it (the filters on its ports follow these).
type uplink struct {
	leaf, spine int
	lp, sp      *port // leaf end (device "s<spine>"), spine end ("l<leaf>")
	loss        float64
	blackHole   bool
	up          bool
}

// Fabric is a running leaf-spine testbed. Its methods are safe for
// concurrent use.
type Fabric struct {
	// bed holds the lifecycle shared with TwoHost: the lock, the closed
	// flag, the undo stack and the hosts (whose Do checks bed.done).
	bed    *Bed
	opts   LeafSpineOptions
	leaves []*namespace
	spines []*namespace
	hosts  [][]*Host   // [leaf][i]
	links  [][]*uplink // [leaf][spine]
}

// LeafSpine builds a two-tier Clos fabric: opts.Leaves leaf routers, each
// with opts.HostsPerLeaf hosts below it, and opts.Spines spine routers
// joined to every leaf. Every host, leaf and spine is its own namespace,
// every link a veth pair. Leaves reach other leaves' hosts through one ECMP
// route over all spines, hashed on the L4 5-tuple (see setL4Hash), so a
// flow's UDP source port picks its spine, for connected and unconnected
// sockets alike; spines route each leaf's host /24 to that leaf; hosts have
// a default route via their leaf. If anything fails, everything built so
// far is removed before returning.
func LeafSpine(ctx context.Context, opts LeafSpineOptions) (_ *Fabric, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bed{log: o.Logger, opts: Options{Prefix: o.Prefix, MTU: o.MTU, LossCorrelation: o.LossCorrelation}}
	f := &Fabric{bed: b, opts: o}
	defer b.undo.unwindOnError(&err, b.log)
	step := stepper(ctx, b.log, o.testHook)
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	if err := step("start"); err != nil {
		return nil, err
	}
	if err := f.makeNamespaces(nonce); err != nil {
		return nil, err
	}
	if err := step("namespaces"); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"sysctl", f.configureRouters},
		{"links", f.makeLinks},
		{"addresses", f.addAddresses},
		{"up", f.bringUp},
		{"routes", f.addRoutes},
		{"shaping", f.shape},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return nil, err
		}
		if err := step(s.name); err != nil {
			return nil, err
		}
	}
	b.log.Info("netlab: leaf-spine fabric up", "leaves", o.Leaves, "hosts_per_leaf", o.HostsPerLeaf,
		"spines", o.Spines, "mtu", o.MTU, "link_rate", o.LinkRate, "host_rate", o.HostRate)
	return f, nil
}

// newNS creates one namespace of the fabric and records its removal.
func (f *Fabric) newNS(nonce, name string) (*namespace, error) {
	ns, err := createNamespace(nsName(f.opts.Prefix, os.Getpid(), nonce, name))
	if err != nil {
		return nil, err
	}
	f.bed.undo.push("namespace "+ns.name, ns.close)
	return ns, nil
}

func (f *Fabric) makeNamespaces(nonce string) error {
	o := f.opts
	for l := range o.Leaves {
		ns, err := f.newNS(nonce, "leaf"+strconv.Itoa(l))
		if err != nil {
			return err
		}
		f.leaves = append(f.leaves, ns)
	}
	for s := range o.Spines {
		ns, err := f.newNS(nonce, "spine"+strconv.Itoa(s))
		if err != nil {
			return err
		}
		f.spines = append(f.spines, ns)
	}
	f.hosts = make([][]*Host, o.Leaves)
	for l := range o.Leaves {
		for i := range o.HostsPerLeaf {
			name := fmt.Sprintf("h%d-%d", l, i)
			ns, err := f.newNS(nonce, name)
			if err != nil {
				return err
			}
			f.hosts[l] = append(f.hosts[l], &Host{bed: f.bed, name: name, ns: ns})
		}
	}
	return nil
}

// configureRouters makes leaves and spines forward and sets the leaves'
// ECMP hash. It runs before any
// device exists, because devices take their per-device settings (rp_filter,
// disable_ipv6) from conf.default when created.
func (f *Fabric) configureRouters(context.Context) error {
	common := []sysctl{
		{key: "net.ipv4.ip_forward", value: "1"},
		// Return traffic comes back over another spine than it left by;
		// strict reverse-path filtering (inherited from the host's
		// init namespace on many distros) must not judge that.
		{key: "net.ipv4.conf.all.rp_filter", value: "0"},
		{key: "net.ipv4.conf.default.rp_filter", value: "0"},
		// No IPv6 on routers: its router/neighbour discovery chatter
		// would pollute the per-link packet counters.
		{key: "net.ipv6.conf.all.disable_ipv6", value: "1", optional: true},
		{key: "net.ipv6.conf.default.disable_ipv6", value: "1", optional: true},
	}
	leaf := append([]sysctl{
		// Keep using a nexthop whose neighbour entry failed (the kernel
		// default, made explicit): a black-holed link must stay in the
		// ECMP group, as it would with no routing protocol reacting.
		{key: "net.ipv4.fib_multipath_use_neigh", value: "0"},
	}, common...)
	if f.opts.HashSeed != 0 {
		leaf = append(leaf, sysctl{key: "net.ipv4.fib_multipath_hash_seed", value: strconv.FormatUint(uint64(f.opts.HashSeed), 10)})
	}
	for _, ns := range f.leaves {
		if err := ns.setSysctls(leaf); err != nil {
			return err
		}
		if err := f.setL4Hash(ns); err != nil {
			return err
		}
	}
	for _, ns := range f.spines {
		if err := ns.setSysctls(common); err != nil {
			return err
		}
	}
	return nil
}

// l4HashFields selects source and destination address, protocol, source
// and destination port for the custom multipath hash (policy 3).
const l4HashFields = "0x37"

// setL4Hash makes a leaf's ECMP hash the 5-tuple of every packet it
// forwards. Policy 1 would dissect the same five fields, but first uses a
// hash already on the packet if there is one, and a connected UDP socket
// stamps its packets with a random per-socket hash (sk_txhash) that
// survives veth: then the socket, not its source port, picks the spine,
// differently on every run (measured on 6.18). Policy 3 with these fields
// always dissects. Older kernels without it get policy 1, which still
// hashes the 5-tuple of unconnected sockets' packets.
func (f *Fabric) setL4Hash(ns *namespace) error {
	err := ns.setSysctls([]sysctl{
		{key: "net.ipv4.fib_multipath_hash_fields", value: l4HashFields},
		{key: "net.ipv4.fib_multipath_hash_policy", value: "3"},
	})
	if !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	f.bed.log.Warn("netlab: no custom multipath hash; connected sockets will not hash by port", "namespace", ns.name, "err", err)
	return ns.setSysctls([]sysctl{{key: "net.ipv4.fib_multipath_hash_policy", value: "1"}})
}

// addLink creates a veth pair and records the removal of both ends
// (explicitly, with their qdiscs and loss maps, rather than relying on
// namespace destruction, which a caller's socket could postpone).
func (f *Fabric) addLink(a *namespace, aName string, b *namespace, bName string) (*port, *port, error) {
	pa, pb, err := addVethPair(a, aName, b, bName, f.opts.MTU)
	if err != nil {
		return nil, nil, err
	}
	f.bed.undo.push("link "+pb.String(), pb.remove)
	f.bed.undo.push("link "+pa.String(), pa.remove)
	return pa, pb, nil
}

func (f *Fabric) makeLinks(context.Context) error {
	for l, leaf := range f.leaves {
		for i, h := range f.hosts[l] {
			hp, _, err := f.addLink(h.ns, "eth0", leaf, "h"+strconv.Itoa(i))
			if err != nil {
				return err
			}
			h.port = hp
			f.bed.hosts = append(f.bed.hosts, h)
		}
	}
	f.links = make([][]*uplink, len(f.leaves))
	for l, leaf := range f.leaves {
		for s, spine := range f.spines {
			lp, sp, err := f.addLink(leaf, "s"+strconv.Itoa(s), spine, "l"+strconv.Itoa(l))
			if err != nil {
				return err
			}
			f.links[l] = append(f.links[l], &uplink{leaf: l, spine: s, lp: lp, sp: sp})
		}
	}
	return nil
}

func (f *Fabric) addAddresses(context.Context) error {
	for l := range f.hosts {
		for i, h := range f.hosts[l] {
			leafEnd, hostEnd := hostLinkAddrs(l, i)
			if err := errors.Join(h.port.addAddr(hostEnd), h.port.peer.addAddr(leafEnd)); err != nil {
				return err
			}
		}
	}
	for _, row := range f.links {
		for _, u := range row {
			leafEnd, spineEnd := uplinkAddrs(u.leaf, u.spine)
			if err := errors.Join(u.lp.addAddr(leafEnd), u.sp.addAddr(spineEnd)); err != nil {
				return err
			}
		}
	}
	return nil
}

// allPorts lists both ends of every link.
func (f *Fabric) allPorts() []*port {
	var ps []*port
	for _, hs := range f.hosts {
		for _, h := range hs {
			ps = append(ps, h.port, h.port.peer)
		}
	}
	for _, row := range f.links {
		for _, u := range row {
			ps = append(ps, u.lp, u.sp)
		}
	}
	return ps
}

func (f *Fabric) bringUp(ctx context.Context) error {
	ps := f.allPorts()
	for _, p := range ps {
		if err := p.setUp(true); err != nil {
			return err
		}
	}
	for _, u := range f.uplinks() {
		u.up = true
	}
	// All are set up first so the waits overlap with link activation.
	for _, p := range ps {
		if err := p.waitRunning(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fabric) uplinks() []*uplink {
	var us []*uplink
	for _, row := range f.links {
		us = append(us, row...)
	}
	return us
}

func (f *Fabric) addRoutes(context.Context) error {
	defRoute := netip.MustParsePrefix("0.0.0.0/0")
	for _, hs := range f.hosts {
		for _, h := range hs {
			if err := h.port.addRoute(defRoute, h.port.peer.prefix.Addr()); err != nil {
				return err
			}
		}
	}
	// Spines: leaf l's hosts are behind the spine's port to leaf l.
	for _, row := range f.links {
		for _, u := range row {
			if err := u.sp.addRoute(hostSubnet(u.leaf), u.lp.prefix.Addr()); err != nil {
				return err
			}
		}
	}
	// Leaves: other leaves' hosts via every spine, equal cost.
	for l, leaf := range f.leaves {
		for m := range f.leaves {
			if m == l {
				continue
			}
			r := f.ecmpRoute(l, m)
			if err := leaf.nl.RouteAdd(&r); err != nil {
				return fmt.Errorf("netlab: %s: add ECMP route %s: %w", leaf.name, hostSubnet(m), err)
			}
		}
	}
	return nil
}

// ecmpRoute is leaf l's route to leaf m's hosts through every spine whose
// link to l is up.
func (f *Fabric) ecmpRoute(l, m int) netlink.Route {
	dst := hostSubnet(m)
	r := netlink.Route{
		Dst:   &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)},
		Scope: unix.RT_SCOPE_UNIVERSE,
	}
	for _, u := range f.links[l] {
		if u.up {
			r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{LinkIndex: u.lp.index, Gw: u.sp.prefix.Addr().AsSlice()})
		}
	}
	return r
}

func (f *Fabric) shape(context.Context) error {
	set := func(p *port, rate uint64) error {
		p.shape = shaping{rate: rate}
		if rate == 0 {
			return nil
		}
		return p.applyShaping()
	}
	for _, hs := range f.hosts {
		for _, h := range hs {
			if err := errors.Join(set(h.port, f.opts.HostRate), set(h.port.peer, f.opts.HostRate)); err != nil {
				return err
			}
		}
	}
	for _, u := range f.uplinks() {
		if err := errors.Join(set(u.lp, f.opts.LinkRate), set(u.sp, f.opts.LinkRate)); err != nil {
			return err
		}
	}
	return nil
}

// Hosts returns every host, leaf by leaf ("h0-0", "h0-1", ..., "h1-0", ...).
func (f *Fabric) Hosts() []*Host {
	var hs []*Host
	for _, row := range f.hosts {
		hs = append(hs, row...)
	}
	return hs
}

// Host returns host i under leaf, or nil if there is none.
func (f *Fabric) Host(leaf, i int) *Host {
	if leaf < 0 || leaf >= len(f.hosts) || i < 0 || i >= len(f.hosts[leaf]) {
		return nil
	}
	return f.hosts[leaf][i]
}

// Leaves is the number of leaf routers.
func (f *Fabric) Leaves() int { return f.opts.Leaves }

// Spines is the number of spine routers (equal-cost paths between leaves).
func (f *Fabric) Spines() int { return f.opts.Spines }

// HostSubnet is the /24 holding the hosts under leaf.
func (f *Fabric) HostSubnet(leaf int) netip.Prefix { return hostSubnet(leaf) }

// Namespaces names every namespace of the fabric (under /run/netns, for
// `ip netns exec`): leaves, spines, then hosts.
func (f *Fabric) Namespaces() []string {
	var names []string
	for _, ns := range append(append([]*namespace(nil), f.leaves...), f.spines...) {
		names = append(names, ns.name)
	}
	for _, h := range f.Hosts() {
		names = append(names, h.ns.name)
	}
	return names
}

// Close removes everything the fabric made: qdiscs, loss filters and their
// maps, every veth pair and every namespace. It is idempotent; later calls
// return nil. Sockets opened inside hosts are the caller's to close.
func (f *Fabric) Close() error {
	return f.bed.Close()
}
