package pvdma

import (
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/latency"
)

// Stats are a cache's or a pool's counters: what the operations issue's
// Prometheus collector exports (pinned bytes as a gauge, the rest as
// counters, PinLatency as a histogram).
type Stats struct {
	PinnedBytes uint64 // bytes pinned now
	Pins        uint64 // chunks (or, in ModeAll, regions) pinned
	Unpins      uint64 // chunks (or regions) unpinned
	PinFailures uint64 // pins refused by the budget or the pinner
	Evictions   uint64 // unreferenced chunks released for the budget
	Hits        uint64 // chunk acquisitions that found the chunk pinned
	Misses      uint64 // chunk acquisitions that had to pin it
	PinLatency  latency.Histogram
}

// counters is the live, atomic form of Stats (but PinnedBytes, which
// Pool.mu guards as the budgets are charged).
type counters struct {
	pins, unpins, failures, evictions, hits, misses atomic.Uint64
	pinLatency                                      latency.Recorder
}

func (c *counters) observePin(d time.Duration) { c.pinLatency.Observe(d) }

func (c *counters) snapshot() Stats {
	s := Stats{
		Pins:        c.pins.Load(),
		Unpins:      c.unpins.Load(),
		PinFailures: c.failures.Load(),
		Evictions:   c.evictions.Load(),
		Hits:        c.hits.Load(),
		Misses:      c.misses.Load(),
	}
	s.PinLatency = c.pinLatency.Snapshot()
	return s
}
