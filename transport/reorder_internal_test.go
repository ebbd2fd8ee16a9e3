package transport

import (
	"math/rand/v2"
	"testing"
)

// TestWindowedMax: a new maximum shows at once and ages out after the
// window, leaving the runner-up the filter kept (the best sample from a
// quarter window after it on); the filter is never above the true
// maximum of the window's samples, nor below the latest sample.
func TestWindowedMax(t *testing.T) {
	const win = 1000
	var m windowedMax
	if m.get(0, win) != 0 {
		t.Fatal("an empty filter has a maximum")
	}
	m.update(win, 10, 50)
	m.update(win, 20, 30)
	m.update(win, 600, 20)
	if got := m.get(900, win); got != 50 {
		t.Fatalf("max %d, want 50", got)
	}
	// 30 came too soon after 50 to be kept as the runner-up; 20, a
	// quarter window later, was.
	if got := m.get(1011, win); got != 20 {
		t.Fatalf("after 50 aged out: %d, want the runner-up 20", got)
	}
	m.update(win, 1700, 10)
	if got := m.get(1700, win); got != 10 {
		t.Fatalf("after 20 aged out: %d, want 10", got)
	}
	m.update(win, 1200, 70)
	if got := m.get(1200, win); got != 70 {
		t.Fatalf("a new maximum: %d, want 70", got)
	}
	if got := m.get(5000, win); got != 0 {
		t.Fatalf("long after every sample: %d, want 0", got)
	}

	// Random samples.
	rng := rand.New(rand.NewPCG(1, 2))
	type sample struct{ t, v int64 }
	var all []sample
	m = windowedMax{}
	now := int64(0)
	for range 20000 {
		now += rng.Int64N(40)
		v := rng.Int64N(1000)
		all = append(all, sample{now, v})
		m.update(win, now, v)
		hi := int64(0)
		for i := len(all) - 1; i >= 0 && now-all[i].t <= win; i-- {
			hi = max(hi, all[i].v)
		}
		if got := m.get(now, win); got > hi || got < v {
			t.Fatalf("at %d: filter %d, window max %d, latest %d", now, got, hi, v)
		}
	}
}

// TestReorderConfig: a reordering mode that does not exist is refused.
func TestReorderConfig(t *testing.T) {
	if _, err := (Config{Reordering: ReorderFixed + 1}).withDefaults(); err == nil {
		t.Fatal("unknown reordering mode accepted")
	}
	if _, err := (Config{Reordering: ReorderFixed}).withDefaults(); err != nil {
		t.Fatal(err)
	}
}
