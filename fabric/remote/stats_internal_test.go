package remote

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/pathsel"
)

// TestRTTBuckets: a sample lands in the first bucket whose bound holds
// it, bounds included; one above the last bound is in the count only.
func TestRTTBuckets(t *testing.T) {
	for _, c := range []struct {
		rtt    int64
		bucket int // -1: none
	}{
		{1, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {2049, 2}, {int64(time.Millisecond), 10},
		{int64(RTTBucketBound(NumRTTBuckets - 1)), NumRTTBuckets - 1}, {int64(RTTBucketBound(NumRTTBuckets-1)) + 1, -1},
	} {
		var p pathRTT
		p.add(c.rtt)
		ps, ok := p.load(3)
		for i := range NumRTTBuckets {
			want := uint64(0)
			if c.bucket >= 0 && i >= c.bucket {
				want = 1 // cumulative
			}
			if got := ps.RTTBuckets[i]; got != want {
				t.Errorf("rtt %d: bucket %d (bound %v) holds %d", c.rtt, i, RTTBucketBound(i), got)
			}
		}
		if c.bucket >= 0 && (time.Duration(c.rtt) > RTTBucketBound(c.bucket) || c.bucket > 0 && time.Duration(c.rtt) <= RTTBucketBound(c.bucket-1)) {
			t.Errorf("rtt %d outside bucket %d's range", c.rtt, c.bucket)
		}
		if !ok || ps.Path != 3 || ps.RTTCount != 1 || ps.RTTSum != time.Duration(c.rtt) {
			t.Errorf("rtt %d: %+v %v", c.rtt, ps, ok)
		}
	}
}

// TestRecorderNoAllocs: recording a sample allocates nothing, and a
// path out of range or a missing sample is ignored.
func TestRecorderNoAllocs(t *testing.T) {
	sel, err := pathsel.New(pathsel.Config{Kind: pathsel.RR, Paths: 4})
	if err != nil {
		t.Fatal(err)
	}
	r := rttRecorder{PathSelector: sel, paths: make([]pathRTT, 4)}
	now := int64(0)
	if n := testing.AllocsPerRun(1000, func() { now += 1000; r.OnAck(now, uint16(now/1000%4), 30000) }); n != 0 {
		t.Fatalf("%v allocations per OnAck", n)
	}
	r.OnAck(now, 9, 5000)
	r.OnAck(now, 1, 0)
	var total uint64
	for i := range r.paths {
		ps, _ := r.paths[i].load(i)
		total += ps.RTTCount
	}
	if total != 1001 { // AllocsPerRun runs once more to warm up
		t.Fatalf("%d samples recorded", total)
	}
}

// BenchmarkOnAck: what the recorder adds to the selector's OnAck, the
// one hot-path cost of Stats.Paths.
func BenchmarkOnAck(b *testing.B) {
	for _, rec := range []bool{false, true} {
		b.Run(map[bool]string{false: "selector", true: "recorded"}[rec], func(b *testing.B) {
			sel, err := pathsel.New(pathsel.Config{Kind: pathsel.RR, Paths: 8})
			if err != nil {
				b.Fatal(err)
			}
			if rec {
				sel = rttRecorder{PathSelector: sel, paths: make([]pathRTT, 8)}
			}
			now := int64(0)
			for b.Loop() {
				now += 1000
				sel.OnAck(now, uint16(now>>10)&7, 20000+now&0xfff)
			}
		})
	}
}
