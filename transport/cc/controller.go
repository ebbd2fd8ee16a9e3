package cc

import (
	"math"

	"github.com/vstellar/vstellar/transport"
)

// controller is a window controller of this package: a
// transport.CongestionControl and Pacer whose fractional window the
// per-path wrapper adds up.
type controller interface {
	transport.CongestionControl
	transport.Pacer
	transport.Undoer
	// Cwnd is the window in packets (fractional; below 1: paced).
	Cwnd() float64
}

// window is Window of a fractional window: whole packets, at least one
// (below one the connection is paced), at most most.
func window(cwnd float64, most int) int {
	if !(cwnd >= 1) {
		return 1
	}
	if cwnd >= float64(most) {
		return most
	}
	return int(cwnd)
}

// maxGap bounds a pacing gap (ns): a second, so a broken estimate cannot
// stall a connection for longer than its timers would anyway.
const maxGap = int64(1e9)

// pacingGap is the gap between packets for a window of cwnd over an RTT
// of rtt ns: rtt/cwnd below one packet; rtt/(gain*cwnd) above, if gain
// is set; else none.
func pacingGap(rtt, cwnd, gain float64) int64 {
	if !(rtt > 0) || !(cwnd > 0) {
		return 0
	}
	var g float64
	switch {
	case cwnd < 1:
		g = rtt / cwnd
	case gain > 0:
		g = rtt / (gain * cwnd)
	default:
		return 0
	}
	return int64(math.Min(g, float64(maxGap)))
}

// ewma folds sample x into the smoothed value v with weight 1/8 (the
// first sample is taken as is).
func ewma(v, x float64) float64 {
	if v == 0 {
		return x
	}
	return v + (x-v)/8
}

// clamp bounds x to [lo, hi]; NaN becomes lo.
func clamp(x, lo, hi float64) float64 {
	if !(x >= lo) {
		return lo
	}
	return math.Min(x, hi)
}
