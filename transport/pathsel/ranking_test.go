package pathsel_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/internal/sim/pathbench"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/cc"
	"github.com/vstellar/vstellar/transport/pathsel"
)

// leafSpine is the ranking's fabric: 2 leaves of 4 hosts, 4 spines;
// hosts at 50 Gb/s, spine links at 25 Gb/s, so a leaf's hosts can send
// twice what its uplinks carry and the spines are the bottleneck.
var leafSpine = netsim.ClosConfig{HostsPerLeaf: 4, Spines: 4, LinkRate: 25e9, HostRate: 50e9, Delay: time.Microsecond}

// settings are every selector's transport: 8 KiB packets (MTU 9000), a
// fixed window of 24 packets (a few BDPs), selective repeat. Spraying
// reorders by the spines' queue differences, so the count rule
// (DupThresh) is off and the reordering time (RACK) detects losses,
// tightened from 250 µs.
var settings = transport.Config{MaxPayload: 8192, Window: 24, DupThresh: 24, ReorderWindow: 50 * time.Microsecond}

// runAll runs scenario(kind) for every kind, in parallel, as subtests of
// name.
func runAll(t *testing.T, name string, scenario func(pathsel.Kind) pathbench.Scenario) map[pathsel.Kind]*pathbench.Result {
	t.Helper()
	var mu sync.Mutex
	res := map[pathsel.Kind]*pathbench.Result{}
	t.Run(name, func(t *testing.T) {
		for _, k := range pathsel.Kinds() {
			t.Run(k.String(), func(t *testing.T) {
				t.Parallel()
				r, err := pathbench.Run(scenario(k))
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Violations) > 0 || r.Unfinished > 0 {
					t.Fatalf("%d flows unfinished; violations: %s", r.Unfinished, strings.Join(r.Violations, "; "))
				}
				mu.Lock()
				res[k] = r
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	return res
}

// TestRanking: a permutation of long transfers both ways across the
// spines. Every selector completes every message exactly once (the
// harness checks); the best sprayer gets >= 0.85 of the bisection and
// >= 1.3x Single, whose flows collide under ECMP (the permutation ends
// when the most loaded spine link has carried its flows).
func TestRanking(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	goodput := map[pathsel.Kind][]float64{}
	for _, seed := range seeds {
		res := runAll(t, fmt.Sprintf("seed%d", seed), func(k pathsel.Kind) pathbench.Scenario {
			return pathbench.Scenario{Fabric: leafSpine, Seed: seed, Selector: pathsel.Config{Kind: k}, Transport: settings,
				Bidirectional: true, Messages: 4}
		})
		for k, r := range res {
			for _, f := range r.Flows {
				if f.OK != 4 || f.Status != transport.StatusOK {
					t.Errorf("seed %d %v: flow %d->%d: %d OK, %v", seed, k, f.Src, f.Dst, f.OK, f.Status)
				}
			}
			goodput[k] = append(goodput[k], r.Goodput)
		}
		// Single's makespan is its most loaded spine link's: the flows
		// sharing it each get a share of one link.
		flows, err := pathbench.Plan(pathbench.Scenario{Fabric: leafSpine, Seed: seed, Bidirectional: true})
		if err != nil {
			t.Fatal(err)
		}
		load := map[[2]int]int{}
		for _, f := range flows {
			load[[2]int{f.Src / leafSpine.HostsPerLeaf, f.Spine}]++
		}
		worst := 0
		for _, n := range load {
			worst = max(worst, n)
		}
		// 8 flows on 2x4 links: 1/worst of the bisection at best.
		if g := res[pathsel.Single].Goodput; g > 1.02/float64(worst) {
			t.Errorf("seed %d: single got %.3f with %d flows on one link", seed, g, worst)
		}
	}
	mean := func(k pathsel.Kind) float64 {
		s := 0.0
		for _, g := range goodput[k] {
			s += g
		}
		return s / float64(len(goodput[k]))
	}
	kinds := pathsel.Kinds()
	slices.SortStableFunc(kinds, func(a, b pathsel.Kind) int {
		if mean(a) > mean(b) {
			return -1
		}
		if mean(a) < mean(b) {
			return 1
		}
		return 0
	})
	var tab strings.Builder
	fmt.Fprintf(&tab, "goodput / bisection, seeds %v, both directions:\n%-8s %6s  %s\n", seeds, "kind", "mean", "per seed")
	for _, k := range kinds {
		fmt.Fprintf(&tab, "%-8v %6.3f  %.3f\n", k, mean(k), goodput[k])
	}
	t.Log(tab.String())
	best := kinds[0]
	if best == pathsel.Single {
		best = kinds[1]
	}
	if mean(best) < 0.85 {
		t.Errorf("best sprayer %v: %.3f of the bisection, want >= 0.85", best, mean(best))
	}
	if ratio := mean(best) / mean(pathsel.Single); ratio < 1.3 {
		t.Errorf("best sprayer %v: %.2fx single, want >= 1.3", best, ratio)
	}
}

// TestBlackHoleRanking: one spine's link from leaf 0 black-holes 1 ms
// into a one-way permutation; the spine chosen is the one ECMP hashes a
// Single flow onto. Single's flows through it stall and fail
// (RETRY_EXCEEDED, the rest flushed) while its others complete; every
// sprayer completes every message, takes the dead paths down (REPS: one
// of its flows at least), and gets back most of what the surviving
// spines carry.
func TestBlackHoleRanking(t *testing.T) {
	const msgs = 16
	at := time.Millisecond
	base := pathbench.Scenario{Fabric: leafSpine, Seed: 1, Transport: settings, Messages: msgs}
	flows, err := pathbench.Plan(base)
	if err != nil {
		t.Fatal(err)
	}
	dead := flows[0].Spine
	res := runAll(t, "blackhole", func(k pathsel.Kind) pathbench.Scenario {
		sc := base
		sc.Selector.Kind = k
		sc.BlackHole = &pathbench.BlackHole{Leaf: 0, Spine: dead, At: at}
		return sc
	})
	surviving := float64(leafSpine.Spines-1) / float64(leafSpine.Spines)
	best := 0.0 // the best sprayer's recovery
	var tab strings.Builder
	fmt.Fprintf(&tab, "spine %d black-holed from leaf 0 at %v (%.2f of the bisection left):\n%-8s %5s %6s %6s %9s %5s %5s\n",
		dead, at, surviving, "kind", "ok", "before", "after", "recovered", "down", "rto")
	for _, k := range pathsel.Kinds() {
		r := res[k]
		ok, end, down, rto := 0, r.Makespan, 0, uint64(0)
		for _, f := range r.Flows {
			if f.Status == transport.StatusOK {
				ok++
				end = min(end, f.Finish)
			}
			down += f.PathsDown
			rto += f.Stats.Timeouts
		}
		// Before: after the start; after: from 3 ms past the black hole
		// (the selectors have found the dead paths) until a flow ends.
		from := at + 3*time.Millisecond
		if end < from+time.Millisecond {
			t.Fatalf("%v: first flow done at %v, too soon to measure the recovery", k, end)
		}
		before, after := r.Rate(200*time.Microsecond, at), r.Rate(from, end)
		// Recovered: the share of what the surviving spines could carry,
		// or of the selector's own rate before, if that was less.
		recovered := after / min(before, surviving)
		fmt.Fprintf(&tab, "%-8v %2d/%-2d %6.3f %6.3f %9.2f %5d %5d\n", k, ok, len(r.Flows), before, after, recovered, down, rto)
		if k == pathsel.Single {
			for _, f := range r.Flows {
				// Its data crosses the dead spine, or not.
				want := transport.StatusOK
				if f.Spine == dead {
					want = transport.StatusRetryExceeded
				}
				if f.Status != want || want == transport.StatusOK && f.OK != msgs {
					t.Errorf("single flow %d->%d on spine %d: %v after %d OK, want %v", f.Src, f.Dst, f.Spine, f.Status, f.OK, want)
				}
			}
			continue
		}
		if ok != len(r.Flows) {
			t.Errorf("%v: %d of %d flows completed", k, ok, len(r.Flows))
		}
		for _, f := range r.Flows {
			// A REPS flow may finish without taking a dead path down:
			// it reuses the entropies that worked and, after a timeout,
			// stops exploring (freeze); its flows together do.
			if f.OK != msgs || f.PathsDown == 0 && k != pathsel.REPS {
				t.Errorf("%v: flow %d->%d: %d OK, %d paths down", k, f.Src, f.Dst, f.OK, f.PathsDown)
			}
		}
		if down == 0 {
			t.Errorf("%v: no path taken down", k)
		}
		if recovered < 0.5 {
			t.Errorf("%v: %.3f of the bisection after the black hole, %.3f before: recovered %.2f, want >= 0.5", k, after, before, recovered)
		}
		best = max(best, recovered)
	}
	t.Log(tab.String())
	if best < 0.8 {
		t.Errorf("best sprayer recovered %.2f of the surviving capacity, want >= 0.8", best)
	}
}

// TestSprayReordering: the spray benchmark's testbed in the simulator
// (250 Mb/s spine links, 500 Mb/s hosts, 9000-byte frames, CUBIC, two
// 1 MiB WRITEs outstanding per flow, both directions). A queued frame
// delays a spine's packets by 290 µs, so spraying reorders beyond the
// fixed thresholds: with them (ReorderFixed) the sprayers resend several
// percent of their packets for nothing and CUBIC, taking each for a
// loss, leaves the spines idle part of the time. Adaptive detection
// resends a fraction of that and fills the bisection.
func TestSprayReordering(t *testing.T) {
	fabric := netsim.ClosConfig{HostsPerLeaf: 4, Spines: 4, LinkRate: 250e6, HostRate: 500e6, Delay: 5 * time.Microsecond, Buffer: 900 << 10}
	type outcome struct{ goodput, resent float64 }
	run := func(k pathsel.Kind, mode transport.ReorderMode) outcome {
		r, err := pathbench.Run(pathbench.Scenario{Fabric: fabric, Seed: 1, Selector: pathsel.Config{Kind: k},
			Transport: transport.Config{MaxPayload: 8892, Reordering: mode},
			NewCC: func() transport.CongestionControl {
				c, err := cc.New(cc.Config{Kind: cc.KindCubic})
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
			Bidirectional: true, Messages: 16, Outstanding: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Violations) > 0 || r.Unfinished > 0 {
			t.Fatalf("%v %v: %d flows unfinished; violations: %s", k, mode, r.Unfinished, strings.Join(r.Violations, "; "))
		}
		// Goodput while every flow runs (the tail, where some have
		// finished, measures the permutation, not the transport).
		first, sent, resent := r.Makespan, uint64(0), uint64(0)
		for _, f := range r.Flows {
			first = min(first, f.Finish)
			sent += f.Stats.DataSent
			resent += f.Stats.Retransmits
		}
		return outcome{goodput: r.Rate(50*time.Millisecond, first), resent: float64(resent) / float64(sent)}
	}
	for _, k := range []pathsel.Kind{pathsel.OPS, pathsel.RR, pathsel.P2C, pathsel.REPS} {
		fixed, adaptive := run(k, transport.ReorderFixed), run(k, transport.ReorderAdaptive)
		t.Logf("%-5v fixed: %.3f of the bisection, %.1f%% resent; adaptive: %.3f, %.1f%% resent",
			k, fixed.goodput, 100*fixed.resent, adaptive.goodput, 100*adaptive.resent)
		if fixed.resent < 0.03 {
			t.Errorf("%v: the fixed thresholds resent only %.1f%%: the test shows no reordering", k, 100*fixed.resent)
		}
		if adaptive.resent > fixed.resent/4 || adaptive.goodput < 0.85 || adaptive.goodput < fixed.goodput+0.1 {
			t.Errorf("%v: adaptive %.3f of the bisection, %.1f%% resent; fixed %.3f, %.1f%%", k, adaptive.goodput, 100*adaptive.resent, fixed.goodput, 100*fixed.resent)
		}
	}
}
