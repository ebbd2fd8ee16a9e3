package transport

import "github.com/vstellar/vstellar/transport/wire"

// Loss detection that tolerates reordering (selective repeat).
//
// Spraying a connection's packets over paths of different delays
// reorders them by the paths' RTT spread, which on a loaded fabric is
// the difference of its queues: at 250 Mb/s one 9000-byte frame queued
// is 290 µs. A fixed reordering window either declares late packets lost
// (spurious retransmissions, each also a congestion signal for nothing)
// or finds real losses late. So, as RACK-TLP (RFC 8985) and Linux's
// reordering degree do, the sender learns the reordering it sees:
//
//   - Time rule: a packet sent before an acknowledged one is lost once it
//     is older than the smoothed RTT plus the reordering window, and
//     older than the longest a reordered packet (a first transmission
//     acknowledged after one sent later) recently took to be acknowledged
//     plus a quarter of the window. Only reordered packets count: one
//     acknowledged in order was never at risk of the rule, however long
//     it took. "Recently" is a windowed maximum over reorderMemory
//     smoothed RTTs, so the threshold follows the paths' current spread
//     and forgets an old one. The quarter window above the observed
//     maximum covers what was not observed; more would also delay the
//     detection of real losses, a black-holed path's included. The
//     window is ReorderWindow times a multiplier (RACK's reo_wnd_mult;
//     the product at most the smoothed RTT) that grows by one, at most
//     once per RTT, when a loss proves spurious, and returns to 1 after
//     reorderPersist loss episodes without one.
//   - Count rule: a first transmission is lost once DupThresh later
//     packets are acknowledged, or more than the most later packets
//     recently acknowledged before an earlier one that then arrived.
//   - Spurious: a retransmitted packet whose first acknowledgement echoes
//     its original's timestamp (every packet's timestamp is unique within
//     its connection), or comes sooner after the retransmission than the
//     minimum RTT (RFC 8985, step 2), was delivered the first time; so
//     was one the receiver reports it got again (undo.go). The
//     retransmission is counted once (Stats.SpuriousRetransmits) and the
//     rule that declared the loss learns from it.
//
// Everything is a function of the packets and the times the connection
// is given: deterministic, sans-IO. Go-back-N and ReorderFixed keep the
// configured thresholds.

// ReorderMode is how loss detection (selective repeat) treats reordering.
type ReorderMode uint8

const (
	// ReorderAdaptive (the default) learns the reordering the
	// connection sees: DupThresh and ReorderWindow are floors.
	ReorderAdaptive ReorderMode = iota
	// ReorderFixed uses DupThresh and ReorderWindow as they are: the
	// baseline adaptive detection is measured against.
	ReorderFixed
)

const (
	// reorderMemory: the windowed maxima span this many smoothed RTTs.
	reorderMemory = 16
	// reorderMaxMult bounds the reordering window's multiplier.
	reorderMaxMult = 16
	// reorderPersist: loss episodes without a spurious one before the
	// multiplier returns to 1 (RFC 8985's reo_wnd_persist).
	reorderPersist = 16
)

// Why a packet was declared lost.
const (
	lostByCount uint8 = iota + 1
	lostByTime
	lostByTimeout
	// lostByBusy: sent again because the peer was busy (busy.go), a
	// probe or once it was free; no reordering was involved.
	lostByBusy
)

// maxSample is one sample of a windowedMax.
type maxSample struct{ t, v int64 }

// windowedMax is Kathleen Nichols' windowed maximum filter, as BBR uses
// it: the largest sample of the last win ns, in constant space. It keeps
// the best sample, the best since it, and the best since that, so when
// the best ages out the next best is at hand.
type windowedMax struct{ s [3]maxSample }

// update adds sample v taken at t.
func (m *windowedMax) update(win, t, v int64) {
	x := maxSample{t, v}
	if v >= m.s[0].v || t-m.s[2].t > win {
		m.s = [3]maxSample{x, x, x}
		return
	}
	switch {
	case v >= m.s[1].v:
		m.s[1], m.s[2] = x, x
	case v >= m.s[2].v:
		m.s[2] = x
	}
	// Age the candidates: the best may have left the window; a later one
	// that is still a copy of it is refreshed after a quarter (half) of
	// the window, so there is always a runner-up from later on.
	switch dt := t - m.s[0].t; {
	case dt > win:
		m.s[0], m.s[1], m.s[2] = m.s[1], m.s[2], x
		if t-m.s[0].t > win {
			m.s[0], m.s[1] = m.s[1], m.s[2]
		}
	case m.s[1] == m.s[0] && dt > win/4:
		m.s[1], m.s[2] = x, x
	case m.s[2] == m.s[1] && dt > win/2:
		m.s[2] = x
	}
}

// get is the largest sample taken within win of now (0: none).
func (m *windowedMax) get(now, win int64) int64 {
	for _, s := range m.s {
		if now-s.t <= win {
			return s.v
		}
	}
	return 0
}

// reorder is what the sender's recovery knows of the packets
// acknowledged (RACK) and of the reordering it saw, and the loss rules'
// thresholds it makes of them, given the smoothed RTT srtt (ns, 0
// before the first sample).
//
// Invariants:
//   - highAcked is the highest psn acknowledged (haveHigh: there is
//     one) and rackSentAt the latest send time of an acknowledged
//     packet; both only grow.
//   - Without the adaptive rule (go-back-N, ReorderFixed), lossAge and
//     dupThresh are the configured ones and nothing is learnt; with it
//     they are never below them.
//   - mult is 0 until a loss proves spurious, then in
//     [1, reorderMaxMult], growing at most once per srtt.
type reorder struct {
	adaptive bool   // loss detection learns from reordering
	window   int64  // Config.ReorderWindow (ns)
	thresh   uint32 // Config.DupThresh
	rtoInit  int64  // Config.RTOInit (ns): the memory's unit before an RTT sample

	rackSentAt int64
	highAcked  uint32
	haveHigh   bool

	age     windowedMax // how long reordered first transmissions took to be acknowledged (ns)
	degree  windowedMax // later packets acknowledged before an earlier one
	mult    int64       // the reordering window's multiplier (0 until a spurious loss: 1)
	persist int         // loss episodes left before mult returns to 1
	bumped  int64       // when mult last grew
	episode int64       // when the current loss episode began (0: none yet)
	minRTT  int64       // the smallest RTT sample (ns; 0: none yet)
}

func (ro *reorder) init(cfg *Config) {
	ro.adaptive = cfg.Recovery == Selective && cfg.Reordering == ReorderAdaptive
	ro.window, ro.thresh, ro.rtoInit = dur(cfg.ReorderWindow), uint32(cfg.DupThresh), dur(cfg.RTOInit)
}

// memory is the span of the windowed maxima (ns).
func (ro *reorder) memory(srtt int64) int64 {
	if srtt == 0 {
		return reorderMemory * ro.rtoInit
	}
	return reorderMemory * srtt
}

// acked records that psn, sent at p.sentAt, is acknowledged, and how
// many later packets were before it (p.ahead).
func (ro *reorder) acked(psn uint32, p *txPkt) {
	if ro.haveHigh && wire.SeqLess(psn, ro.highAcked) {
		p.ahead = ro.highAcked - psn
	}
	if p.sentAt > ro.rackSentAt {
		ro.rackSentAt = p.sentAt
	}
	if !ro.haveHigh || wire.SeqLess(ro.highAcked, psn) {
		ro.highAcked, ro.haveHigh = psn, true
	}
}

// lossAge is how old a packet sent before an acknowledged one must be,
// at now, to be declared lost by time.
func (ro *reorder) lossAge(now, srtt int64) int64 {
	base := ro.window
	if !ro.adaptive {
		return srtt + base
	}
	extra := min(base*max(ro.mult, 1), max(base, srtt))
	return max(srtt+extra, ro.age.get(now, ro.memory(srtt))+extra/4)
}

// dupThresh is how many later packets acknowledged make a first
// transmission lost, at now.
func (ro *reorder) dupThresh(now, srtt int64) uint32 {
	n := ro.thresh
	if ro.adaptive {
		n = max(n, uint32(ro.degree.get(now, ro.memory(srtt)))+1)
	}
	return n
}

// learnAcked learns (adaptive) from first transmission p (psn),
// acknowledged at now, if it was reordered: how long it took, and how
// many later packets were acknowledged before it. A packet that had
// been declared lost (and not yet resent) proves the loss spurious.
func (ro *reorder) learnAcked(now, srtt int64, psn uint32, p *txPkt) {
	if !ro.adaptive {
		return
	}
	win := ro.memory(srtt)
	if p.sentAt < ro.rackSentAt {
		ro.age.update(win, now, now-p.sentAt)
	}
	if ro.haveHigh && wire.SeqLess(psn, ro.highAcked) {
		ro.degree.update(win, now, int64(ro.highAcked-psn))
	}
	if p.state == pktLost {
		ro.spurious(now, srtt, p.lostBy)
	}
}

// checkSpurious decides, at now, whether retransmitted packet p (psn),
// newly acknowledged by the ACK being handled, was delivered the first
// time, and if so counts and learns from it.
func (r *recovery) checkSpurious(c *Conn, now int64, psn uint32, p *txPkt) {
	original := r.echo != 0 && r.echo == p.firstTS
	if !original && (r.ro.minRTT == 0 || now-p.sentAt >= r.ro.minRTT) {
		return
	}
	if p.spur == 0 {
		p.spur = 1
		c.st.SpuriousRetransmits++
		// The acknowledgement is the original's: it took this long, and
		// this many later packets were acknowledged before it.
		var ahead int64
		if r.ro.haveHigh && wire.SeqLess(psn, r.ro.highAcked) {
			ahead = int64(r.ro.highAcked - psn)
		}
		r.ro.learnSpurious(now, r.srtt, p, now-p.firstTS, ahead)
	}
	if original {
		// Proof enough to undo a congestion cut; an acknowledgement
		// sooner than the minimum RTT is only likely the original's.
		r.undo.originalArrived(c, now, p)
	}
}

// learnSpurious learns, at now, from the first unneeded retransmission
// found of p: with the adaptive rule, if p went twice, how long its
// first transmission took to be acknowledged (age) and how many later
// packets were acknowledged before it (ahead, if known: > 0); and it
// widens the reordering window (spurious). Both spurious-retransmission
// rules, the timestamps' (checkSpurious) and the duplicate reports'
// (dupReported), learn through it.
func (ro *reorder) learnSpurious(now, srtt int64, p *txPkt, age, ahead int64) {
	if !ro.adaptive {
		return
	}
	if p.tx == 2 {
		win := ro.memory(srtt)
		ro.age.update(win, now, age)
		if ahead > 0 {
			ro.degree.update(win, now, ahead)
		}
	}
	ro.spurious(now, srtt, p.lostBy)
}

// spurious widens the reordering window after a loss declared by rule
// why proved spurious: at most once per RTT (RFC 8985 §6.2, step 4).
func (ro *reorder) spurious(now, srtt int64, why uint8) {
	if why != lostByTime && why != lostByCount {
		return // a timeout's: the RTO, not the reordering window, fired
	}
	ro.persist = reorderPersist
	if ro.mult == 0 {
		ro.mult = 1
	}
	if ro.bumped == 0 || now-ro.bumped >= srtt {
		ro.mult = min(ro.mult+1, reorderMaxMult)
		ro.bumped = now
	}
}

// lossEpisode counts, at now, a loss declared by SACK or time: the
// first of an RTT starts an episode, and reorderPersist episodes without
// a spurious loss return the multiplier to 1.
func (ro *reorder) lossEpisode(now, srtt int64) {
	if ro.episode != 0 && now-ro.episode < srtt {
		return
	}
	ro.episode = now
	if ro.persist > 0 {
		ro.persist--
		if ro.persist == 0 {
			ro.mult = 1
		}
	}
}
