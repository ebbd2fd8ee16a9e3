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

// busyState is what recovery knows of the peer being busy (BUSY NAKs).
type busyState struct {
	// busy: every unacknowledged packet waits (pktBusyWait) and one, the
	// oldest, goes as a probe at probeAt (0: none due), backoff after
	// the BUSY NAK that scheduled it.
	busy             bool
	probeAt, backoff int64
	// busySince: when the busy spell not yet charged as a retry began
	// (0: the peer is not busy); progress ends the spell.
	busySince int64
	// busyEndTS: the last timestamp sent before the peer was last found
	// free; a BUSY NAK about an older transmission is stale.
	busyEndTS int64
	// busyLast: when the last (not stale) BUSY NAK came.
	busyLast int64
}

// busyNak handles a BUSY NAK about an outstanding message; held: the
// peer has committed it, and holds back its response.
func (r *recovery) busyNak(c *Conn, w *sendWindow, now int64, a *wire.Ack, held bool) {
	if a.EchoTS != 0 && a.EchoTS <= r.busyEndTS {
		return // about a packet sent before the peer was last free: it went again since
	}
	if r.busySince == 0 || now-r.busyLast >= dur(c.cfg.BusyTimeout) {
		// A new spell (a spell whose NAKs stopped long ago, without
		// progress, is over too).
		r.busySince, r.backoff = now, busyBackoffMin
	} else if now-r.busySince >= dur(c.cfg.BusyTimeout) {
		// Busy for a whole BusyTimeout: that is one retry.
		r.busySince = now
		r.retries++
		if r.retries > c.cfg.RetryLimit {
			c.fail(StatusRetryExceeded)
			return
		}
	}
	r.busyLast = now
	if held {
		return // nothing of ours to send again
	}
	r.busy = true
	for psn := w.una; psn != w.nxt; psn++ {
		if p := w.pkt(psn); p.state == pktInFlight || p.state == pktLost {
			w.set(p, pktBusyWait)
		}
	}
	// Nothing in flight: the probe arms the RTO afresh.
	r.rtoAt = 0
	if r.probeAt == 0 {
		r.probeAt = now + r.backoff
		r.backoff = min(2*r.backoff, busyBackoffMax)
	}
}

// probe queues the oldest waiting packet to go again; with none waiting
// (all acknowledged, or waiting for an RNR timer) busy mode ends, and
// what is sent next probes.
func (r *recovery) probe(w *sendWindow) {
	for psn := w.una; psn != w.nxt; psn++ {
		if p := w.pkt(psn); p.state == pktBusyWait {
			p.lostBy = lostByBusy
			w.set(p, pktLost)
			return
		}
	}
	r.endBusyMode(w, lostByBusy)
}

// probeLost sends the probe in flight again at once: it, or the BUSY
// NAK answering it, was lost, and the peer said it is busy recently.
// Neither a timeout nor a congestion signal: probes are one packet each.
func (r *recovery) probeLost(w *sendWindow) {
	for psn := w.una; psn != w.nxt; psn++ {
		if p := w.pkt(psn); p.state == pktInFlight {
			w.set(p, pktBusyWait)
		}
	}
	r.probeAt = 0
	r.probe(w)
}

// peerFree ends the busy spell: the peer took something, or a response
// it held back arrived. BUSY NAKs about what was sent before (up to
// lastTS, the last timestamp sent) are stale.
func (r *recovery) peerFree(w *sendWindow, lastTS int64) {
	if r.busySince == 0 && !r.busy {
		return
	}
	r.busySince, r.busyEndTS = 0, lastTS
	r.endBusyMode(w, lostByBusy)
}

// endBusyMode sends every waiting packet again (declared lost by why).
func (r *recovery) endBusyMode(w *sendWindow, why uint8) {
	if !r.busy {
		return
	}
	r.busy, r.probeAt = false, 0
	for psn := w.una; psn != w.nxt; psn++ {
		if p := w.pkt(psn); p.state == pktBusyWait {
			p.lostBy = why
			w.set(p, pktLost)
		}
	}
}

// heldResponse reports whether the peer said, within busyHoldWait of
// now, that it is busy: waiting for a response is then no timeout.
func (r *recovery) heldResponse(now int64) bool {
	return r.busySince != 0 && now-r.busyLast < busyHoldWait
}
