package pvdma

import (
	"sync/atomic"
	"time"
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
	PinLatency  Histogram
}

// latencyBuckets is the number of histogram buckets: upper bounds 1 µs,
// 2 µs, ... 2^(latencyBuckets-2) µs (about 1 s), then +Inf.
const latencyBuckets = 22

// Histogram is a latency histogram with power-of-two microsecond buckets.
type Histogram struct {
	Counts [latencyBuckets]uint64 // per bucket, not cumulative
	Sum    time.Duration
	Count  uint64
}

// BucketBound is the upper bound of bucket i (the last is +Inf, reported
// as the largest Duration).
func BucketBound(i int) time.Duration {
	if i >= latencyBuckets-1 {
		return time.Duration(1<<63 - 1)
	}
	return time.Microsecond << i
}

// Quantile estimates the q-quantile (0..1) as the upper bound of the
// bucket holding it; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(q*float64(h.Count-1)) + 1
	var seen uint64
	for i, n := range h.Counts {
		seen += n
		if seen >= rank {
			return BucketBound(i)
		}
	}
	return BucketBound(latencyBuckets - 1)
}

// counters is the live, atomic form of Stats (but PinnedBytes, which
// Pool.mu guards as the budgets are charged).
type counters struct {
	pins, unpins, failures, evictions, hits, misses atomic.Uint64
	lat                                             [latencyBuckets]atomic.Uint64
	latSum, latCount                                atomic.Uint64
}

func (c *counters) observePin(d time.Duration) {
	i := 0
	for i < latencyBuckets-1 && d > BucketBound(i) {
		i++
	}
	c.lat[i].Add(1)
	c.latSum.Add(uint64(d))
	c.latCount.Add(1)
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Pins:        c.pins.Load(),
		Unpins:      c.unpins.Load(),
		PinFailures: c.failures.Load(),
		Evictions:   c.evictions.Load(),
		Hits:        c.hits.Load(),
		Misses:      c.misses.Load(),
	}
	for i := range c.lat {
		s.PinLatency.Counts[i] = c.lat[i].Load()
	}
	s.PinLatency.Sum = time.Duration(c.latSum.Load())
	s.PinLatency.Count = c.latCount.Load()
	return s
}
