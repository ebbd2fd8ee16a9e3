package pathbench

import (
	"fmt"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/pathsel"
)

// FlowResult is what became of one flow.
type FlowResult struct {
	Flow
	// OK messages completed successfully; Status is the first one's
	// that did not (StatusOK if all did).
	OK     int
	Status transport.Status
	// Finish is when its last message completed (or failed).
	Finish time.Duration
	// Stats are the sender's connection counters.
	Stats transport.Stats
	// PathsDown is the number of paths the sender's selector had down
	// at the end.
	PathsDown int
	// Refused counts packets the flow's connections dropped as not
	// theirs to take (after a failure, say).
	Refused uint64
}

// Result is what a run measured.
type Result struct {
	Flows []FlowResult
	// Unfinished flows were still running at the limit.
	Unfinished int
	// Makespan is when the last flow finished.
	Makespan time.Duration
	// Bytes is the payload of the messages completed OK.
	Bytes int64
	// Capacity is the bisection capacity of the directions used
	// (bits/s): Spines*LinkRate, twice that when bidirectional.
	Capacity float64
	// Goodput is Bytes over Makespan as a fraction of Capacity: the
	// permutation's completion, as collective communication feels it.
	Goodput float64
	// Delivered is the payload placed at the receivers per Bin.
	Delivered []int64
	Bin       time.Duration
	// Fabric sums the fabric's link counters.
	Fabric netsim.LinkStats
	// Violations are the harness's failed checks (none in a sound run).
	Violations []string
}

// Rate is the payload delivered in [from, to) as a fraction of Capacity;
// from and to are rounded down to whole bins.
func (r *Result) Rate(from, to time.Duration) float64 {
	lo, hi := int(from/r.Bin), int(to/r.Bin)
	if hi <= lo || r.Capacity <= 0 {
		return 0
	}
	var b int64
	for i := lo; i < hi && i < len(r.Delivered); i++ {
		b += r.Delivered[i]
	}
	return float64(b) * 8 / (float64(hi-lo) * r.Bin.Seconds()) / r.Capacity
}

// Run runs sc.
func Run(sc Scenario) (*Result, error) {
	sc, err := sc.withDefaults()
	if err != nil {
		return nil, err
	}
	clos, flows, err := plan(sc)
	if err != nil {
		return nil, err
	}
	if bh := sc.BlackHole; bh != nil {
		if err := clos.BlackHole(bh.Leaf, bh.Spine, netsim.Window{From: bh.At, To: 1<<63 - 1}); err != nil {
			return nil, fmt.Errorf("pathbench: %w", err)
		}
	}
	h := &harness{sc: sc, now: clos.Now}
	runs := make([]*flowRun, len(flows))
	for i, f := range flows {
		fr := &flowRun{Flow: f, sink: &sink{h: h, flow: uint32(i), commits: make([]uint8, sc.Messages)}}
		if fr.a, fr.b, err = connect(sc, h, fr, uint32(i)); err != nil {
			return nil, err
		}
		if _, err := clos.AddFlow(f.Src, f.Dst, fr.a, fr.b); err != nil {
			return nil, fmt.Errorf("pathbench: %w", err)
		}
		runs[i] = fr
	}
	clos.Run(sc.Limit, func() bool {
		all := true
		for i, f := range runs {
			f.collect(h, clos.Now())
			f.post(h, uint32(i))
			all = all && f.finished
		}
		return all
	})
	cfg := clos.Config()
	r := &Result{Bin: sc.Bin, Delivered: h.delivered, Fabric: clos.Total(), Capacity: float64(cfg.Spines) * cfg.LinkRate}
	if sc.Bidirectional {
		r.Capacity *= 2
	}
	for _, f := range runs {
		fr := FlowResult{Flow: f.Flow, OK: f.ok, Status: f.status, Finish: time.Duration(f.finish), Stats: f.a.c.Stats(),
			PathsDown: f.a.sel.Down(), Refused: f.a.dropped + f.b.dropped}
		if !f.finished {
			r.Unfinished++
		}
		r.Makespan = max(r.Makespan, fr.Finish)
		r.Bytes += int64(f.ok) * int64(sc.MessageBytes)
		r.Flows = append(r.Flows, fr)
	}
	if r.Makespan > 0 {
		r.Goodput = float64(r.Bytes) * 8 / r.Makespan.Seconds() / r.Capacity
	}
	r.Violations = h.violations
	return r, nil
}

// connect makes the two ends of flow i.
func connect(sc Scenario, h *harness, f *flowRun, i uint32) (a, b *endpoint, err error) {
	mk := func(seed uint64, local, remote uint32, sink transport.Sink) (*endpoint, error) {
		scfg := sc.Selector
		scfg.Seed, scfg.Entropy = seed, f.Entropy
		sel, err := pathsel.NewSelector(scfg)
		if err != nil {
			return nil, fmt.Errorf("pathbench: flow %d: %w", i, err)
		}
		cfg := sc.Transport
		cfg.Tenant = 1
		cfg.LocalConn, cfg.LocalToken = local, uint64(local)*0x9e3779b97f4a7c15
		cfg.RemoteConn, cfg.RemoteToken = remote, uint64(remote)*0x9e3779b97f4a7c15
		cfg.Path, cfg.CC = sel, nil
		if sc.NewCC != nil {
			cfg.CC = sc.NewCC()
		}
		c, err := transport.NewConn(cfg, sink)
		if err != nil {
			return nil, fmt.Errorf("pathbench: flow %d: %w", i, err)
		}
		return &endpoint{c: c, h: h, sel: sel}, nil
	}
	if a, err = mk(f.seedA, 2*i+1, 2*i+2, discard{}); err != nil {
		return nil, nil, err
	}
	if b, err = mk(f.seedB, 2*i+2, 2*i+1, f.sink); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}
