package transport

import "github.com/vstellar/vstellar/transport/wire"

// recovery is the sender's loss detection and recovery: the RTT estimate
// and the retransmission timeout, loss by count and by time that learns
// the reordering it sees (reorder.go), go-back-N, undoing a congestion
// cut for spurious losses (undo.go) and waiting out a busy peer
// (busy.go). It decides the fate of the packets of the sendWindow it is
// handed; the sender sequences and sends them.
//
// Invariants:
//   - While the connection lives, the timer (rtoAt) is armed whenever a
//     packet is in flight; retries counts the timeouts, and whole busy
//     timeouts, since the last progress, and past RetryLimit the
//     connection fails.
//   - Only a packet in flight below the highest psn acknowledged is lost
//     by count, only one sent before an acknowledged one by time
//     (reorder), and rackAt (0: none) is when the earliest of the others
//     becomes old enough.
//   - A go-back (gbnActive) resends the window once: no other starts
//     before una passes gbnRecover, or a timeout.
//   - lose takes only a packet in flight (the path selector and maybe
//     the CC hear of the loss); a BUSY NAK or an RNR wait queues packets
//     again without one.
type recovery struct {
	cfg *Config

	rttEstimator
	echoes echoFilter
	echo   int64 // the timestamp the ACK being handled echoes (0: none)

	rtoAt   int64 // 0: not armed
	retries int   // consecutive timeouts without progress

	ro     reorder
	rackAt int64 // 0: no reordering deadline

	gbnRecover uint32 // go-back-N: no new go-back before una passes it
	gbnActive  bool

	undo undoEpisode
	busyState
}

func (r *recovery) init(cfg *Config) {
	r.cfg = cfg
	r.rto = dur(cfg.RTOInit)
	r.ro.init(cfg)
}

// sample takes, at now, the RTT sample of an ACK for path echoing echo
// (lastTS: the last timestamp sent), and returns it (0: none).
func (r *recovery) sample(c *Conn, now int64, path uint16, echo, lastTS int64) int64 {
	r.echo = 0
	if echo <= 0 || echo > now {
		return 0
	}
	// The echo names one transmission of ours however late it comes
	// (checkSpurious), but measures an RTT only if it is fresh on its
	// path: a replayed ACK inflates no estimate, the CC's included.
	r.echo = echo
	if !r.echoes.admit(path, echo, lastTS) {
		return 0
	}
	rtt := now - echo
	r.sampleRTT(rtt)
	if r.retries == 0 {
		// RFC 6298 (2.3): the RTO follows every measurement, not only
		// those of an ACK that makes progress; a backed-off RTO stays
		// until progress.
		r.rto = r.rtoValue()
	}
	c.cfg.Path.OnAck(now, path, rtt)
	return rtt
}

// sampleRTT feeds the RFC 6298 estimator and the reordering window's
// minimum RTT.
func (r *recovery) sampleRTT(rtt int64) {
	if rtt <= 0 {
		return
	}
	if r.ro.minRTT == 0 || rtt < r.ro.minRTT {
		r.ro.minRTT = rtt
	}
	r.rttEstimator.sample(rtt)
}

func (r *recovery) rtoValue() int64 { return r.rtoFor(r.cfg) }

// progressed restarts the timer at now after an acknowledgement of
// something new, with inFlight packets left in flight.
func (r *recovery) progressed(now int64, inFlight int) {
	r.retries = 0
	r.rto = r.rtoValue()
	if inFlight > 0 {
		r.rtoAt = now + r.rto
	} else {
		r.rtoAt = 0
	}
}

// acked learns, at now, from packet p (psn), not acknowledged before,
// that the ACK being handled acknowledges; p's state is still the one
// it had.
func (r *recovery) acked(c *Conn, now int64, psn uint32, p *txPkt) {
	if r.cfg.Recovery == Selective {
		if p.tx == 1 {
			r.ro.learnAcked(now, r.srtt, psn, p)
			if p.state == pktLost {
				// Declared lost, and acknowledged before it went again.
				r.undo.originalArrived(c, now, p)
			}
		} else if p.tx > 1 {
			r.checkSpurious(c, now, psn, p)
		}
	}
	r.ro.acked(psn, p)
}

// detectLosses declares lost (selective repeat) every packet in flight
// with dupThresh later packets acknowledged, or sent before an
// acknowledged packet and older than lossAge (RACK; reorder.go says how
// both follow the reordering seen). It arms the reordering timer for
// the rest.
func (r *recovery) detectLosses(c *Conn, w *sendWindow, now int64) {
	r.rackAt = 0
	ro := &r.ro
	if !ro.haveHigh {
		return
	}
	reo := ro.lossAge(now, r.srtt)
	thresh := ro.dupThresh(now, r.srtt)
	lost := 0
	for psn := w.una; wire.SeqLess(psn, ro.highAcked); psn++ {
		p := w.pkt(psn)
		if p.state != pktInFlight {
			continue
		}
		// The count rule judges a first transmission only: a resent
		// packet has every packet above it acknowledged already, so only
		// time (or the RTO) can say it is lost again.
		byCount := p.tx == 1 && ro.highAcked-psn >= thresh
		byTime := p.sentAt < ro.rackSentAt && p.sentAt+reo <= now
		if byCount || byTime {
			why := lostByTime
			if byCount {
				why = lostByCount
			}
			r.lose(c, w, now, psn, true, why)
			lost++
			continue
		}
		if p.sentAt < ro.rackSentAt && (r.rackAt == 0 || p.sentAt+reo < r.rackAt) {
			r.rackAt = p.sentAt + reo
		}
	}
	c.st.FastRetransmits += uint64(lost)
	if lost > 0 {
		ro.lossEpisode(now, r.srtt)
	}
}

// goBack implements go-back-N: an acknowledgement that does not move
// una while packets are in flight means the receiver dropped an
// out-of-order packet; resend everything from una, once per window.
func (r *recovery) goBack(c *Conn, w *sendWindow, now int64, a *wire.Ack, progress bool) {
	if r.gbnActive && !wire.SeqLess(w.una, r.gbnRecover) {
		r.gbnActive = false
	}
	if progress || r.gbnActive || w.inFlight == 0 || a.Cum != w.una {
		return
	}
	n := r.loseAll(c, w, now, true, lostByCount)
	r.gbnActive, r.gbnRecover = true, w.nxt
	c.st.FastRetransmits += uint64(n)
}

// lose declares packet psn lost by rule why and queues it for
// retransmission; cc says the CC hears of it (a timeout's losses it
// hears as the timeout).
func (r *recovery) lose(c *Conn, w *sendWindow, now int64, psn uint32, cc bool, why uint8) {
	p := w.pkt(psn)
	p.lostBy = why
	w.set(p, pktLost)
	c.cfg.Path.OnLoss(now, p.path)
	if cc {
		if c.cfg.Recovery == Selective && c.cfg.UndoCuts {
			r.undo.episodeLoss(c, now, p)
		}
		c.cfg.CC.OnLoss(now, p.path, p.sentAt)
	}
}

// loseAll declares every packet in flight lost.
func (r *recovery) loseAll(c *Conn, w *sendWindow, now int64, cc bool, why uint8) int {
	n := 0
	for psn := w.una; psn != w.nxt; psn++ {
		if w.pkt(psn).state == pktInFlight {
			r.lose(c, w, now, psn, cc, why)
			n++
		}
	}
	return n
}

// timedOut counts a timeout: past the retry limit it fails the
// connection and reports false; else it backs the RTO off.
func (r *recovery) timedOut(c *Conn) bool {
	c.st.Timeouts++
	r.retries++
	if r.retries > c.cfg.RetryLimit {
		c.fail(StatusRetryExceeded)
		return false
	}
	r.backOff(dur(c.cfg.RTOMax))
	return true
}

// expired handles the retransmission timer, due at now: nothing was
// acknowledged for an RTO.
func (r *recovery) expired(c *Conn, w *sendWindow, now int64) {
	r.rtoAt = 0
	if w.inFlight == 0 {
		return
	}
	if r.busy && now-r.busyLast < dur(c.cfg.BusyTimeout) {
		r.probeLost(w)
		return
	}
	if !r.timedOut(c) {
		return
	}
	// The peer has not said it is busy for a BusyTimeout: it is gone,
	// not busy. Everything goes again.
	r.endBusyMode(w, lostByTimeout)
	r.undo.open = false // the timeout's cut is not the episode's
	c.cfg.CC.OnTimeout(now)
	c.cfg.Path.OnTimeout(now)
	r.loseAll(c, w, now, false, lostByTimeout)
	r.gbnActive = false
	r.rtoAt = now + r.rto
}
