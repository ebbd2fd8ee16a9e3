package transport

import (
	"time"

	"github.com/vstellar/vstellar/transport/wire"
)

// A busy peer: its device is in a control change (SetMemory, Reset, ...,
// which may take seconds), so its connection turns our packets away
// unreceived, or holds back a READ response, and says so with a BUSY NAK
// (receiver.go, Conn.Transmit). Nothing was lost and the network is not
// congested, so the sender keeps the local path's rule (engine/doc.go:
// a busy answer is retried soon and costs a retry only when it lasts a
// whole timeout):
//
//   - A BUSY NAK is not a loss: no congestion signal, nothing learnt
//     about reordering, no timeout counted.
//   - Busy mode: every unacknowledged packet waits (pktBusyWait),
//     nothing new is sent, and the oldest waiting packet goes again
//     alone, as a probe, busyBackoffMin after the first NAK, then after
//     a backoff that doubles with each probe turned away, up to
//     busyBackoffMax. The receiver answers every probe (it is the packet
//     it expects next), so the RTO does not run out while it is busy.
//   - Progress (a packet newly acknowledged, a response arriving) ends
//     the busy spell: what waits goes again at once, as after an RNR
//     wait, from what the receiver has.
//   - The spell costs one retry against RetryLimit for each whole
//     BusyTimeout it lasts, so a peer busy for good fails the connection
//     (StatusRetryExceeded) after about (RetryLimit+1) x BusyTimeout;
//     RNRRetry is never used.
//   - A probe unanswered for an RTO (it, or its NAK, was lost) goes
//     again at once, as long as the peer said it was busy within the
//     last BusyTimeout; after that the peer is gone rather than busy,
//     and the RTO is an ordinary timeout: busy mode ends, everything
//     goes again, and the usual retry limit runs.
//
// A BUSY NAK about a request the receiver has committed (a READ or
// atomic) says its response waits for the busy device: that sends
// nothing again, but counts towards the spell, and keeps the wait for
// the response (respAt) from counting timeouts while such NAKs keep
// coming (busyHoldWait).
const (
	busyBackoffMin = int64(20 * time.Microsecond)
	busyBackoffMax = int64(time.Millisecond)
	// busyHoldWait: how long after a BUSY NAK the peer counts as alive
	// while we wait for a response it holds back; it repeats such a NAK
	// every busyHoldNak.
	busyHoldWait = 4 * busyHoldNak
	busyHoldNak  = int64(time.Millisecond)
)

// busyNak handles a BUSY NAK about message m (outstanding).
func (s *sender) busyNak(c *Conn, now int64, a *wire.Ack, m *outMsg) {
	if a.EchoTS != 0 && a.EchoTS <= s.busyEndTS {
		return // about a packet sent before the peer was last free: it went again since
	}
	if s.busySince == 0 || now-s.busyLast >= dur(c.cfg.BusyTimeout) {
		// A new spell (a spell whose NAKs stopped long ago, without
		// progress, is over too).
		s.busySince, s.backoff = now, busyBackoffMin
	} else if now-s.busySince >= dur(c.cfg.BusyTimeout) {
		// Busy for a whole BusyTimeout: that is one retry.
		s.busySince = now
		s.retries++
		if s.retries > c.cfg.RetryLimit {
			c.fail(StatusRetryExceeded)
			return
		}
	}
	s.busyLast = now
	if wire.SeqLess(m.msn, s.peerCommitted) {
		return // committed: its response is held back, nothing of ours to send again
	}
	s.busy = true
	for psn := s.una; psn != s.nxt; psn++ {
		switch p := s.pkt(psn); p.state {
		case pktInFlight:
			s.inFlight--
			p.state = pktBusyWait
		case pktLost:
			s.lost--
			p.state = pktBusyWait
		}
	}
	// Nothing in flight: the probe arms the RTO afresh.
	s.rtoAt = 0
	if s.probeAt == 0 {
		s.probeAt = now + s.backoff
		s.backoff = min(2*s.backoff, busyBackoffMax)
	}
}

// probe queues the oldest waiting packet to go again; with none waiting
// (all acknowledged, or waiting for an RNR timer) busy mode ends, and
// what is sent next probes.
func (s *sender) probe() {
	for psn := s.una; psn != s.nxt; psn++ {
		if p := s.pkt(psn); p.state == pktBusyWait {
			p.state, p.lostBy = pktLost, lostByBusy
			s.lost++
			return
		}
	}
	s.endBusyMode(lostByBusy)
}

// probeLost sends the probe in flight again at once: it, or the BUSY
// NAK answering it, was lost, and the peer said it is busy recently.
// Neither a timeout nor a congestion signal: probes are one packet each.
func (s *sender) probeLost() {
	for psn := s.una; psn != s.nxt; psn++ {
		if p := s.pkt(psn); p.state == pktInFlight {
			s.inFlight--
			p.state = pktBusyWait
		}
	}
	s.probeAt = 0
	s.probe()
}

// peerFree ends the busy spell: the peer took something, or a response
// it held back arrived. BUSY NAKs about what was sent before are stale.
func (s *sender) peerFree() {
	if s.busySince == 0 && !s.busy {
		return
	}
	s.busySince, s.busyEndTS = 0, s.lastTS
	s.endBusyMode(lostByBusy)
}

// endBusyMode sends every waiting packet again (declared lost by why).
func (s *sender) endBusyMode(why uint8) {
	if !s.busy {
		return
	}
	s.busy, s.probeAt = false, 0
	for psn := s.una; psn != s.nxt; psn++ {
		if p := s.pkt(psn); p.state == pktBusyWait {
			p.state, p.lostBy = pktLost, why
			s.lost++
		}
	}
}

// heldResponse reports whether the peer said, within busyHoldWait of
// now, that it is busy: waiting for a response is then no timeout.
func (s *sender) heldResponse(now int64) bool {
	return s.busySince != 0 && now-s.busyLast < busyHoldWait
}
