package latency

import (
	"sync/atomic"
	"time"
)

// Buckets is the number of histogram buckets: upper bounds 1 µs, 2 µs,
// ... 2^(Buckets-2) µs (about 1 s), then +Inf.
const Buckets = 22

// Bound is the upper bound of bucket i; the last bucket's is the largest
// Duration, standing for +Inf.
func Bound(i int) time.Duration {
	if i >= Buckets-1 {
		return time.Duration(1<<63 - 1)
	}
	return time.Microsecond << i
}

// bucket is the index of the bucket holding d.
func bucket(d time.Duration) int {
	i := 0
	for i < Buckets-1 && d > Bound(i) {
		i++
	}
	return i
}

// Histogram is a snapshot: counts per bucket (not cumulative), their sum
// and their number.
type Histogram struct {
	Counts [Buckets]uint64
	Sum    time.Duration
	Count  uint64
}

// Add adds o's observations to h.
func (h *Histogram) Add(o Histogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Sum += o.Sum
	h.Count += o.Count
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
			return Bound(i)
		}
	}
	return Bound(Buckets - 1)
}

// Recorder is the live, atomic form of a Histogram. The zero value is
// ready to use.
type Recorder struct {
	counts     [Buckets]atomic.Uint64
	sum, count atomic.Uint64
}

// Observe records one duration (negative ones count as 0).
func (r *Recorder) Observe(d time.Duration) {
	d = max(d, 0)
	r.counts[bucket(d)].Add(1)
	r.sum.Add(uint64(d))
	r.count.Add(1)
}

// Snapshot reads the recorder. Concurrent Observes may be partly in it:
// Count and the buckets can disagree by the observations in flight.
func (r *Recorder) Snapshot() Histogram {
	var h Histogram
	for i := range r.counts {
		h.Counts[i] = r.counts[i].Load()
	}
	h.Sum = time.Duration(r.sum.Load())
	h.Count = r.count.Load()
	return h
}
