package pathbench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/pathsel"
)

// ErrScenario is wrapped by the errors of a scenario that cannot run.
var ErrScenario = errors.New("pathbench: bad scenario")

// Scenario is one run. Zero fields take the defaults.
type Scenario struct {
	// Fabric is the leaf-spine fabric; it must have 2 leaves (the
	// default).
	Fabric netsim.ClosConfig
	// Seed fixes the fabric's ECMP hash, the permutation, and every
	// connection's selector seed and Single entropy.
	Seed uint64
	// Selector is the policy and its knobs; Seed and Entropy are drawn
	// per connection.
	Selector pathsel.Config
	// Transport configures every connection (window, payload, recovery,
	// timers); identities and Path are set per connection.
	Transport transport.Config
	// NewCC, if set, gives each connection its congestion control;
	// otherwise a FixedWindow of the window.
	NewCC func() transport.CongestionControl
	// Bidirectional adds the reverse permutation, leaf 1 to leaf 0.
	Bidirectional bool
	// Messages per flow (default 8), of MessageBytes each (default
	// 1 MiB), at most Outstanding posted at a time (default 4).
	Messages, MessageBytes, Outstanding int
	// BlackHole, if set, drops everything a leaf sends to a spine from
	// a time on.
	BlackHole *BlackHole
	// Limit bounds the simulated time (default 10 s); flows not finished
	// by then are counted in Result.Unfinished.
	Limit time.Duration
	// Bin is the width of Result.Delivered's bins (default 100 µs).
	Bin time.Duration
}

// BlackHole black-holes Leaf's link to Spine from At to the end.
type BlackHole struct {
	Leaf, Spine int
	At          time.Duration
}

func (sc Scenario) withDefaults() (Scenario, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&sc.Messages, 8)
	def(&sc.MessageBytes, 1<<20)
	def(&sc.Outstanding, 4)
	if sc.Limit == 0 {
		sc.Limit = 10 * time.Second
	}
	if sc.Bin == 0 {
		sc.Bin = 100 * time.Microsecond
	}
	if sc.Fabric.Leaves == 0 {
		sc.Fabric.Leaves = 2
	}
	switch {
	case sc.Fabric.Leaves != 2:
		return sc, fmt.Errorf("pathbench: %d leaves: the permutation needs 2: %w", sc.Fabric.Leaves, ErrScenario)
	case sc.Messages < 1 || sc.Messages > 1<<20 || sc.Outstanding < 1 || sc.Outstanding > 512:
		return sc, fmt.Errorf("pathbench: %d messages, %d outstanding: %w", sc.Messages, sc.Outstanding, ErrScenario)
	case sc.MessageBytes < 1 || sc.MessageBytes > 1<<30:
		return sc, fmt.Errorf("pathbench: messages of %d bytes: %w", sc.MessageBytes, ErrScenario)
	case sc.Limit < 0 || sc.Bin <= 0:
		return sc, fmt.Errorf("pathbench: limit %v, bin %v: %w", sc.Limit, sc.Bin, ErrScenario)
	}
	return sc, nil
}

// Flow is one connection of the permutation.
type Flow struct {
	// Src sends to Dst (host numbers of the fabric).
	Src, Dst int
	// Entropy is the connection's Single entropy (what a Single
	// selector sends everything on).
	Entropy uint16
	// Spine is where ECMP sends Entropy's data, AckSpine where it sends
	// the ACKs coming back on it.
	Spine, AckSpine int
	// selector seeds of the two ends
	seedA, seedB uint64
}

// plan builds the fabric and lays out the flows.
func plan(sc Scenario) (*netsim.Clos, []Flow, error) {
	clos, err := netsim.NewClos(sc.Seed, sc.Fabric)
	if err != nil {
		return nil, nil, fmt.Errorf("pathbench: %w", err)
	}
	// The selector's defaults and checks say how many paths there are.
	sel, err := pathsel.NewSelector(sc.Selector)
	if err != nil {
		return nil, nil, fmt.Errorf("pathbench: %w", err)
	}
	paths := sel.Paths()
	h := clos.Config().HostsPerLeaf
	rng := rand.New(rand.NewPCG(sc.Seed, 0x5eed))
	var flows []Flow
	add := func(src, dst int) {
		f := Flow{Src: src, Dst: dst, Entropy: uint16(rng.IntN(paths)), seedA: rng.Uint64(), seedB: rng.Uint64()}
		f.Spine, f.AckSpine = clos.Spine(src, dst, f.Entropy), clos.Spine(dst, src, f.Entropy)
		flows = append(flows, f)
	}
	for i, j := range rng.Perm(h) {
		add(i, h+j)
	}
	if sc.Bidirectional {
		for i, j := range rng.Perm(h) {
			add(h+i, j)
		}
	}
	return clos, flows, nil
}

// Plan lays out the flows Run would run for sc, without running them
// (to aim a black hole at a Single flow's spine, say).
func Plan(sc Scenario) ([]Flow, error) {
	sc, err := sc.withDefaults()
	if err != nil {
		return nil, err
	}
	_, flows, err := plan(sc)
	return flows, err
}
