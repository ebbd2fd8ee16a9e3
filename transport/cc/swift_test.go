package cc

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
)

const us = int64(time.Microsecond)

func mustSwift(t *testing.T, cfg Config) *Swift {
	t.Helper()
	cfg.Kind = KindSwift
	cc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cc.(*Swift)
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(math.Abs(b), 1e-12) }

// TestSwiftTarget: the target is the base, plus the hops, plus flow
// scaling from FSRange at FSMinCwnd down to 0 at FSMaxCwnd.
func TestSwiftTarget(t *testing.T) {
	s := mustSwift(t, Config{Swift: SwiftConfig{BaseTarget: 20 * time.Microsecond, Hops: 3, HopScale: 2 * time.Microsecond}})
	base := float64(26 * us)
	for _, c := range []struct{ cwnd, want float64 }{
		{0.01, base + 100*float64(us)}, {0.1, base + 100*float64(us)}, {100, base}, {200, base},
	} {
		s.cwnd = c.cwnd
		if got := s.target(); !near(got, c.want, 1e-9) {
			t.Errorf("cwnd %g: target %g, want %g", c.cwnd, got, c.want)
		}
	}
	// In between: alpha/sqrt(cwnd)+beta, decreasing in cwnd.
	prev := math.Inf(1)
	for cw := 0.1; cw <= 100; cw *= 1.5 {
		s.cwnd = cw
		got := s.target()
		want := base + s.alpha/math.Sqrt(cw) + s.betaFS
		if !near(got, want, 1e-9) || got > prev {
			t.Fatalf("cwnd %g: target %g, want %g, not above %g", cw, got, want, prev)
		}
		prev = got
	}
	off := mustSwift(t, Config{Swift: SwiftConfig{BaseTarget: 20 * time.Microsecond, FSRange: -1}})
	off.cwnd = 0.5
	if off.Target() != 20*us {
		t.Fatalf("target without flow scaling %d", off.Target())
	}
}

// TestSwiftAdditiveIncrease: below the target the window grows by AI
// per window of acknowledgements, and by AI per acknowledgement below
// one packet.
func TestSwiftAdditiveIncrease(t *testing.T) {
	s := mustSwift(t, Config{InitCwnd: 10, Swift: SwiftConfig{AI: 2, Delay: DelayLatest}})
	s.OnAck(1, 0, 5, 10*us)
	if want := 10 + 2*5/10.0; !near(s.cwnd, want, 1e-12) {
		t.Fatalf("cwnd %g, want %g", s.cwnd, want)
	}
	s.cwnd = 0.25
	s.OnAck(2, 0, 1, 10*us)
	if !near(s.cwnd, 2.25, 1e-12) {
		t.Fatalf("cwnd below one: %g, want 2.25", s.cwnd)
	}
	// Nothing acknowledged, no increase.
	s.OnAck(3, 0, 0, 10*us)
	if !near(s.cwnd, 2.25, 1e-12) {
		t.Fatalf("cwnd %g after a sample alone", s.cwnd)
	}
	// Bounded by MaxCwnd.
	for i := range 100000 {
		s.OnAck(int64(4+i), 0, 100, 10*us)
	}
	if s.cwnd != 256 || s.Window() != 256 {
		t.Fatalf("cwnd %g window %d, want the max 256", s.cwnd, s.Window())
	}
}

// TestSwiftMultiplicativeDecrease: above the target the window shrinks
// by Beta*(delay-target)/delay, at most MaxMDF.
func TestSwiftMultiplicativeDecrease(t *testing.T) {
	cfg := Config{InitCwnd: 100, Swift: SwiftConfig{BaseTarget: 50 * time.Microsecond, FSRange: -1, Delay: DelayLatest}}
	s := mustSwift(t, cfg)
	s.OnAck(1000, 0, 1, 100*us) // twice the target
	if want := 100 * (1 - 0.8*0.5); !near(s.cwnd, want, 1e-12) {
		t.Fatalf("cwnd %g, want %g", s.cwnd, want)
	}
	s = mustSwift(t, cfg)
	s.OnAck(1000, 0, 1, 10000*us) // far above: bounded
	if !near(s.cwnd, 50, 1e-12) {
		t.Fatalf("cwnd %g, want 50 (max decrease 0.5)", s.cwnd)
	}
	// At the floor the window stays there.
	s.cwnd = s.min
	s.OnAck(1e9, 0, 1, 10000*us)
	if s.cwnd != 0.01 || s.Window() != 1 {
		t.Fatalf("cwnd %g window %d at the floor", s.cwnd, s.Window())
	}
}

// TestSwiftDecreaseGuard: samples above the target every microsecond
// shrink the window at most once per RTT, and losses and timeouts share
// the guard.
func TestSwiftDecreaseGuard(t *testing.T) {
	for _, mode := range []DelayMode{DelayLatest, DelayQuantile} {
		s := mustSwift(t, Config{InitCwnd: 200, MinCwnd: 1e-3, Swift: SwiftConfig{FSRange: -1, Beta: 0.1, Delay: mode}})
		const rtt = 400 * us // 8x the target: the decrease is 0.1*7/8 each time
		var decs []int64
		for now := int64(1); now <= 2000*us; now += us {
			prev := s.cwnd
			s.OnAck(now, 0, 1, rtt)
			if s.cwnd < prev {
				decs = append(decs, now)
				if want := prev * (1 - 0.1*7.0/8); !near(s.cwnd, want, 1e-9) {
					t.Fatalf("%v: cwnd %g after %g, want %g", mode, s.cwnd, prev, want)
				}
			}
		}
		// 2 ms at one per 400 µs: at 1, 401, ..., 1601 µs.
		if len(decs) != 5 {
			t.Fatalf("%v: %d decreases in 2 ms at RTT 400 µs: %v", mode, len(decs), decs)
		}
		for i := 1; i < len(decs); i++ {
			if decs[i]-decs[i-1] < rtt {
				t.Fatalf("%v: decreases %d µs apart", mode, (decs[i]-decs[i-1])/us)
			}
		}
	}
	s := mustSwift(t, Config{InitCwnd: 64})
	s.OnAck(1, 0, 1, 40*us) // an RTT of 40 µs, below the target
	s.OnLoss(10*us, 0, 0)
	s.OnLoss(20*us, 3, 0)
	s.OnTimeout(49 * us)
	if c := (64 + 1/64.0) * 0.5; !near(s.cwnd, c, 1e-9) {
		t.Fatalf("cwnd %g after a loss, a loss and a timeout within an RTT, want one decrease to %g", s.cwnd, c)
	}
	s.OnLoss(50*us, 0, 0)
	if c := (64 + 1/64.0) * 0.25; !near(s.cwnd, c, 1e-9) {
		t.Fatalf("cwnd %g after a loss an RTT later, want %g", s.cwnd, c)
	}
}

// TestSwiftTimeouts: RetxReset timeouts in a row drop the window to the
// least; an acknowledgement between them resets the count.
func TestSwiftTimeouts(t *testing.T) {
	s := mustSwift(t, Config{InitCwnd: 100, MinCwnd: 0.05, Swift: SwiftConfig{RetxReset: 3}})
	s.OnAck(1, 0, 1, 10*us)
	now := int64(1000 * us)
	s.OnTimeout(now)
	s.OnTimeout(now + 1000*us)
	if s.cwnd <= 0.05 || s.cwnd > 100*0.25+1 {
		t.Fatalf("cwnd %g after two timeouts", s.cwnd)
	}
	s.OnAck(now+2000*us, 0, 1, 10*us)
	s.OnTimeout(now + 3000*us)
	s.OnTimeout(now + 4000*us)
	if s.cwnd == 0.05 {
		t.Fatal("an acknowledgement did not reset the timeout count")
	}
	s.OnTimeout(now + 5000*us)
	if s.cwnd != 0.05 {
		t.Fatalf("cwnd %g after 3 timeouts in a row, want the least 0.05", s.cwnd)
	}
}

// TestSwiftPacing: below one packet the gap is RTT/cwnd; above, none,
// unless a pacing gain asks for RTT/(gain*cwnd).
func TestSwiftPacing(t *testing.T) {
	s := mustSwift(t, Config{InitCwnd: 0.25, Swift: SwiftConfig{Delay: DelayLatest}})
	if g := s.PacingGap(80*us, 1000); g != 320*us {
		t.Fatalf("gap %d before any sample, want srtt/cwnd = 320 µs", g)
	}
	s.OnAck(1, 0, 0, 40*us)
	if g := s.PacingGap(80*us, 1000); g != 160*us {
		t.Fatalf("gap %d, want own rtt/cwnd = 160 µs", g)
	}
	s.cwnd = 4
	if g := s.PacingGap(80*us, 1000); g != 0 {
		t.Fatalf("gap %d above one packet without a gain", g)
	}
	p := mustSwift(t, Config{InitCwnd: 4, PacingGain: 2})
	if g := p.PacingGap(80*us, 1000); g != 10*us {
		t.Fatalf("gap %d with gain 2, want 10 µs", g)
	}
}

// TestSwiftSprayedDelays: a window of packets per RTT sprayed over
// paths of which a quarter carry 400 µs more than the rest (20 µs).
// Plain Swift decreases every RTT and stays small; the quantile sees the
// fast majority and grows to the most.
func TestSwiftSprayedDelays(t *testing.T) {
	drive := func(s *Swift, rng *rand.Rand, now int64, d time.Duration, slow func() bool) int64 {
		for end := now + int64(d); now < end; {
			// One acknowledgement per packet: a window of them per
			// (fast) RTT.
			now += int64(float64(20*us) / math.Max(s.cwnd, 1))
			rtt := 20 * us
			if slow() {
				rtt += 400 * us
			}
			s.OnAck(now, 0, 1, rtt)
		}
		return now
	}
	rng := rand.New(rand.NewPCG(1, 2))
	quarter := func() bool { return rng.IntN(4) == 0 }
	plain := mustSwift(t, Config{InitCwnd: 128, Swift: SwiftConfig{Delay: DelayLatest}})
	robust := mustSwift(t, Config{InitCwnd: 128})
	drive(plain, rng, 0, 5*time.Millisecond, quarter)
	now := drive(robust, rng, 0, 5*time.Millisecond, quarter)
	// Plain: halved every (inflated) RTT, it settles near 12 packets.
	if plain.cwnd > 16 || robust.cwnd != 256 {
		t.Fatalf("plain cwnd %g (want collapsed), robust %g (want the most)", plain.cwnd, robust.cwnd)
	}
	if robust.Delay() != 20*us {
		t.Fatalf("robust delay %d, want the fast paths' 20 µs", robust.Delay())
	}
	// When most paths are slow, the quantile follows them.
	drive(robust, rng, now, 2*time.Millisecond, func() bool { return rng.IntN(4) != 0 })
	if robust.Delay() != 420*us || robust.cwnd > 100 {
		t.Fatalf("robust delay %d cwnd %g when most paths are slow", robust.Delay(), robust.cwnd)
	}
}

// TestDelayWindowQuantile: the quantile equals the nearest-rank quantile
// of the newest count samples (at least minKeep) within the horizon (at
// least the newest), over random sequences.
func TestDelayWindowQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		size := 1 + rng.IntN(80)
		q := []float64{0.1, 0.25, 0.5, 0.9, 1}[rng.IntN(5)]
		d := newDelayWindow(size, q)
		var at, val []int64
		now := int64(0)
		for range 1 + rng.IntN(200) {
			now += rng.Int64N(10)
			v := rng.Int64N(50)
			d.add(now, v)
			at, val = append(at, now), append(val, v)
		}
		count, horizon := rng.IntN(100), rng.Int64N(300)
		var in []int64
		for i := len(val) - 1; i >= 0 && len(in) < min(max(count, minKeep), size); i-- {
			if len(in) > 0 && at[i] < now-horizon {
				break
			}
			in = append(in, val[i])
		}
		slices.Sort(in)
		k := max(int(math.Ceil(q*float64(len(in))))-1, 0)
		if got := d.quantile(now, horizon, count); got != in[k] {
			t.Fatalf("trial %d: quantile %g of %v = %d, want %d", trial, q, in, got, in[k])
		}
	}
	empty := newDelayWindow(4, 0.5)
	if empty.quantile(10, 10, 10) != 0 {
		t.Fatal("quantile of nothing")
	}
}

// TestNoAllocation: the controllers allocate nothing once built.
func TestNoAllocation(t *testing.T) {
	for _, cfg := range []Config{{Kind: KindSwift}, {Kind: KindSwift, Swift: SwiftConfig{Delay: DelayLatest}}, {Kind: KindCubic},
		{Kind: KindCubic, PerPath: true}, {Kind: KindSwift, PerPath: true, PacingGain: 1}} {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(0)
		allocs := testing.AllocsPerRun(100, func() {
			now += us
			c.OnAck(now, uint16(now), 1, 30*us+now%(100*us))
			c.OnLoss(now, uint16(now), now-us)
			_ = c.Window()
			_ = c.(interface{ PacingGap(int64, int) int64 }).PacingGap(30*us, 1000)
			if now%(50*us) == 0 {
				c.OnTimeout(now)
			}
			if u := c.(transport.Undoer); now%(7*us) == 0 {
				u.MarkUndo(now)
			} else if now%(11*us) == 0 {
				u.Undo(now)
			}
		})
		if allocs != 0 {
			t.Errorf("%+v: %g allocations per event", cfg, allocs)
		}
	}
}
