package cc

import "math"

// Swift is delay-based congestion control after Kumar et al. (SIGCOMM
// 2020), Algorithm 1, in packets: below the target delay the window grows
// by AI per RTT; above it, it shrinks by Beta*(delay-target)/delay (at
// most MaxMDF), at most once per RTT. The delay is the latest RTT sample
// (DelayLatest, plain Swift) or a quantile of the last RTT's samples
// (DelayQuantile). Build it with New.
type Swift struct {
	cfg      SwiftConfig
	min, max float64
	most     int
	gain     float64

	cwnd float64
	// Target: fixed part (ns) and flow scaling alpha/sqrt(cwnd)+betaFS,
	// within [0, fsRange].
	base, fsRange, alpha, betaFS float64

	delay     int64   // the delay statistic (ns; 0: no sample yet)
	rtt       float64 // its smoothed value (ns): the decrease guard's RTT
	mean      float64 // smoothed RTT of all samples (ns; DelayQuantile)
	win       delayWindow
	decreased bool  // lastDec is valid
	lastDec   int64 // when the window last shrank
	retx      int   // consecutive timeouts
	// lossCut: the factor losses cut the window by since MarkUndo
	// (marked: one was made, and no timeout came since).
	lossCut float64
	marked  bool
}

func newSwift(cfg Config) *Swift {
	p := cfg.Swift
	s := &Swift{cfg: p, min: cfg.MinCwnd, max: cfg.MaxCwnd, most: cfg.MaxWindow, gain: cfg.PacingGain, cwnd: cfg.InitCwnd,
		base: float64(p.BaseTarget) + float64(p.Hops)*float64(p.HopScale)}
	if p.FSRange > 0 {
		s.fsRange = float64(p.FSRange)
		s.alpha = s.fsRange / (1/math.Sqrt(p.FSMinCwnd) - 1/math.Sqrt(p.FSMaxCwnd))
		s.betaFS = -s.alpha / math.Sqrt(p.FSMaxCwnd)
	}
	if p.Delay == DelayQuantile {
		s.win = newDelayWindow(p.Samples, p.Quantile)
	}
	return s
}

// Cwnd is the window in packets.
func (s *Swift) Cwnd() float64 { return s.cwnd }

// Delay is the delay statistic (ns) the window follows: the latest
// sample, or the quantile of the last RTT's; 0 before the first.
func (s *Swift) Delay() int64 { return s.delay }

// Target is the target delay (ns) at the current window.
func (s *Swift) Target() int64 { return int64(s.target()) }

func (s *Swift) target() float64 {
	if s.fsRange == 0 {
		return s.base
	}
	fs := s.alpha/math.Sqrt(s.cwnd) + s.betaFS
	return s.base + clamp(fs, 0, s.fsRange)
}

// Window implements transport.CongestionControl.
func (s *Swift) Window() int { return window(s.cwnd, s.most) }

// OnAck implements transport.CongestionControl.
func (s *Swift) OnAck(now int64, _ uint16, acked int, rtt int64) {
	if rtt > 0 {
		s.sample(now, rtt)
	}
	if acked <= 0 && rtt <= 0 {
		return
	}
	if acked > 0 {
		s.retx = 0
	}
	prev := s.cwnd
	target := s.target()
	switch d := float64(s.delay); {
	case s.delay == 0 || d < target:
		// Additive increase: AI per window's worth of acknowledgements;
		// below one packet, AI per acknowledgement (the paper's rule).
		n := float64(max(acked, 0))
		if s.cwnd >= 1 {
			s.cwnd += s.cfg.AI * n / s.cwnd
		} else {
			s.cwnd += s.cfg.AI * n
		}
	case s.canDecrease(now):
		s.cwnd *= math.Max(1-s.cfg.Beta*(d-target)/d, 1-s.cfg.MaxMDF)
	}
	s.settle(now, prev)
}

// OnLoss implements transport.CongestionControl: Swift's fast-recovery
// reaction, a decrease by MaxMDF, at most once per RTT.
func (s *Swift) OnLoss(now int64, _ uint16, _ int64) {
	s.retx = 0
	if s.canDecrease(now) {
		prev := s.cwnd
		s.cwnd *= 1 - s.cfg.MaxMDF
		s.settle(now, prev)
		if s.marked && prev > 0 {
			s.lossCut *= s.cwnd / prev
		}
	}
}

// MarkUndo implements transport.Undoer: a loss episode begins.
func (s *Swift) MarkUndo(int64) { s.lossCut, s.marked = 1, true }

// Undo implements transport.Undoer: the episode's loss decreases are
// taken back, the window divided by the factor they cut it by (what
// the delay did to it since stays).
func (s *Swift) Undo(int64) bool {
	if !s.marked || !(s.lossCut < 1) {
		return false
	}
	s.cwnd = clamp(s.cwnd/s.lossCut, s.min, s.max)
	s.lossCut, s.marked = 1, false
	return true
}

// OnTimeout implements transport.CongestionControl: a decrease by MaxMDF
// (at most once per RTT), or, after RetxReset timeouts in a row, the
// least window.
func (s *Swift) OnTimeout(now int64) {
	s.retx++
	s.marked = false // no undo past a timeout
	prev := s.cwnd
	switch {
	case s.retx >= s.cfg.RetxReset:
		s.cwnd = s.min
	case s.canDecrease(now):
		s.cwnd *= 1 - s.cfg.MaxMDF
	}
	s.settle(now, prev)
}

// PacingGap implements transport.Pacer: Swift's RTT over the window when
// it is below one packet (or always, with a pacing gain).
func (s *Swift) PacingGap(srtt int64, _ int) int64 {
	rtt := s.rtt
	if rtt == 0 {
		rtt = float64(srtt)
	}
	return pacingGap(rtt, s.cwnd, s.gain)
}

// sample takes an RTT sample: it becomes the delay (plain), or joins the
// window whose quantile over the last RTT is the delay.
func (s *Swift) sample(now, rtt int64) {
	if s.cfg.Delay == DelayLatest {
		s.delay = rtt
	} else {
		// The last RTT's samples: the last window's worth of them (at
		// least minKeep), taken within two mean RTTs (one window of
		// acknowledgements arrives per mean RTT over all paths).
		s.mean = ewma(s.mean, float64(rtt))
		s.win.add(now, rtt)
		s.delay = s.win.quantile(now, 2*int64(s.mean), int(math.Ceil(s.cwnd)))
	}
	s.rtt = ewma(s.rtt, float64(s.delay))
}

// canDecrease is the once-per-RTT guard on decreases.
func (s *Swift) canDecrease(now int64) bool {
	return !s.decreased || now > s.lastDec && float64(now-s.lastDec) >= s.rtt
}

// settle bounds the window and, if it shrank, starts the guard's RTT.
func (s *Swift) settle(now int64, prev float64) {
	s.cwnd = clamp(s.cwnd, s.min, s.max)
	if s.cwnd < prev {
		s.decreased, s.lastDec = true, now
	}
}
