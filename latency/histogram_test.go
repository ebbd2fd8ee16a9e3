package latency_test

import (
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/latency"
)

func TestQuantile(t *testing.T) {
	var h latency.Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	h.Counts[3], h.Counts[10], h.Count = 9, 1, 10 // 9 at <= 8 µs, 1 at <= 1 ms
	if q := h.Quantile(0.5); q != 8*time.Microsecond {
		t.Fatalf("p50 %v", q)
	}
	if q := h.Quantile(1); q != 1024*time.Microsecond {
		t.Fatalf("p100 %v", q)
	}
}

func TestRecorderBuckets(t *testing.T) {
	var r latency.Recorder
	for _, d := range []time.Duration{-time.Second, 0, time.Microsecond, time.Microsecond + 1, 3 * time.Millisecond, time.Hour} {
		r.Observe(d)
	}
	h := r.Snapshot()
	want := map[int]uint64{0: 3, 1: 1, 12: 1, latency.Buckets - 1: 1}
	for i, n := range h.Counts {
		if n != want[i] {
			t.Fatalf("bucket %d (<= %v): %d, want %d", i, latency.Bound(i), n, want[i])
		}
	}
	if h.Count != 6 || h.Sum != time.Microsecond*2+1+3*time.Millisecond+time.Hour {
		t.Fatalf("count %d sum %v", h.Count, h.Sum)
	}
	var total latency.Histogram
	total.Add(h)
	total.Add(h)
	if total.Count != 12 || total.Counts[0] != 6 || total.Sum != 2*h.Sum {
		t.Fatalf("sum of two: %+v", total)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	var r latency.Recorder
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 1000 {
				r.Observe(time.Duration(i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	h := r.Snapshot()
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	if h.Count != 4000 || n != 4000 {
		t.Fatalf("count %d, buckets %d", h.Count, n)
	}
}
