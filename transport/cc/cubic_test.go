package cc

import (
	"math"
	"testing"
	"time"
)

func mustCubic(t *testing.T, cfg Config) *Cubic {
	t.Helper()
	cfg.Kind = KindCubic
	cc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cc.(*Cubic)
}

// ackRTTs acknowledges one packet at a time, a window of them per rtt,
// for d, and returns the time reached.
func ackRTTs(c *Cubic, now int64, rtt int64, d time.Duration) int64 {
	for end := now + int64(d); now < end; {
		now += max(int64(float64(rtt)/c.cwnd), 1)
		c.OnAck(now, 0, 1, rtt)
	}
	return now
}

// TestCubicSlowStartAndLoss: slow start adds a packet per packet
// acknowledged; a loss multiplies the window by beta and sets W_max and
// ssthresh; fast convergence lowers W_max when the window fell short of
// the last one.
func TestCubicSlowStartAndLoss(t *testing.T) {
	c := mustCubic(t, Config{InitCwnd: 10})
	c.OnAck(1, 0, 7, 50*us)
	if c.cwnd != 17 || !math.IsInf(c.ssthresh, 1) {
		t.Fatalf("slow start: cwnd %g ssthresh %g", c.cwnd, c.ssthresh)
	}
	c.cwnd = 100
	c.OnLoss(2, 0, 1)
	if c.cwnd != 70 || c.ssthresh != 70 || c.wMax != 100 || c.cwndPrior != 100 {
		t.Fatalf("after a loss: cwnd %g ssthresh %g W_max %g prior %g", c.cwnd, c.ssthresh, c.wMax, c.cwndPrior)
	}
	// Still short of W_max at the next loss: fast convergence.
	c.cwnd = 80
	c.OnLoss(3, 0, 3)
	if c.cwnd != 56 || !near(c.wMax, 80*1.7/2, 1e-12) {
		t.Fatalf("fast convergence: cwnd %g W_max %g, want 56, %g", c.cwnd, c.wMax, 80*1.7/2)
	}
	nf := mustCubic(t, Config{InitCwnd: 100, Cubic: CubicConfig{NoFastConvergence: true}})
	nf.OnLoss(1, 0, 0)
	nf.OnLoss(5, 0, 2)
	if !near(nf.wMax, 70, 1e-12) {
		t.Fatalf("without fast convergence W_max %g, want 70", nf.wMax)
	}
}

// TestCubicOncePerEvent: losses of packets sent before the last
// reduction are the same congestion event; a later packet's is a new
// one.
func TestCubicOncePerEvent(t *testing.T) {
	c := mustCubic(t, Config{InitCwnd: 100})
	c.OnLoss(1000, 0, 500)
	for _, sent := range []int64{0, 600, 999, 1000} {
		c.OnLoss(1500, 1, sent)
	}
	if c.cwnd != 70 {
		t.Fatalf("cwnd %g after one event's losses, want 70", c.cwnd)
	}
	c.OnLoss(2000, 0, 1001)
	if !near(c.cwnd, 49, 1e-12) {
		t.Fatalf("cwnd %g after a second event, want 49", c.cwnd)
	}
}

// TestCubicCurve: at an RTT where the cubic term governs (100 ms), the
// window after a loss follows W_cubic: concave up to W_max at t = K
// (cbrt(W_max*(1-beta)/C) seconds), convex beyond.
func TestCubicCurve(t *testing.T) {
	const rtt = 100 * int64(time.Millisecond)
	c := mustCubic(t, Config{InitCwnd: 100, MaxCwnd: 1e4, MaxWindow: 256})
	c.OnAck(1, 0, 0, rtt)
	c.OnLoss(1, 0, 0)
	k := math.Cbrt(100 * 0.3 / 0.4)
	wc := func(t float64) float64 { return 0.4*math.Pow(t-k, 3) + 100 }
	now := int64(1)
	// (At 1.5K the Reno-friendly estimate is still above W_cubic; at
	// 2.5K the convex curve has overtaken it.)
	for _, at := range []float64{k / 2, k, 2.5 * k} {
		now = ackRTTs(c, now, rtt, time.Duration(at*1e9)-time.Duration(now))
		// The window aims one RTT ahead and moves toward it over the
		// RTT: it lies between W_cubic now and an RTT on.
		lo, hi := wc(at)*0.98, wc(at+0.1)*1.02
		if c.cwnd < lo || c.cwnd > hi {
			t.Fatalf("t = %.2f s (K %.2f): cwnd %g outside W_cubic [%g, %g]", at, k, c.cwnd, lo, hi)
		}
	}
	if c.Window() != 256 && c.cwnd > 256 {
		t.Fatalf("window %d not bounded by MaxWindow", c.Window())
	}
}

// TestCubicRenoFriendly: at a datacenter RTT the cubic term hardly moves
// and the Reno-friendly estimate governs: 3(1-beta)/(1+beta) packets per
// RTT up to the window before the loss, one per RTT above it.
func TestCubicRenoFriendly(t *testing.T) {
	const rtt = 50 * us
	c := mustCubic(t, Config{InitCwnd: 100})
	c.OnLoss(1, 0, 0)
	now := ackRTTs(c, 1, rtt, 40*time.Duration(rtt))
	alpha := 3 * 0.3 / 1.7
	if want := 70 + 40*alpha; !near(c.cwnd, want, 0.03) {
		t.Fatalf("cwnd %g after 40 RTTs, want about %g", c.cwnd, want)
	}
	// Above 100 (the window before the loss): one per RTT.
	now = ackRTTs(c, now, rtt, 40*time.Duration(rtt))
	from := c.cwnd
	if from < 100 {
		t.Fatalf("cwnd %g after 80 RTTs, want past 100", from)
	}
	ackRTTs(c, now, rtt, 20*time.Duration(rtt))
	if !near(c.cwnd-from, 20, 0.1) {
		t.Fatalf("grew %g in 20 RTTs above the old window, want about 20", c.cwnd-from)
	}
}

// TestCubicTimeout: a timeout sets ssthresh as a loss does (once for a
// run of timeouts) and the window to one packet; slow start climbs back
// to ssthresh, and the next epoch's curve starts there (K = 0).
func TestCubicTimeout(t *testing.T) {
	c := mustCubic(t, Config{InitCwnd: 100})
	c.OnTimeout(10)
	c.OnTimeout(20)
	if c.cwnd != 1 || c.ssthresh != 70 {
		t.Fatalf("after timeouts: cwnd %g ssthresh %g, want 1, 70", c.cwnd, c.ssthresh)
	}
	// A loss of a packet sent before the timeout is no new event.
	c.OnLoss(30, 0, 15)
	if c.cwnd != 1 {
		t.Fatalf("cwnd %g after a stale loss", c.cwnd)
	}
	now := int64(100)
	for c.cwnd < c.ssthresh {
		now += 10
		c.OnAck(now, 0, 1, 50*us)
	}
	if c.cwnd != 70 {
		t.Fatalf("slow start ended at %g, want 70", c.cwnd)
	}
	c.OnAck(now+10, 0, 1, 50*us)
	if c.k != 0 || c.wMax != 70 || c.afterRTO {
		t.Fatalf("epoch after a timeout: K %g W_max %g", c.k, c.wMax)
	}
	// An acknowledgement ends the run: the next timeout reduces again.
	c.OnTimeout(now + 20)
	if !near(c.ssthresh, c.cwndPrior*0.7, 1e-12) || c.cwndPrior < 70 {
		t.Fatalf("second run: ssthresh %g prior %g", c.ssthresh, c.cwndPrior)
	}
}

// TestCubicPacing: no pacing above one packet unless asked; below, one
// per RTT/cwnd.
func TestCubicPacing(t *testing.T) {
	c := mustCubic(t, Config{InitCwnd: 10})
	if g := c.PacingGap(100*us, 1000); g != 0 {
		t.Fatalf("gap %d", g)
	}
	p := mustCubic(t, Config{InitCwnd: 10, PacingGain: 1.25})
	p.OnAck(1, 0, 0, 50*us)
	if g := p.PacingGap(100*us, 1000); g != 4*us {
		t.Fatalf("gap %d, want own RTT/(1.25*10) = 4 µs", g)
	}
	f := mustCubic(t, Config{InitCwnd: 0.5, MinCwnd: 0.1})
	if g := f.PacingGap(100*us, 1000); g != 200*us {
		t.Fatalf("gap %d below one packet, want 200 µs", g)
	}
}
