//go:build linux

package netlab

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// flowsBy splits flow indices by whether they hash onto spine k.
func flowsBy(spines []int, k int) (on, off []int) {
	for i, s := range spines {
		if s == k {
			on = append(on, i)
		} else {
			off = append(off, i)
		}
	}
	return on, off
}

// busiest is the spine carrying the most flows.
func busiest(spines []int, n int) int {
	count := make([]int, n)
	for _, s := range spines {
		count[s]++
	}
	best := 0
	for s := range count {
		if count[s] > count[best] {
			best = s
		}
	}
	return best
}

// delivered sums got over the flows in idx.
func delivered(got []int, idx []int) int {
	n := 0
	for _, i := range idx {
		n += got[i]
	}
	return n
}

func TestLeafSpineImpairments(t *testing.T) {
	f := newFabric(t, LeafSpineOptions{})
	h0, h1 := f.Host(0, 0), f.Host(1, 0)
	rx1, rx0 := listenUDP(t, h1, 5200), listenUDP(t, h0, 5200)
	const nFlows = 64
	fwd, back := openFlows(t, h0, nFlows), openFlows(t, h1, nFlows)
	warmUp(t, fwd[0], rx1)
	warmUp(t, back[0], rx0)
	fwdSpine := learnSpines(t, f, 0, fwd, rx1)
	backSpine := learnSpines(t, f, 1, back, rx0)
	k := busiest(fwdSpine, f.Spines())
	fwdOn, fwdOff := flowsBy(fwdSpine, k)
	backOn, backOff := flowsBy(backSpine, k)
	t.Logf("spine %d carries %d of %d flows leaf0->leaf1, %d of %d back", k, len(fwdOn), nFlows, len(backOn), nFlows)
	if len(backOn) == 0 {
		t.Fatalf("no flow of leaf 1 hashes onto spine %d (of %d flows): hash not spreading", k, nFlows)
	}

	const perFlow = 10
	// check sends perFlow datagrams on every flow of both directions and
	// requires the flows in each "all" set to arrive whole, those in each
	// "none" set not at all.
	type expect struct{ fwdAll, fwdNone, backAll, backNone []int }
	check := func(name string, e expect) (fwdGot, backGot []int) {
		t.Helper()
		fwdGot = sendFlows(t, fwd, rx1, perFlow, 150*time.Millisecond)
		backGot = sendFlows(t, back, rx0, perFlow, 150*time.Millisecond)
		for _, c := range []struct {
			dir       string
			got       []int
			all, none []int
		}{{"leaf0->leaf1", fwdGot, e.fwdAll, e.fwdNone}, {"leaf1->leaf0", backGot, e.backAll, e.backNone}} {
			if n := delivered(c.got, c.all); n != len(c.all)*perFlow {
				t.Errorf("%s: %s: %d of %d datagrams of the flows that should pass", name, c.dir, n, len(c.all)*perFlow)
			}
			if n := delivered(c.got, c.none); n != 0 {
				t.Errorf("%s: %s: %d datagrams of flows that should be dropped arrived", name, c.dir, n)
			}
		}
		return fwdGot, backGot
	}
	all := func(idx ...[]int) []int { return slices.Concat(idx...) }

	// Black hole: leaf 0 drops exactly the flows it hashes onto spine k,
	// its route keeps all four spines, and spine k -> leaf 0 still works.
	before, err := f.LinkCounters(0, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.BlackHole(0, k, true); err != nil {
		t.Fatal(err)
	}
	check("black hole", expect{fwdAll: fwdOff, fwdNone: fwdOn, backAll: all(backOn, backOff)})
	after, err := f.LinkCounters(0, k)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.LossDropped < uint64(len(fwdOn)*perFlow) || d.Routed() < uint64(len(fwdOn)*perFlow) || d.RxPackets < uint64(len(backOn)*perFlow) {
		t.Errorf("black-holed link counters: %+v; want >= %d dropped and routed, >= %d received", d, len(fwdOn)*perFlow, len(backOn)*perFlow)
	}
	if d.TxPackets > 2 { // what the filter drops never reaches the link
		t.Errorf("black-holed link sent %d packets", d.TxPackets)
	}
	if n := len(ecmpNexthops(t, f, 0, 1)); n != 4 {
		t.Errorf("black hole changed leaf 0's route: %d live nexthops, want 4", n)
	}
	if err := f.BlackHole(0, k, false); err != nil {
		t.Fatal(err)
	}
	check("black hole off", expect{fwdAll: all(fwdOn, fwdOff), backAll: all(backOn, backOff)})

	// Loss on the link hits the flows crossing it, in both directions,
	// and no others.
	if err := f.SetLinkLoss(0, k, 0.5); err != nil {
		t.Fatal(err)
	}
	fwdGot, backGot := check("loss", expect{fwdAll: fwdOff, backAll: backOff})
	for _, c := range []struct {
		dir string
		got []int
		on  []int
	}{{"leaf0->leaf1", fwdGot, fwdOn}, {"leaf1->leaf0", backGot, backOn}} {
		sent := len(c.on) * perFlow
		frac := 1 - float64(delivered(c.got, c.on))/float64(sent)
		t.Logf("50%% loss on link 0-%d, %s: %.1f%% of %d lost", k, c.dir, 100*frac, sent)
		// Binomial: 4 sd either side (at least 16 of the forward flows
		// cross the busiest spine, so sd <= 4% there).
		if tol := 4 * 0.5 / math.Sqrt(float64(sent)); math.Abs(frac-0.5) > tol {
			t.Errorf("%s: lost %.1f%% of %d on a 50%% lossy link, want 50%% +- %.0f%%", c.dir, 100*frac, sent, 100*tol)
		}
	}
	// A black hole on a lossy link drops everything, and the loss comes
	// back when it ends.
	if err := f.BlackHole(0, k, true); err != nil {
		t.Fatal(err)
	}
	check("black hole over loss", expect{fwdAll: fwdOff, fwdNone: fwdOn, backAll: backOff})
	if err := f.BlackHole(0, k, false); err != nil {
		t.Fatal(err)
	}
	if fwdGot, _ := check("loss again", expect{fwdAll: fwdOff, backAll: backOff}); delivered(fwdGot, fwdOn) == len(fwdOn)*perFlow {
		t.Error("loss did not come back after the black hole ended")
	}
	if err := f.SetLinkLoss(0, k, 0); err != nil {
		t.Fatal(err)
	}
	check("loss off", expect{fwdAll: all(fwdOn, fwdOff), backAll: all(backOn, backOff)})

	// Link down: leaf 0 rehashes its flows onto the other spines; leaf 1,
	// with no routing protocol, keeps sending through spine k, which has
	// lost its route to leaf 0.
	if err := f.SetLinkUp(t.Context(), 0, k, false); err != nil {
		t.Fatal(err)
	}
	if n := len(ecmpNexthops(t, f, 0, 1)); n != 3 {
		t.Errorf("link down: leaf 0's route has %d live nexthops, want 3", n)
	}
	base, err := f.LeafCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	check("link down", expect{fwdAll: all(fwdOn, fwdOff), backAll: backOff, backNone: backOn})
	if spread := routedDelta(t, f, 0, base); spread[k] != 0 {
		t.Errorf("link down: %d packets routed onto it: %v", spread[k], spread)
	}
	if err := f.SetLinkUp(t.Context(), 0, k, true); err != nil {
		t.Fatal(err)
	}
	if n := len(ecmpNexthops(t, f, 0, 1)); n != 4 {
		t.Errorf("link up: leaf 0's route has %d live nexthops, want 4", n)
	}
	check("link up", expect{fwdAll: all(fwdOn, fwdOff), backAll: all(backOn, backOff)})
	if again := learnSpines(t, f, 0, fwd, rx1); !slices.Equal(again, fwdSpine) {
		t.Errorf("flows hash differently after the link came back:\n%v\n%v", fwdSpine, again)
	}

	// Every link of a leaf down removes its route; bringing one back
	// restores it with that spine only.
	for s := range f.Spines() {
		if err := f.SetLinkUp(t.Context(), 1, s, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetLinkUp(t.Context(), 1, 2, true); err != nil {
		t.Fatal(err)
	}
	if nh := ecmpNexthops(t, f, 1, 0); len(nh) != 1 || nh[0].LinkIndex != f.links[1][2].lp.index {
		t.Errorf("one link back up: leaf 1's route is %v, want spine 2 only", nh)
	}
	// Leaf 0 still sprays over all spines, but only spine 2 can reach
	// leaf 1 now.
	on2, off2 := flowsBy(fwdSpine, 2)
	check("one spine", expect{fwdAll: on2, fwdNone: off2, backAll: all(backOn, backOff)})
}

func TestLeafSpineHashFollowsPort(t *testing.T) {
	requireNetlab(t)
	const seed = 0x5eed
	const nFlows = 32
	// learn maps fixed source ports to spines in a fresh fabric, from
	// unconnected and from connected sockets.
	learn := func(connected bool) []int {
		f, err := LeafSpine(t.Context(), LeafSpineOptions{Prefix: lsPrefix, HashSeed: seed})
		if errors.Is(err, errors.ErrUnsupported) && strings.Contains(err.Error(), "fib_multipath_hash_seed") {
			t.Skipf("skipping: kernel has no fib_multipath_hash_seed (< 6.11), flow mapping differs per boot: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		src, dst := f.Host(0, 0), f.Host(1, 0)
		rx := listenUDP(t, dst, 5300)
		var flows []*net.UDPConn
		err = src.Do(func() error {
			for i := range nFlows {
				la := net.UDPAddrFromAddrPort(netip.AddrPortFrom(src.Addr(), uint16(42000+i)))
				var c *net.UDPConn
				var err error
				if connected {
					c, err = net.DialUDP("udp4", la, net.UDPAddrFromAddrPort(addrPort(rx)))
				} else {
					c, err = net.ListenUDP("udp4", la)
				}
				if err != nil {
					return err
				}
				flows = append(flows, c)
			}
			return nil
		})
		defer func() {
			for _, c := range flows {
				c.Close()
			}
		}()
		if err != nil {
			t.Fatal(err)
		}
		if !connected {
			warmUp(t, flows[0], rx)
			return learnSpines(t, f, 0, flows, rx)
		}
		// learnSpines sends with WriteTo, which a connected socket refuses;
		// wrap each in a datagram "flow" that sends with Write.
		spines := make([]int, nFlows)
		for i, c := range flows {
			base, err := f.LeafCounters(0)
			if err != nil {
				t.Fatal(err)
			}
			for seq := range 3 {
				if _, err := c.Write(flowMsg(i, seq)); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				if _, _, err := recvOne(rx, 2*time.Second); err != nil {
					t.Fatalf("connected flow %d: %v", i, err)
				}
			}
			spines[i] = -1
			for s, n := range routedDelta(t, f, 0, base) {
				if n >= 3 {
					spines[i] = s
				}
			}
		}
		return spines
	}
	first := learn(false)
	again := learn(false)
	conn := learn(true)
	t.Logf("ports 42000+: unconnected %v", first)
	if !slices.Equal(first, again) {
		t.Errorf("same seed, same ports, different spines:\n%v\n%v", first, again)
	}
	// A connected socket carries a random per-socket hash; the leaves
	// must ignore it and still hash the port.
	if !slices.Equal(first, conn) {
		t.Errorf("connected sockets hash differently from unconnected ones on the same ports:\n%v\n%v", first, conn)
	}
	used := map[int]bool{}
	for _, s := range first {
		used[s] = true
	}
	if len(used) != 4 {
		t.Errorf("%d flows used spines %v, want all 4", nFlows, used)
	}
}

func TestLeafSpineRateLimit(t *testing.T) {
	const rate = 20_000_000
	f := newFabric(t, LeafSpineOptions{Spines: 2, HostsPerLeaf: 1, LinkRate: rate})
	src, dst := f.Host(0, 0), f.Host(1, 0)
	rx := listenUDP(t, dst, 5400)
	flows := openFlows(t, src, 16)
	warmUp(t, flows[0], rx)
	spines := learnSpines(t, f, 0, flows, rx)
	on0, on1 := flowsBy(spines, 0)
	if len(on0) == 0 || len(on1) == 0 {
		t.Fatalf("16 flows all on one spine: %v", spines)
	}
	drain(rx)

	const payload = 1472
	const dur = 600 * time.Millisecond
	// tbf counts L2 frames: payload + UDP/IP/Ethernet headers.
	budget := func(bps uint64) float64 {
		return float64(bps) / 8 * dur.Seconds() * payload / (payload + 8 + 20 + ethHeader)
	}
	// One flow takes one spine: capped at LinkRate though offered 3x.
	one := paceBlast(t, flows[:1], rx, payload, 3*rate, dur)
	r1 := float64(one) / budget(rate)
	// Flows on both spines: capped at the bisection, Spines*LinkRate.
	both := []*net.UDPConn{flows[on0[0]], flows[on1[0]]}
	two := paceBlast(t, both, rx, payload, 6*rate, dur)
	r2 := float64(two) / budget(2*rate)
	t.Logf("one flow: %.2f of LinkRate; a flow per spine: %.2f of 2*LinkRate (%.2f of LinkRate)", r1, r2, float64(two)/budget(rate))
	// Upper bounds: the limiters work (bucket and queue add a few %).
	// Lower bounds: loose; a loaded 2-core machine can lag the sender.
	if r1 > 1.2 || r1 < 0.5 {
		t.Errorf("one flow got %.2f of LinkRate, want 0.5..1.2", r1)
	}
	if r2 > 1.2 || r2 < 0.5 {
		t.Errorf("two spines got %.2f of 2*LinkRate, want 0.5..1.2", r2)
	}
	if float64(two) < 1.4*float64(one) {
		t.Errorf("two spines carried %d B, one %d B: the second spine added no capacity", two, one)
	}
	// The limiter, not the loss filter, dropped the excess.
	cs, err := f.LeafCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	for s, c := range cs {
		if c.RateDropped == 0 || c.LossDropped != 0 {
			t.Errorf("spine %d: %+v; want rate drops and no loss drops", s, c)
		}
	}
}
