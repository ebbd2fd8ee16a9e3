package netsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Clos limits: enough for the fabrics tests and benchmarks build, small
// enough that the per-event cost (every endpoint's Timeout is read at
// every step) stays sensible.
const (
	MaxLeaves       = 64
	MaxHostsPerLeaf = 1024
	MaxSpines       = 256
)

// ErrConfig is wrapped by the errors of NewClos and of the Clos methods
// given a host, link or probability that does not exist.
var ErrConfig = errors.New("netsim: bad configuration")

// ClosConfig shapes a two-tier leaf-spine (folded Clos) fabric. Zero
// fields take the defaults.
type ClosConfig struct {
	// Leaves (default 2), hosts under each leaf (default 4) and spines
	// (default 4): every leaf has one link to every spine, so two hosts
	// under different leaves have Spines equal-cost paths.
	Leaves, HostsPerLeaf, Spines int
	// LinkRate is the rate of every leaf<->spine link, each direction
	// (bits/s, default 100e9). With two leaves, Spines*LinkRate is the
	// bisection capacity per direction.
	LinkRate float64
	// HostRate is the rate of every host<->leaf link (bits/s, default
	// LinkRate): the host's NIC.
	HostRate float64
	// Delay is the propagation delay of every hop (link), >= 0.
	Delay time.Duration
	// Buffer is the drop-tail queue of every switch egress port (leaf
	// uplinks, spine downlinks, leaf-to-host links), in bytes, counting
	// the packet being serialised (default 512 KiB).
	Buffer int
	// HostBuffer is the queue of a host's NIC (bytes); 0 (the default)
	// is unbounded: a NIC holds what its transport hands it rather than
	// dropping it, so only the fabric drops.
	HostBuffer int
}

func (c ClosConfig) withDefaults() (ClosConfig, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Leaves, 2)
	def(&c.HostsPerLeaf, 4)
	def(&c.Spines, 4)
	def(&c.Buffer, 512<<10)
	if c.LinkRate == 0 {
		c.LinkRate = 100e9
	}
	if c.HostRate == 0 {
		c.HostRate = c.LinkRate
	}
	badRate := func(r float64) bool { return !(r > 0) || math.IsInf(r, 0) }
	switch {
	case c.Leaves < 1 || c.Leaves > MaxLeaves:
		return c, fmt.Errorf("netsim: %d leaves outside 1..%d: %w", c.Leaves, MaxLeaves, ErrConfig)
	case c.HostsPerLeaf < 1 || c.HostsPerLeaf > MaxHostsPerLeaf:
		return c, fmt.Errorf("netsim: %d hosts per leaf outside 1..%d: %w", c.HostsPerLeaf, MaxHostsPerLeaf, ErrConfig)
	case c.Spines < 1 || c.Spines > MaxSpines:
		return c, fmt.Errorf("netsim: %d spines outside 1..%d: %w", c.Spines, MaxSpines, ErrConfig)
	case badRate(c.LinkRate) || badRate(c.HostRate):
		return c, fmt.Errorf("netsim: link rate %g, host rate %g bits/s: want finite and > 0: %w", c.LinkRate, c.HostRate, ErrConfig)
	case c.Delay < 0:
		return c, fmt.Errorf("netsim: negative hop delay %v: %w", c.Delay, ErrConfig)
	case c.Buffer < 0 || c.HostBuffer < 0:
		return c, fmt.Errorf("netsim: buffer %d, host buffer %d bytes: want >= 0: %w", c.Buffer, c.HostBuffer, ErrConfig)
	}
	return c, nil
}

// LinkKind says which tier a link joins.
type LinkKind uint8

const (
	// HostUplink is a host's NIC: host to its leaf.
	HostUplink LinkKind = iota
	// HostDownlink is a leaf's port to one of its hosts.
	HostDownlink
	// LeafUplink is a leaf's port to a spine.
	LeafUplink
	// SpineDownlink is a spine's port to a leaf.
	SpineDownlink
)

// LinkID names one direction of one link: Host for host links, Leaf and
// Spine for fabric links.
type LinkID struct {
	Kind        LinkKind
	Host        int
	Leaf, Spine int
}

func (id LinkID) String() string {
	switch id.Kind {
	case HostUplink:
		return fmt.Sprintf("host%d->leaf", id.Host)
	case HostDownlink:
		return fmt.Sprintf("leaf->host%d", id.Host)
	case LeafUplink:
		return fmt.Sprintf("leaf%d->spine%d", id.Leaf, id.Spine)
	case SpineDownlink:
		return fmt.Sprintf("spine%d->leaf%d", id.Spine, id.Leaf)
	}
	return fmt.Sprintf("LinkKind(%d)", uint8(id.Kind))
}

// LinkStats count what one link did.
type LinkStats struct {
	// Packets and Bytes were queued and serialised.
	Packets, Bytes uint64
	// Drops found the queue full; Lost were dropped by the link's random
	// loss; BlackHoled were dropped by a black hole (leaf uplinks).
	Drops, Lost, BlackHoled uint64
	// MaxQueue is the largest backlog seen (bytes, including the packet
	// being serialised).
	MaxQueue int
}

func (s *LinkStats) add(o LinkStats) {
	s.Packets += o.Packets
	s.Bytes += o.Bytes
	s.Drops += o.Drops
	s.Lost += o.Lost
	s.BlackHoled += o.BlackHoled
	s.MaxQueue = max(s.MaxQueue, o.MaxQueue)
}

// link is one direction of one link: a FIFO served at a fixed rate. Its
// backlog is (busy - now) of serialisation, so no queue is kept.
type link struct {
	nsPerByte float64
	bufNs     int64 // backlog bound in ns of serialisation; 0: unbounded
	busy      int64 // when the last queued packet has left
	loss      float64
	holes     []Window
	st        LinkStats
}

type deadline struct {
	at          int64
	ok, touched bool
}

// flow is one connection: a at host src, b at host dst.
type flow struct {
	src, dst int
	eps      [2]Endpoint
}

// Clos is a leaf-spine fabric carrying any number of flows, each a pair
// of endpoints on two hosts. Build it with NewClos, add flows, then Run.
type Clos struct {
	cfg   ClosConfig
	seed  uint64
	now   int64
	rng   *rand.Rand
	q     pktHeap
	seq   uint64
	flows []flow
	// deadlines[i] is endpoint i's deadline as next() last read it;
	// touched: a packet arrived at the endpoint since.
	deadlines []deadline
	// links: hosts uplinks, then host downlinks, then leaf uplinks
	// (leaf*Spines+spine), then spine downlinks (spine*Leaves+leaf).
	links []link
	buf   []byte
	free  [][]byte
	evs   []*closPkt
}

// NewClos builds the fabric cfg describes; seed drives the ECMP hash and
// every random draw (link losses), so the same seed gives the same run.
func NewClos(seed uint64, cfg ClosConfig) (*Clos, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Clos{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		buf: make([]byte, 1<<16)}
	hosts := cfg.Leaves * cfg.HostsPerLeaf
	c.links = make([]link, 2*hosts+2*cfg.Leaves*cfg.Spines)
	for i := range c.links {
		l := &c.links[i]
		rate, buf := cfg.LinkRate, cfg.Buffer
		switch {
		case i < hosts:
			rate, buf = cfg.HostRate, cfg.HostBuffer
		case i < 2*hosts:
			rate = cfg.HostRate
		}
		l.nsPerByte = 8e9 / rate
		l.bufNs = int64(float64(buf) * l.nsPerByte)
	}
	return c, nil
}

// Hosts is the number of hosts; host h is under leaf h/HostsPerLeaf.
func (c *Clos) Hosts() int { return c.cfg.Leaves * c.cfg.HostsPerLeaf }

// Config is the configuration with its defaults filled in.
func (c *Clos) Config() ClosConfig { return c.cfg }

// Now is the virtual time (ns).
func (c *Clos) Now() int64 { return c.now }

// Rand is the simulation's random source, for workloads that must be
// deterministic with it.
func (c *Clos) Rand() *rand.Rand { return c.rng }

// AddFlow adds a connection between hosts src and dst (under the same
// leaf or not): what a sends goes to b, what b sends comes back to a. It
// returns the flow's index.
func (c *Clos) AddFlow(src, dst int, a, b Endpoint) (int, error) {
	switch {
	case src < 0 || src >= c.Hosts() || dst < 0 || dst >= c.Hosts():
		return 0, fmt.Errorf("netsim: flow between hosts %d and %d of %d: %w", src, dst, c.Hosts(), ErrConfig)
	case src == dst:
		return 0, fmt.Errorf("netsim: flow from host %d to itself: %w", src, ErrConfig)
	case a == nil || b == nil:
		return 0, fmt.Errorf("netsim: flow %d->%d without both endpoints: %w", src, dst, ErrConfig)
	}
	c.flows = append(c.flows, flow{src: src, dst: dst, eps: [2]Endpoint{a, b}})
	c.deadlines = append(c.deadlines, deadline{}, deadline{})
	return len(c.flows) - 1, nil
}

// Spine is the spine ECMP sends a packet of path (the UDP source-port
// entropy) from host src to host dst through: a hash of the two hosts,
// the path and the seed, modulo Spines. It is -1 for hosts under the same
// leaf (or out of range).
func (c *Clos) Spine(src, dst int, path uint16) int {
	if src < 0 || dst < 0 || src >= c.Hosts() || dst >= c.Hosts() || c.leaf(src) == c.leaf(dst) {
		return -1
	}
	h := mix(c.seed)
	h = mix(h ^ uint64(src))
	h = mix(h ^ uint64(dst)<<20)
	h = mix(h ^ uint64(path)<<40)
	return int(h % uint64(c.cfg.Spines))
}

// mix is the splitmix64 finaliser (with its increment, so 0 does not
// stay 0): every input bit moves every output bit.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (c *Clos) leaf(host int) int { return host / c.cfg.HostsPerLeaf }

// linkIndex maps id to its place in c.links.
func (c *Clos) linkIndex(id LinkID) (int, error) {
	hosts, l, s := c.Hosts(), c.cfg.Leaves, c.cfg.Spines
	switch id.Kind {
	case HostUplink, HostDownlink:
		if id.Host < 0 || id.Host >= hosts {
			break
		}
		if id.Kind == HostUplink {
			return id.Host, nil
		}
		return hosts + id.Host, nil
	case LeafUplink, SpineDownlink:
		if id.Leaf < 0 || id.Leaf >= l || id.Spine < 0 || id.Spine >= s {
			break
		}
		if id.Kind == LeafUplink {
			return 2*hosts + id.Leaf*s + id.Spine, nil
		}
		return 2*hosts + l*s + id.Spine*l + id.Leaf, nil
	}
	return 0, fmt.Errorf("netsim: no link %v in a fabric of %d leaves, %d hosts, %d spines: %w", id, l, hosts, s, ErrConfig)
}

// Links lists every link, host links first, in a fixed order.
func (c *Clos) Links() []LinkID {
	ids := make([]LinkID, 0, len(c.links))
	for h := range c.Hosts() {
		ids = append(ids, LinkID{Kind: HostUplink, Host: h})
	}
	for h := range c.Hosts() {
		ids = append(ids, LinkID{Kind: HostDownlink, Host: h})
	}
	for l := range c.cfg.Leaves {
		for s := range c.cfg.Spines {
			ids = append(ids, LinkID{Kind: LeafUplink, Leaf: l, Spine: s})
		}
	}
	for s := range c.cfg.Spines {
		for l := range c.cfg.Leaves {
			ids = append(ids, LinkID{Kind: SpineDownlink, Leaf: l, Spine: s})
		}
	}
	return ids
}

// Link returns what link id did.
func (c *Clos) Link(id LinkID) (LinkStats, error) {
	i, err := c.linkIndex(id)
	if err != nil {
		return LinkStats{}, err
	}
	return c.links[i].st, nil
}

// Total sums every link's counters (MaxQueue: the largest of any link).
func (c *Clos) Total() LinkStats {
	var t LinkStats
	for i := range c.links {
		t.add(c.links[i].st)
	}
	return t
}

// SetLoss makes link id drop each packet with probability p.
func (c *Clos) SetLoss(id LinkID, p float64) error {
	i, err := c.linkIndex(id)
	if err != nil {
		return err
	}
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("netsim: loss %g on %v outside [0, 1]: %w", p, id, ErrConfig)
	}
	c.links[i].loss = p
	return nil
}

// BlackHole drops everything leaf sends to spine within w (a dead port
// or a misprogrammed route: the packets vanish without a trace).
func (c *Clos) BlackHole(leaf, spine int, w Window) error {
	i, err := c.linkIndex(LinkID{Kind: LeafUplink, Leaf: leaf, Spine: spine})
	if err != nil {
		return err
	}
	if w.To <= w.From {
		return fmt.Errorf("netsim: black hole window [%v, %v) empty: %w", w.From, w.To, ErrConfig)
	}
	c.links[i].holes = append(c.links[i].holes, w)
	return nil
}
