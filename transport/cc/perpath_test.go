package cc

import (
	"testing"
	"time"
)

func mustPerPath(t *testing.T, cfg Config) *PerPath {
	t.Helper()
	cfg.PerPath = true
	cc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cc.(*PerPath)
}

// TestPerPathSum: each path's acknowledgements and losses move its own
// window only, and Window is the sum over the paths heard of.
func TestPerPathSum(t *testing.T) {
	p := mustPerPath(t, Config{Kind: KindCubic, Paths: 8})
	if p.Window() != 1 {
		t.Fatalf("window %d before any path was heard of, want 1", p.Window())
	}
	for path := range uint16(4) {
		p.OnAck(1, path, 9, 50*us) // each from 1 to 10 (slow start)
	}
	if p.Window() != 40 || p.Cwnd() != 40 {
		t.Fatalf("window %d (sum %g), want 4 paths of 10", p.Window(), p.Cwnd())
	}
	p.OnLoss(2, 2, 1)
	if p.PathCwnd(2) != 7 || p.PathCwnd(1) != 10 || p.Window() != 37 {
		t.Fatalf("after a loss on path 2: %g, %g, window %d", p.PathCwnd(2), p.PathCwnd(1), p.Window())
	}
	// Path 10 is path 2's state (10 % 8).
	p.OnLoss(3, 10, 3)
	if !near(p.PathCwnd(2), 4.9, 1e-12) || p.Window() != 34 {
		t.Fatalf("path 10 as path 2: %g, window %d", p.PathCwnd(2), p.Window())
	}
	// A timeout reaches every active path.
	p.OnTimeout(4)
	if p.Window() != 4 || p.PathCwnd(0) != 1 || p.PathCwnd(5) != 1 {
		t.Fatalf("after a timeout: window %d, path 0 %g", p.Window(), p.PathCwnd(0))
	}
	// The sum is bounded.
	for i := range 100 {
		p.OnAck(int64(5+i), uint16(i%4), 50, 50*us)
	}
	if p.Window() != 256 {
		t.Fatalf("window %d, want the bound 256", p.Window())
	}
}

// TestPerPathIdle: a path not heard of for PathIdle leaves the sum (it
// keeps its state) and comes back when heard of again.
func TestPerPathIdle(t *testing.T) {
	idle := time.Millisecond
	p := mustPerPath(t, Config{Kind: KindSwift, Paths: 4, PathIdle: idle, InitCwnd: 2})
	p.OnAck(1, 0, 0, 10*us)
	p.OnAck(1, 1, 0, 10*us)
	if p.Window() != 4 {
		t.Fatalf("window %d, want 2 paths of 2", p.Window())
	}
	// Only path 0 is heard of for longer than PathIdle; a few events
	// sweep every path.
	now := int64(idle) + 10
	for i := range 8 {
		p.OnAck(now+int64(i), 0, 0, 10*us)
	}
	if p.Window() != 2 {
		t.Fatalf("window %d, want path 1 gone idle", p.Window())
	}
	p.OnAck(now+100, 1, 0, 10*us)
	if p.Window() != 4 || p.PathCwnd(1) != 2 {
		t.Fatalf("window %d (path 1 %g) after path 1 came back", p.Window(), p.PathCwnd(1))
	}
}

// TestPerPathPacing: the sum below one packet is paced at RTT/sum.
func TestPerPathPacing(t *testing.T) {
	p := mustPerPath(t, Config{Kind: KindSwift, Paths: 4, MinCwnd: 0.1, InitCwnd: 0.2})
	p.OnAck(1, 0, 0, 10*us)
	p.OnAck(1, 1, 0, 10*us)
	if g := p.PacingGap(100*us, 1000); g != 250*us {
		t.Fatalf("gap %d, want 100 µs / 0.4", g)
	}
	q := mustPerPath(t, Config{Kind: KindCubic, Paths: 4, PacingGain: 2, InitCwnd: 5})
	q.OnAck(1, 0, 0, 10*us)
	if g := q.PacingGap(100*us, 1000); g != 10*us {
		t.Fatalf("gap %d, want 100 µs / (2*5)", g)
	}
}
