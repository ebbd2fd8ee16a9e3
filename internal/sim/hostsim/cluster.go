package hostsim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/netlab"
)

// ClusterOptions configure NewCluster.
type ClusterOptions struct {
	// Net is the leaf-spine fabric (leaves, hosts per leaf, spines, MTU,
	// link and host rates, ECMP hash seed). Its Prefix names the
	// namespaces (default "vsclus").
	Net netlab.LeafSpineOptions
	// Spray is every connection's path selector (daemon.FabricSpec.Spray:
	// single, ops, rr, dwrr, bestrtt, p2c, reps; default single).
	Spray string
	// CC is the congestion controller (daemon.FabricSpec.CC: fixed,
	// swift, cubic; default fixed).
	CC string
	// Paths is the number of UDP source ports each host's fabric sends
	// from (default 1): the entropies a selector spreads over.
	Paths int
	// Recovery is the transport's loss recovery, "selective" (default)
	// or "go-back-n".
	Recovery string
	Log      *slog.Logger
}

// Cluster is one host per host of a leaf-spine fabric
// (internal/netlab.LeafSpine), each an in-process vstellard whose
// cross-host fabric listens inside that host's namespace. Host i (in
// Fabric.Hosts order, leaf by leaf) owns the GID prefix fec0:0:i+1:i+1::/64
// and knows every other host as a peer; all share one cluster secret.
type Cluster struct {
	// Hosts are the daemons, in Fabric.Hosts order.
	Hosts []*Host
	// Fabric is the network: its BlackHole, SetLinkLoss and SetLinkUp
	// change links under running traffic, LeafCounters show the spread.
	Fabric *netlab.Fabric
	// Where says which network joins the hosts, for reports.
	Where string
	group hostGroup
	per   int // hosts per leaf
}

// NewCluster builds the fabric and starts a daemon on every host. It
// needs network namespaces (root): there is no loopback fallback, since
// a single loopback has no paths to spread over.
func NewCluster(ctx context.Context, o ClusterOptions) (_ *Cluster, err error) {
	if err := netlab.Available(); err != nil {
		return nil, fmt.Errorf("hostsim: a cluster needs network namespaces: %w", err)
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	n := o.Net
	if n.Prefix == "" {
		n.Prefix = "vsclus"
	}
	if c.Fabric, err = netlab.LeafSpine(ctx, n); err != nil {
		return nil, fmt.Errorf("hostsim: network: %w", err)
	}
	hs := c.Fabric.Hosts()
	c.per = len(hs) / c.Fabric.Leaves()
	nets := make([]hostNet, len(hs))
	for i, h := range hs {
		nets[i] = hostNet{name: h.Name(), addr: netip.AddrPortFrom(h.Addr(), FabricPort), listenIn: h.Do}
	}
	mtu := n.MTU
	if mtu == 0 {
		mtu = 1500 // LeafSpine's default
	}
	tmpl := daemon.FabricSpec{MTU: mtu, Paths: o.Paths, Recovery: o.Recovery, Spray: o.Spray, CC: o.CC}
	if err := c.group.start(ctx, nets, tmpl, o.Log); err != nil {
		return nil, err
	}
	c.Hosts = c.group.hosts
	c.Where = fmt.Sprintf("leaf-spine: %d leaves x %d hosts, %d spines, MTU %d", c.Fabric.Leaves(), c.per, c.Fabric.Spines(), mtu)
	if n.LinkRate > 0 {
		c.Where += fmt.Sprintf(", leaf-spine links %s", rateName(n.LinkRate))
	}
	if n.HostRate > 0 {
		c.Where += fmt.Sprintf(", host links %s", rateName(n.HostRate))
	}
	return c, nil
}

// Host returns the daemon of host i under leaf (nil if there is none).
func (c *Cluster) Host(leaf, i int) *Host {
	if leaf < 0 || i < 0 || i >= c.per {
		return nil
	}
	if k := leaf*c.per + i; k < len(c.Hosts) {
		return c.Hosts[k]
	}
	return nil
}

// Close stops every host (their VMs first), then tears the fabric down.
// Later calls return nil.
func (c *Cluster) Close() error {
	err := c.group.close()
	if c.Fabric != nil {
		err = errors.Join(err, c.Fabric.Close()) // idempotent
	}
	return err
}

func rateName(bps uint64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.3g Gb/s", float64(bps)/1e9)
	}
	return fmt.Sprintf("%.3g Mb/s", float64(bps)/1e6)
}

// What Pair and Cluster share: hosts that all know each other, started
// from one fabric template with a cluster secret made for them.

// hostNet is where one host's fabric listens and how its socket gets
// opened there (nil: in the caller's namespace).
type hostNet struct {
	name     string // for the log
	addr     netip.AddrPort
	listenIn func(open func() error) error
}

// hostGroup is hosts sharing a secret file, each knowing every other as
// a peer.
type hostGroup struct {
	hosts  []*Host
	secret string
}

// start writes a fresh secret and starts one in-process daemon per net:
// host i owns hostPrefix(i) and listens at nets[i].addr; the others are
// its peers; tmpl gives the rest of its FabricSpec. On error what was
// started stays in g for close.
func (g *hostGroup) start(ctx context.Context, nets []hostNet, tmpl daemon.FabricSpec, log *slog.Logger) error {
	f, err := os.CreateTemp("", "vstellar-fabric-*.key")
	if err != nil {
		return fmt.Errorf("hostsim: fabric secret: %w", err)
	}
	g.secret = f.Name()
	_, err = f.WriteString(rand.Text())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("hostsim: fabric secret: %w", err)
	}
	for i, n := range nets {
		spec := tmpl
		spec.Listen, spec.GIDPrefix, spec.SecretFile = n.addr, hostPrefix(i), g.secret
		spec.Peers = make([]remote.Peer, 0, len(nets)-1)
		for j, m := range nets {
			if j != i {
				spec.Peers = append(spec.Peers, remote.Peer{GIDPrefix: hostPrefix(j), Addr: m.addr})
			}
		}
		hlog := log
		if hlog != nil {
			hlog = hlog.With("host", i+1)
			if n.name != "" {
				hlog = hlog.With("netns", n.name)
			}
		}
		h, err := New(ctx, Options{Log: hlog, Fabric: &spec, ListenIn: n.listenIn})
		if err != nil {
			return fmt.Errorf("hostsim: host %d: %w", i+1, err)
		}
		g.hosts = append(g.hosts, h)
	}
	return nil
}

// close stops the hosts and removes the secret; it is idempotent.
func (g *hostGroup) close() error {
	var errs []error
	for _, h := range g.hosts {
		errs = append(errs, h.Close())
	}
	g.hosts = nil
	if g.secret != "" {
		errs = append(errs, os.Remove(filepath.Clean(g.secret)))
		g.secret = ""
	}
	return errors.Join(errs...)
}

// hostPrefix is host i's GID prefix, fec0:0:i+1:i+1::/64: InfiniBand's
// site-local form, whose FLID (bytes 4-5) and subnet (bytes 6-7) tell UCX
// and NCCL that a device on another host is reachable through a router
// (docs/operations.md, "Between hosts").
func hostPrefix(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfe, 0xc0, 5: byte(i + 1), 7: byte(i + 1)}), 64)
}
