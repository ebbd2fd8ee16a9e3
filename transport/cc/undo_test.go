package cc

import (
	"math"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
)

// Every controller of this package can take back a cut (Fixed has none).
var (
	_ transport.Undoer = (*Cubic)(nil)
	_ transport.Undoer = (*Swift)(nil)
	_ transport.Undoer = (*PerPath)(nil)
)

// TestCubicUndo: a loss episode's reduction taken back restores the
// state before it (window, threshold, W_max, the epoch), from which
// the window grows on; a larger window grown since
// is kept; there is nothing to undo without a reduction since the mark,
// twice, or after a timeout.
func TestCubicUndo(t *testing.T) {
	const rtt = 100 * us
	c := mustCubic(t, Config{InitCwnd: 100})
	c.OnLoss(0, 0, 0) // a first event: congestion avoidance from 70
	now := ackRTTs(c, 0, rtt, 5*time.Millisecond)
	before := c.cubicState

	c.MarkUndo(now)
	c.OnLoss(now+10, 0, now)
	c.OnLoss(now+20, 3, now-5) // the same event
	if c.cwnd >= before.cwnd || c.ssthresh >= before.cwnd {
		t.Fatalf("no reduction: cwnd %g ssthresh %g from %g", c.cwnd, c.ssthresh, before.cwnd)
	}
	end := ackRTTs(c, now+20, rtt, time.Millisecond)
	if !c.Undo(end) {
		t.Fatal("nothing undone")
	}
	if c.cubicState != before {
		t.Fatalf("after the undo %+v, want %+v", c.cubicState, before)
	}
	if c.Undo(end) {
		t.Fatal("undone twice")
	}
	a := ackRTTs(c, end, rtt, time.Millisecond)
	if c.cwnd <= before.cwnd {
		t.Fatalf("cwnd %g a millisecond after the undo, below %g", c.cwnd, before.cwnd)
	}

	// A window grown past the old one is kept.
	c.MarkUndo(a)
	c.OnLoss(a+1, 0, a)
	c.cwnd = before.cwnd * 2
	if !c.Undo(a+2) || c.cwnd != before.cwnd*2 {
		t.Fatalf("cwnd %g after undoing, want the larger %g", c.cwnd, before.cwnd*2)
	}

	// No reduction since the mark (the loss belongs to an older event).
	d := mustCubic(t, Config{InitCwnd: 50})
	d.OnLoss(100, 0, 50)
	d.MarkUndo(200)
	d.OnLoss(300, 0, 90)
	if d.Undo(400) || d.cwnd != 35 {
		t.Fatalf("undid a reduction from before the mark: cwnd %g", d.cwnd)
	}
	// A timeout in between.
	d.MarkUndo(500)
	d.OnLoss(600, 0, 550)
	d.OnTimeout(700)
	if d.Undo(800) || d.cwnd != 1 {
		t.Fatalf("undid past a timeout: cwnd %g", d.cwnd)
	}
	// Slow start comes back with the threshold.
	e := mustCubic(t, Config{InitCwnd: 10})
	e.MarkUndo(1)
	e.OnLoss(2, 0, 1)
	if !e.Undo(3) || e.cwnd != 10 || !math.IsInf(e.ssthresh, 1) {
		t.Fatalf("cwnd %g ssthresh %g after undoing the first loss", e.cwnd, e.ssthresh)
	}
}

// TestSwiftUndo: the episode's loss decreases are divided out, what the
// delay did meanwhile stays; nothing to undo without a loss decrease,
// twice, or after a timeout.
func TestSwiftUndo(t *testing.T) {
	s := mustSwift(t, Config{InitCwnd: 64, Swift: SwiftConfig{Delay: DelayLatest, FSRange: -1}})
	s.OnAck(1, 0, 1, 40*us) // below the target: +1/64
	w := s.cwnd
	s.MarkUndo(2)
	s.OnLoss(10*us, 0, 0) // halves
	s.OnLoss(20*us, 0, 0) // within the guard: nothing
	s.OnLoss(60*us, 0, 0) // an RTT later: halves again
	if !near(s.cwnd, w/4, 1e-9) {
		t.Fatalf("cwnd %g after two loss decreases, want %g", s.cwnd, w/4)
	}
	s.OnAck(61*us, 0, 16, 40*us) // grows by 16 AI/cwnd meanwhile
	grown := s.cwnd
	if !s.Undo(62*us) || !near(s.cwnd, grown*4, 1e-9) {
		t.Fatalf("cwnd %g after the undo, want %g", s.cwnd, grown*4)
	}
	if s.Undo(63 * us) {
		t.Fatal("undone twice")
	}
	// Only a delay decrease since the mark.
	s.MarkUndo(64 * us)
	s.OnAck(200*us, 0, 1, 10000*us)
	if s.Undo(201 * us) {
		t.Fatal("undid a delay decrease")
	}
	// A timeout in between.
	s.MarkUndo(300 * us)
	s.OnLoss(400*us, 0, 0)
	c := s.cwnd
	s.OnTimeout(401 * us)
	if s.Undo(402*us) || s.cwnd > c {
		t.Fatalf("undid past a timeout: cwnd %g", s.cwnd)
	}
}

// TestPerPathUndo: each path takes back its own cut, and the sum
// follows.
func TestPerPathUndo(t *testing.T) {
	p := mustPerPath(t, Config{Kind: KindCubic, Paths: 8})
	for path := range uint16(4) {
		p.OnAck(1, path, 9, 50*us) // each 10
	}
	p.MarkUndo(2)
	p.OnLoss(3, 1, 2)
	p.OnLoss(3, 2, 2)
	if p.Window() != 34 {
		t.Fatalf("window %d after two paths' losses, want 34", p.Window())
	}
	if !p.Undo(4) || p.Window() != 40 || p.PathCwnd(1) != 10 || p.PathCwnd(2) != 10 {
		t.Fatalf("after the undo window %d, paths %g %g", p.Window(), p.PathCwnd(1), p.PathCwnd(2))
	}
	if p.Undo(5) {
		t.Fatal("undone twice")
	}
}
