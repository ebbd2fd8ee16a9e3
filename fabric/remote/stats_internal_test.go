package remote

import (
	"testing"

	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/transport/pathsel"
)

// TestRecorderNoAllocs: recording a sample allocates nothing, and a
// path out of range or a missing sample is ignored.
func TestRecorderNoAllocs(t *testing.T) {
	sel, err := pathsel.New(pathsel.Config{Kind: pathsel.RR, Paths: 4})
	if err != nil {
		t.Fatal(err)
	}
	r := rttRecorder{PathSelector: sel, paths: make([]latency.Recorder, 4)}
	now := int64(0)
	if n := testing.AllocsPerRun(1000, func() { now += 1000; r.OnAck(now, uint16(now/1000%4), 30000) }); n != 0 {
		t.Fatalf("%v allocations per OnAck", n)
	}
	r.OnAck(now, 9, 5000)
	r.OnAck(now, 1, 0)
	var total uint64
	for i := range r.paths {
		total += r.paths[i].Snapshot().Count
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
				sel = rttRecorder{PathSelector: sel, paths: make([]latency.Recorder, 8)}
			}
			now := int64(0)
			for b.Loop() {
				now += 1000
				sel.OnAck(now, uint16(now>>10)&7, 20000+now&0xfff)
			}
		})
	}
}
