package transport

// rttEstimator is the RFC 6298 round-trip estimator and retransmission
// timeout of a sender (all values ns).
//
// Invariants:
//   - srtt == 0 until the first positive sample; then srtt > 0 and
//     rttvar >= 0 (the first sample sets srtt = R, rttvar = R/2, later
//     ones the 1/8 and 1/4 EWMAs of RFC 6298 (2.2, 2.3)).
//   - rtoFor never returns less than RTOMin nor more than RTOMax once a
//     sample exists, and RTOInit before.
//   - backOff doubles rto, capped at the maximum it is given; only the
//     sender decides when the estimate replaces a backed-off rto.
type rttEstimator struct {
	srtt, rttvar int64
	rto          int64 // the current timeout, possibly backed off
}

// sample feeds one RTT measurement; rtt <= 0 is ignored.
func (e *rttEstimator) sample(rtt int64) {
	if rtt <= 0 {
		return
	}
	if e.srtt == 0 {
		e.srtt, e.rttvar = rtt, rtt/2
		return
	}
	d := e.srtt - rtt
	if d < 0 {
		d = -d
	}
	e.rttvar = (3*e.rttvar + d) / 4
	e.srtt = (7*e.srtt + rtt) / 8
}

// rtoFor is the timeout the estimate gives under cfg's bounds.
func (e *rttEstimator) rtoFor(cfg *Config) int64 {
	if e.srtt == 0 {
		return dur(cfg.RTOInit)
	}
	return max(dur(cfg.RTOMin), min(e.srtt+4*e.rttvar, dur(cfg.RTOMax)))
}

// backOff doubles the timeout, capped at maxRTO.
func (e *rttEstimator) backOff(maxRTO int64) {
	e.rto = min(2*e.rto, maxRTO)
}

// echoPaths is how many paths an echoFilter tells apart: as many as a
// selector sprays over (pathsel.MaxPaths). Higher paths share a slot
// (path % echoPaths), which can only drop a sample, never admit one.
const echoPaths = 256

// echoFilter decides which echoed timestamps are RTT samples. An ACK
// echoes the timestamp of the DATA packet that triggered it, so an old
// ACK replayed later (docs/wire.md, section 9) would measure its age.
// Sprayed paths legitimately deliver ACKs out of echo order, but one
// path delivers them in order, so the filter keeps per path the newest
// echo it admitted.
//
// Invariant: newest[i] only grows, and admit takes an echo only if it
// is newer than newest[path%echoPaths] and no later than the last
// timestamp the sender sent (a later one, forged, would block the
// path's samples); so each transmission gives at most one sample, and
// a replayed ACK none.
type echoFilter struct {
	newest [echoPaths]int64
}

// admit reports whether echo, on an ACK for path, is a sample; lastTS is
// the last timestamp sent.
func (f *echoFilter) admit(path uint16, echo, lastTS int64) bool {
	n := &f.newest[path%echoPaths]
	if echo <= *n || echo > lastTS {
		return false
	}
	*n = echo
	return true
}
