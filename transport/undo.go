package transport

// Duplicate reports and undoing a congestion cut for spurious losses.
//
// A receiver that gets a DATA packet it already has says so in its next
// ACK (wire.FlagDup, Ack.DupPSN; receiver.go), as TCP's DSACK does (RFC
// 2883). A report of a packet we sent more than once means one of its
// copies was not needed: the timestamp rule (reorder.go) sees only the
// retransmissions whose first acknowledgement echoes the original's
// timestamp, which an endpoint's ACK per batch of datagrams hides most
// of the time; every duplicate is reported.
//
// With UndoCuts, a loss episode is the losses of one congestion event:
// it begins with a loss (by count or time) of a packet sent after the
// current episode began (the controller's cut), and takes in every later
// loss of a packet sent before that, as CUBIC's "once per event" does
// (RFC 9438, §4.6). When each of its losses proves spurious (the
// packet's first transmission was delivered: acknowledged before it went
// again, the acknowledgement echoing its timestamp, or as many duplicate
// reports as retransmissions), before a timeout and before the next
// episode, the cut was for nothing: the congestion controller, if it is
// an Undoer, goes back to the state it had before it (RFC 3708's DSACK
// undo, RFC 4015's spirit), and Stats.CCUndos counts it. A real loss is
// never proved spurious (its retransmission is the only copy delivered:
// no report), so an episode with one is never undone. Only a network
// that duplicates a retransmission of a lost packet fools it, as it
// fools TCP. Go-back-N keeps every cut.

// undoEpisode is the current loss episode.
//
// Invariant: pending counts the packets declared lost in episode id
// (txPkt.ep) whose loss has not proved spurious (txPkt.epPending); the
// episode is undone at most once, when it reaches 0 while open (a
// timeout closes it).
type undoEpisode struct {
	open    bool  // may still be undone
	start   int64 // when its first loss was declared
	id      uint32
	pending int // its losses not yet proved spurious
}

// episodeLoss adds loss p, declared at now, to the current episode, or
// begins a new one (marking the controller's state) if p was sent after
// the current one began.
func (u *undoEpisode) episodeLoss(c *Conn, now int64, p *txPkt) {
	if !u.open || p.sentAt > u.start {
		u.id++
		u.open, u.start, u.pending = true, now, 0
		if un, ok := c.cfg.CC.(Undoer); ok {
			un.MarkUndo(now)
		}
	}
	p.ep, p.epPending = u.id, true
	u.pending++
}

// originalArrived records, at now, that p's first transmission was
// delivered: if the current episode declared it lost, that loss was
// spurious, and once all of the episode's were, its cut is undone.
func (u *undoEpisode) originalArrived(c *Conn, now int64, p *txPkt) {
	if p.arrived {
		return
	}
	p.arrived = true
	if !p.epPending || p.ep != u.id || !u.open {
		return
	}
	p.epPending = false
	u.pending--
	if u.pending > 0 {
		return
	}
	u.open = false
	if un, ok := c.cfg.CC.(Undoer); ok && un.Undo(now) {
		c.st.CCUndos++
	}
}

// dupReported handles, at now, the peer's report that it received
// packet psn again. A packet sent once was duplicated by the network; of
// one sent n times, each report proves one retransmission unneeded
// (counted once, whichever rule finds it first), and n-1 of them prove
// the first transmission was delivered. sampled: the ACK carrying it
// gave an RTT sample, so it is not an ACK delivered again (rtt.go).
func (r *recovery) dupReported(c *Conn, w *sendWindow, now int64, psn uint32, sampled bool) {
	if !inRange(psn, w.nxt-pktHistory, w.nxt) {
		return // its slot holds a later packet by now (or it was never sent)
	}
	p := w.pkt(psn)
	if p.tx < 2 || p.state != pktAcked {
		return
	}
	if p.dups > 0 && !sampled {
		// Perhaps the ACK that carried the report taken, delivered
		// again (docs/wire.md, section 9): another counts only from an
		// ACK new on its path.
		return
	}
	p.dups = min(p.dups+1, p.tx-1)
	if p.dups <= p.spur {
		return // the timestamp rule, or an earlier report, counted it
	}
	first := p.spur == 0
	c.st.SpuriousRetransmits += uint64(p.dups - p.spur)
	p.spur = p.dups
	if first {
		// It was acknowledged this long after it was first sent, and
		// this many later packets before it (if the retransmission was
		// acknowledged first, the original took longer still).
		r.ro.learnSpurious(now, r.srtt, p, p.ackedAt-p.firstTS, int64(p.ahead))
	}
	if p.dups == p.tx-1 {
		r.undo.originalArrived(c, now, p)
	}
}
