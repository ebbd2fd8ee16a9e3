package cc

import "math"

// Cubic is CUBIC (RFC 9438) in packets, driven by losses: slow start to
// ssthresh, then W_cubic(t) = C*(t-K)³ + W_max with t in seconds since
// the congestion-avoidance epoch began, and the Reno-friendly estimate
// W_est as a floor; a loss event multiplies the window by Beta (with fast
// convergence lowering W_max), once per event: a loss of a packet sent
// before the last reduction is the same event. Build it with New.
type Cubic struct {
	c, beta  float64
	fastConv bool
	min, max float64
	most     int
	gain     float64

	cubicState
	rtt float64 // smoothed RTT (ns)

	// The state MarkUndo kept (marked: it is valid, until a timeout),
	// and whether a loss reduced the window since (cut).
	saved       cubicState
	marked, cut bool
}

// cubicState is what a reduction changes, and an undo restores.
type cubicState struct {
	cwnd, ssthresh float64
	wMax           float64 // window before the last reduction (fast convergence may lower it)
	cwndPrior      float64 // window before the last reduction (0: none yet)
	k              float64 // seconds from the epoch to W_max
	west           float64 // Reno-friendly estimate
	epoch          int64   // congestion-avoidance epoch start (ns)
	inEpoch        bool
	afterRTO       bool // the next epoch starts with K = 0, W_max = cwnd
	inRTO          bool // timed out with no acknowledgement since
	reduced        bool // lastRed is valid
	lastRed        int64
}

func newCubic(cfg Config) *Cubic {
	return &Cubic{c: cfg.Cubic.C, beta: cfg.Cubic.Beta, fastConv: !cfg.Cubic.NoFastConvergence,
		min: cfg.MinCwnd, max: cfg.MaxCwnd, most: cfg.MaxWindow, gain: cfg.PacingGain,
		cubicState: cubicState{cwnd: cfg.InitCwnd, ssthresh: math.Inf(1)}}
}

// Cwnd is the window in packets.
func (c *Cubic) Cwnd() float64 { return c.cwnd }

// Ssthresh is the slow-start threshold (+Inf before the first loss).
func (c *Cubic) Ssthresh() float64 { return c.ssthresh }

// Window implements transport.CongestionControl.
func (c *Cubic) Window() int { return window(c.cwnd, c.most) }

// wCubic is W_cubic at t seconds into the epoch.
func (c *Cubic) wCubic(t float64) float64 {
	d := t - c.k
	return c.c*d*d*d + c.wMax
}

// OnAck implements transport.CongestionControl.
func (c *Cubic) OnAck(now int64, _ uint16, acked int, rtt int64) {
	if rtt > 0 {
		c.rtt = ewma(c.rtt, float64(rtt))
	}
	if acked <= 0 {
		return
	}
	c.inRTO = false
	n := float64(acked)
	if c.cwnd < c.ssthresh {
		c.cwnd = clamp(c.cwnd+n, c.min, c.max)
		return
	}
	if !c.inEpoch {
		c.inEpoch, c.epoch, c.west = true, now, c.cwnd
		switch {
		case c.afterRTO || c.cwnd >= c.wMax:
			// After a timeout (RFC 9438 §4.8), or past the old maximum
			// (slow start ended without a loss): the curve starts here.
			c.afterRTO, c.wMax, c.k = false, c.cwnd, 0
		default:
			c.k = math.Cbrt((c.wMax - c.cwnd) / c.c)
		}
	}
	t := float64(now-c.epoch) / 1e9
	// Reno-friendly estimate (§4.3): AIMD with the same average rate as
	// Reno until it reaches the window before the reduction, then Reno's.
	alpha := 1.0
	if c.west < c.cwndPrior {
		alpha = 3 * (1 - c.beta) / (1 + c.beta)
	}
	c.west += alpha * n / c.cwnd
	if w := c.wCubic(t); w < c.west {
		c.cwnd = c.west
	} else {
		// Concave or convex region (§4.4, §4.5): toward W_cubic one RTT
		// ahead, at most 1.5x.
		target := clamp(c.wCubic(t+c.rtt/1e9), c.cwnd, 1.5*c.cwnd)
		c.cwnd += (target - c.cwnd) / c.cwnd * n
	}
	c.cwnd = clamp(c.cwnd, c.min, c.max)
}

// OnLoss implements transport.CongestionControl: a multiplicative
// decrease, once per congestion event.
func (c *Cubic) OnLoss(now int64, _ uint16, sentAt int64) {
	if c.reduced && sentAt <= c.lastRed {
		return // sent before the last reduction: the same event
	}
	c.reduce(now)
	c.cwnd = c.ssthresh
	c.cut = true
}

// MarkUndo implements transport.Undoer: the state before a loss episode.
func (c *Cubic) MarkUndo(int64) {
	c.saved, c.marked, c.cut = c.cubicState, true, false
}

// Undo implements transport.Undoer: the state before the episode's
// reduction comes back (window, threshold, W_max and K, the epoch and
// the Reno-friendly estimate, as if the loss had not been), keeping the
// window if it has grown beyond that since.
func (c *Cubic) Undo(int64) bool {
	if !c.marked || !c.cut {
		return false
	}
	w := c.cwnd
	c.cubicState = c.saved
	c.cwnd = clamp(max(c.cwnd, w), c.min, c.max)
	c.marked, c.cut = false, false
	return true
}

// OnTimeout implements transport.CongestionControl: the threshold as for
// a loss (once per run of timeouts), the window one packet, and the next
// epoch's curve starts from where slow start leaves it (§4.8).
func (c *Cubic) OnTimeout(now int64) {
	if !c.inRTO {
		c.reduce(now)
		c.inRTO = true
	}
	c.cwnd = clamp(1, c.min, c.max)
	c.afterRTO, c.reduced, c.lastRed = true, true, now
	c.marked = false // no undo past a timeout
}

// reduce records a congestion event: W_max (fast convergence), the
// threshold, a new epoch to come.
func (c *Cubic) reduce(now int64) {
	c.cwndPrior = c.cwnd
	if c.fastConv && c.cwnd < c.wMax {
		c.wMax = c.cwnd * (1 + c.beta) / 2
	} else {
		c.wMax = c.cwnd
	}
	c.ssthresh = clamp(c.cwnd*c.beta, c.min, c.max)
	c.inEpoch = false
	c.reduced, c.lastRed = true, now
}

// PacingGap implements transport.Pacer.
func (c *Cubic) PacingGap(srtt int64, _ int) int64 {
	rtt := c.rtt
	if rtt == 0 {
		rtt = float64(srtt)
	}
	return pacingGap(rtt, c.cwnd, c.gain)
}
