package pathbench_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/internal/sim/pathbench"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/pathsel"
)

var small = pathbench.Scenario{
	Fabric:    netsim.ClosConfig{HostsPerLeaf: 3, Spines: 2, LinkRate: 10e9, Delay: time.Microsecond},
	Transport: transport.Config{MaxPayload: 4096, Window: 16},
	Messages:  2, MessageBytes: 256 << 10, Outstanding: 1,
}

// TestPlan: the permutation sends each host of leaf 0 to a distinct host
// of leaf 1 (and back when bidirectional), the same for the same seed,
// and the spines given are ECMP's for the Single entropy.
func TestPlan(t *testing.T) {
	sc := small
	sc.Bidirectional, sc.Seed = true, 4
	flows, err := pathbench.Plan(sc)
	if err != nil {
		t.Fatal(err)
	}
	h := sc.Fabric.HostsPerLeaf
	if len(flows) != 2*h {
		t.Fatalf("%d flows", len(flows))
	}
	dsts := map[int]bool{}
	for i, f := range flows {
		fromLeaf0 := i < h
		if (f.Src < h) != fromLeaf0 || (f.Dst < h) == fromLeaf0 || dsts[f.Dst] || f.Spine < 0 || f.Spine >= 2 || f.AckSpine < 0 || f.AckSpine >= 2 {
			t.Fatalf("flow %d: %+v", i, f)
		}
		dsts[f.Dst] = true
	}
	again, _ := pathbench.Plan(sc)
	if fmt.Sprint(flows) != fmt.Sprint(again) {
		t.Fatal("same seed, different plan")
	}
	c, err := netsim.NewClos(sc.Seed, sc.Fabric)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		if c.Spine(f.Src, f.Dst, f.Entropy) != f.Spine || c.Spine(f.Dst, f.Src, f.Entropy) != f.AckSpine {
			t.Fatalf("flow %+v: spines disagree with the fabric's", f)
		}
	}
}

// TestRun: every message completes once, the delivered bytes add up to
// the messages' (each byte placed once), the goodput is consistent with
// the makespan, and a run replays exactly.
func TestRun(t *testing.T) {
	for _, k := range []pathsel.Kind{pathsel.Single, pathsel.OPS} {
		sc := small
		sc.Selector.Kind = k
		r, err := pathbench.Run(sc)
		if err != nil {
			t.Fatal(err)
		}
		if r.Unfinished != 0 || len(r.Violations) != 0 {
			t.Fatalf("%v: %d unfinished, %v", k, r.Unfinished, r.Violations)
		}
		var delivered int64
		for _, b := range r.Delivered {
			delivered += b
		}
		want := int64(len(r.Flows) * sc.Messages * sc.MessageBytes)
		if r.Bytes != want || delivered != want {
			t.Fatalf("%v: %d bytes completed, %d delivered, want %d", k, r.Bytes, delivered, want)
		}
		for _, f := range r.Flows {
			if f.OK != sc.Messages || f.Status != transport.StatusOK || f.Finish <= 0 || f.Finish > r.Makespan {
				t.Fatalf("%v: flow %+v", k, f)
			}
		}
		if g := float64(want) * 8 / r.Makespan.Seconds() / (2 * 10e9); r.Goodput != g || g <= 0 || g > 1 {
			t.Fatalf("%v: goodput %v, want %v", k, r.Goodput, g)
		}
		if rate := r.Rate(0, r.Makespan+r.Bin); rate <= 0 || rate > 1 {
			t.Fatalf("%v: rate over the run %v", k, rate)
		}
		again, _ := pathbench.Run(sc)
		if fmt.Sprint(again.Flows, again.Delivered) != fmt.Sprint(r.Flows, r.Delivered) {
			t.Fatalf("%v: the run did not replay", k)
		}
	}
}

func TestScenarioErrors(t *testing.T) {
	for _, mut := range []func(*pathbench.Scenario){
		func(sc *pathbench.Scenario) { sc.Fabric.Leaves = 3 },
		func(sc *pathbench.Scenario) { sc.Messages = -1 },
		func(sc *pathbench.Scenario) { sc.MessageBytes = 2 << 30 },
		func(sc *pathbench.Scenario) { sc.Outstanding = 1000 },
		func(sc *pathbench.Scenario) { sc.Bin = -1 },
	} {
		sc := small
		mut(&sc)
		if _, err := pathbench.Run(sc); !errors.Is(err, pathbench.ErrScenario) {
			t.Errorf("%+v: %v", sc, err)
		}
	}
	sc := small
	sc.Fabric.Spines = -1
	if _, err := pathbench.Run(sc); !errors.Is(err, netsim.ErrConfig) {
		t.Errorf("bad fabric: %v", err)
	}
	sc = small
	sc.BlackHole = &pathbench.BlackHole{Leaf: 0, Spine: 5}
	if _, err := pathbench.Run(sc); !errors.Is(err, netsim.ErrConfig) {
		t.Errorf("black hole on a missing spine: %v", err)
	}
	sc = small
	sc.Selector.Paths = 300
	if _, err := pathbench.Run(sc); !errors.Is(err, pathsel.ErrConfig) {
		t.Errorf("bad selector: %v", err)
	}
	sc = small
	sc.Transport.Window = 1000
	if _, err := pathbench.Run(sc); !errors.Is(err, transport.ErrConfig) {
		t.Errorf("bad transport: %v", err)
	}
}
