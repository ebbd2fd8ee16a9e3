package netsim_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
)

// sprayer sends n packets of size bytes, all at once or one per gap,
// on the paths path(i) gives; it records what it receives.
type sprayer struct {
	n, size int
	gap     int64
	path    func(i int) uint16
	sent    int
	nextAt  int64
	gotAt   []int64
	gotTag  []byte
}

func (s *sprayer) Receive(now int64, pkt []byte) {
	s.gotAt = append(s.gotAt, now)
	s.gotTag = append(s.gotTag, pkt[0])
}

func (s *sprayer) Transmit(now int64, buf []byte) ([]byte, uint16, bool) {
	if s.sent >= s.n || now < s.nextAt {
		return nil, 0, false
	}
	buf[0] = byte(s.sent)
	p := uint16(0)
	if s.path != nil {
		p = s.path(s.sent)
	}
	s.sent++
	s.nextAt = now + s.gap
	return buf[:s.size], p, true
}

func (s *sprayer) Timeout() (int64, bool) {
	if s.sent < s.n && s.gap > 0 {
		return s.nextAt, true
	}
	return 0, false
}
func (s *sprayer) HandleTimeout(int64) {}

func newClos(t *testing.T, seed uint64, cfg netsim.ClosConfig) *netsim.Clos {
	t.Helper()
	c, err := netsim.NewClos(seed, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func addFlow(t *testing.T, c *netsim.Clos, src, dst int, a, b netsim.Endpoint) {
	t.Helper()
	if _, err := c.AddFlow(src, dst, a, b); err != nil {
		t.Fatal(err)
	}
}

func linkStats(t *testing.T, c *netsim.Clos, id netsim.LinkID) netsim.LinkStats {
	t.Helper()
	st, err := c.Link(id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func ser(bytes int, rate float64) int64 { return int64(float64(bytes) * (8e9 / rate)) }

// TestClosLatency: a packet between leaves crosses four links (host,
// leaf uplink, spine downlink, host), each serialising it at its rate
// and adding the hop delay; one under the same leaf crosses two and
// leaves the spines alone; what b sends comes back to a.
func TestClosLatency(t *testing.T) {
	cfg := netsim.ClosConfig{HostsPerLeaf: 2, Spines: 3, LinkRate: 10e9, HostRate: 40e9, Delay: 700 * time.Nanosecond}
	const size = 1000
	for _, tc := range []struct {
		name     string
		dst      int
		hops     int64
		fabric   bool
		wantTime int64
	}{
		{"across", 3, 4, true, 2*ser(size, 40e9) + 2*ser(size, 10e9) + 4*int64(700*time.Nanosecond)},
		{"same leaf", 1, 2, false, 2*ser(size, 40e9) + 2*int64(700*time.Nanosecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClos(t, 1, cfg)
			a, b := &sprayer{n: 1, size: size}, &sprayer{n: 1, size: size}
			addFlow(t, c, 0, tc.dst, a, b)
			c.Run(time.Second, func() bool { return false })
			if len(b.gotAt) != 1 || b.gotAt[0] != tc.wantTime || len(a.gotAt) != 1 || a.gotAt[0] != tc.wantTime {
				t.Fatalf("b got %v, a got %v; want one each at %d", b.gotAt, a.gotAt, tc.wantTime)
			}
			var spines uint64
			for s := range cfg.Spines {
				spines += linkStats(t, c, netsim.LinkID{Kind: netsim.LeafUplink, Leaf: 0, Spine: s}).Packets
			}
			if want := map[bool]uint64{true: 1, false: 0}[tc.fabric]; spines != want {
				t.Fatalf("leaf 0 sent %d packets to spines, want %d", spines, want)
			}
			if tot := c.Total(); tot.Packets != uint64(2*tc.hops) || tot.Bytes != uint64(2*tc.hops*size) {
				t.Fatalf("total %+v, want %d packet-hops", tot, 2*tc.hops)
			}
		})
	}
}

// TestClosECMP: each path goes through the spine Spine names, and the
// paths spread about evenly over the spines.
func TestClosECMP(t *testing.T) {
	cfg := netsim.ClosConfig{HostsPerLeaf: 2, Spines: 4, LinkRate: 100e9}
	c := newClos(t, 9, cfg)
	const n = 4096
	a := &sprayer{n: n, size: 100, path: func(i int) uint16 { return uint16(i) }}
	addFlow(t, c, 1, 2, a, &sprayer{})
	c.Run(time.Second, func() bool { return false })
	want := make([]uint64, cfg.Spines)
	for p := range n {
		s := c.Spine(1, 2, uint16(p))
		if s < 0 || s >= cfg.Spines {
			t.Fatalf("path %d: spine %d", p, s)
		}
		want[s]++
	}
	for s := range cfg.Spines {
		up := linkStats(t, c, netsim.LinkID{Kind: netsim.LeafUplink, Leaf: 0, Spine: s}).Packets
		down := linkStats(t, c, netsim.LinkID{Kind: netsim.SpineDownlink, Leaf: 1, Spine: s}).Packets
		if up != want[s] || down != want[s] {
			t.Errorf("spine %d: %d up, %d down, want %d", s, up, down, want[s])
		}
		if want[s] < n/4*85/100 || want[s] > n/4*115/100 {
			t.Errorf("spine %d carries %d of %d paths", s, want[s], n)
		}
	}
	if c.Spine(0, 1, 5) != -1 || c.Spine(0, 99, 5) != -1 {
		t.Error("same leaf or unknown host has a spine")
	}
	// Another seed hashes differently.
	c2 := newClos(t, 10, cfg)
	same := 0
	for p := range 256 {
		if c.Spine(1, 2, uint16(p)) == c2.Spine(1, 2, uint16(p)) {
			same++
		}
	}
	if same > 256/2 {
		t.Errorf("seeds 9 and 10 agree on %d of 256 paths", same)
	}
}

// TestClosDropTail: a burst from a fast NIC into one slow uplink fills
// its buffer and the rest is dropped; the queue never exceeds the buffer
// and every packet is either forwarded or dropped.
func TestClosDropTail(t *testing.T) {
	const size, n, buffer = 1000, 200, 20000
	cfg := netsim.ClosConfig{HostsPerLeaf: 1, Spines: 1, LinkRate: 1e9, HostRate: 100e9, Buffer: buffer}
	c := newClos(t, 1, cfg)
	b := &sprayer{}
	addFlow(t, c, 0, 1, &sprayer{n: n, size: size}, b)
	c.Run(time.Second, func() bool { return false })
	up := linkStats(t, c, netsim.LinkID{Kind: netsim.LeafUplink, Leaf: 0, Spine: 0})
	if up.Drops == 0 || up.Packets+up.Drops != n || up.MaxQueue > buffer || up.MaxQueue < buffer-size {
		t.Fatalf("uplink %+v: want drops, %d in all, max queue in (%d, %d]", up, n, buffer-size, buffer)
	}
	if uint64(len(b.gotAt)) != up.Packets {
		t.Fatalf("received %d, forwarded %d", len(b.gotAt), up.Packets)
	}
	// The bottleneck spaces arrivals by one serialisation.
	for i := 1; i < len(b.gotAt); i++ {
		if d := b.gotAt[i] - b.gotAt[i-1]; d != ser(size, 1e9) {
			t.Fatalf("arrivals %d and %d %d ns apart, want %d", i-1, i, d, ser(size, 1e9))
		}
	}
	// An unbounded NIC queue dropped nothing.
	if nic := linkStats(t, c, netsim.LinkID{Kind: netsim.HostUplink, Host: 0}); nic.Drops != 0 || nic.Packets != n {
		t.Fatalf("NIC %+v", nic)
	}
}

// TestClosBlackHole: a black hole drops what the leaf sends to that spine
// within its window, and nothing else.
func TestClosBlackHole(t *testing.T) {
	cfg := netsim.ClosConfig{HostsPerLeaf: 1, Spines: 2, LinkRate: 100e9}
	c := newClos(t, 3, cfg)
	// One packet per µs for 100 µs, alternating paths; find a path per
	// spine.
	paths := [2]uint16{}
	found := [2]bool{}
	for p := uint16(0); !found[0] || !found[1]; p++ {
		if s := c.Spine(0, 1, p); !found[s] {
			paths[s], found[s] = p, true
		}
	}
	a, b := &sprayer{n: 100, size: 500, gap: 1000, path: func(i int) uint16 { return paths[i%2] }}, &sprayer{}
	addFlow(t, c, 0, 1, a, b)
	if err := c.BlackHole(0, 1, netsim.Window{From: 20 * time.Microsecond, To: 60 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	c.Run(time.Second, func() bool { return false })
	hole := linkStats(t, c, netsim.LinkID{Kind: netsim.LeafUplink, Leaf: 0, Spine: 1})
	good := linkStats(t, c, netsim.LinkID{Kind: netsim.LeafUplink, Leaf: 0, Spine: 0})
	// Packets reach the leaf about when they are sent (fast links): the
	// 20 odd ones sent in [20, 60) µs vanish.
	if hole.BlackHoled != 20 || hole.Packets != 30 || good.Packets != 50 || good.BlackHoled != 0 || len(b.gotAt) != 80 {
		t.Fatalf("black-holed spine %+v, other %+v, received %d", hole, good, len(b.gotAt))
	}
	for i, tag := range b.gotTag {
		if sent := int(tag); sent%2 == 1 && sent >= 20 && sent < 60 {
			t.Fatalf("packet %d (arrival %d) crossed the black hole", sent, i)
		}
	}
}

// TestClosLossAndDeterminism: per-link loss drops about its share, and
// the same seed replays the same run while another seed does not.
func TestClosLossAndDeterminism(t *testing.T) {
	run := func(seed uint64) (*netsim.Clos, *sprayer) {
		cfg := netsim.ClosConfig{HostsPerLeaf: 2, Spines: 4, LinkRate: 10e9}
		c := newClos(t, seed, cfg)
		b := &sprayer{}
		addFlow(t, c, 0, 2, &sprayer{n: 10000, size: 800, path: func(i int) uint16 { return uint16(i * 7) }}, b)
		for s := range 4 {
			if err := c.SetLoss(netsim.LinkID{Kind: netsim.SpineDownlink, Leaf: 1, Spine: s}, 0.1); err != nil {
				t.Fatal(err)
			}
		}
		c.Run(time.Second, func() bool { return false })
		return c, b
	}
	c1, b1 := run(5)
	c2, b2 := run(5)
	_, b3 := run(6)
	if tot := c1.Total(); tot.Lost < 800 || tot.Lost > 1200 || uint64(len(b1.gotAt)) != 10000-tot.Lost {
		t.Fatalf("lost %d of 10000, received %d", tot.Lost, len(b1.gotAt))
	}
	if c1.Total() != c2.Total() || fmt.Sprint(b1.gotAt) != fmt.Sprint(b2.gotAt) {
		t.Fatal("same seed, different runs")
	}
	if fmt.Sprint(b1.gotAt) == fmt.Sprint(b3.gotAt) {
		t.Fatal("different seeds, same run")
	}
}

// TestClosErrors: bad shapes, hosts, links and probabilities are refused
// with ErrConfig.
func TestClosErrors(t *testing.T) {
	for _, cfg := range []netsim.ClosConfig{
		{Leaves: -1}, {Leaves: netsim.MaxLeaves + 1}, {HostsPerLeaf: -2}, {Spines: netsim.MaxSpines + 1},
		{LinkRate: -1}, {HostRate: -5}, {Delay: -time.Nanosecond}, {Buffer: -1}, {HostBuffer: -1},
	} {
		if _, err := netsim.NewClos(1, cfg); !errors.Is(err, netsim.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	c := newClos(t, 1, netsim.ClosConfig{})
	s := &sprayer{}
	for _, h := range [][2]int{{0, 0}, {-1, 3}, {0, c.Hosts()}} {
		if _, err := c.AddFlow(h[0], h[1], s, s); !errors.Is(err, netsim.ErrConfig) {
			t.Errorf("flow %v: %v", h, err)
		}
	}
	if _, err := c.AddFlow(0, 1, s, nil); !errors.Is(err, netsim.ErrConfig) {
		t.Errorf("nil endpoint: %v", err)
	}
	for _, id := range []netsim.LinkID{{Kind: netsim.HostUplink, Host: 8}, {Kind: netsim.LeafUplink, Leaf: 2}, {Kind: netsim.SpineDownlink, Spine: 4}, {Kind: 9}} {
		if _, err := c.Link(id); !errors.Is(err, netsim.ErrConfig) {
			t.Errorf("link %v: %v", id, err)
		}
	}
	if err := c.SetLoss(netsim.LinkID{Kind: netsim.HostDownlink}, 1.5); !errors.Is(err, netsim.ErrConfig) {
		t.Errorf("loss 1.5: %v", err)
	}
	if err := c.BlackHole(0, 0, netsim.Window{From: 2, To: 1}); !errors.Is(err, netsim.ErrConfig) {
		t.Errorf("empty window: %v", err)
	}
	if got := len(c.Links()); got != 2*8+2*2*4 {
		t.Errorf("%d links", got)
	}
	for _, id := range c.Links() {
		if _, err := c.Link(id); err != nil {
			t.Errorf("listed link %v: %v", id, err)
		}
	}
}
