package transport

// pacing spaces a sender's data packets when its CC is a Pacer (all
// times ns).
//
// Invariants:
//   - with no pacer, hold never holds and sent changes nothing;
//   - no data packet leaves before next: hold reports true while
//     now < next;
//   - at is next while a packet waits for it (the deadline the sender's
//     Timeout reports), else 0; the sender clears it when the deadline
//     passes or on each transmit attempt;
//   - a send later than its slot keeps at most half a gap of credit
//     (sent), so late timers do not lose rate and idleness does not
//     buy a burst.
type pacing struct {
	pacer    Pacer
	next, at int64
}

// hold reports whether the pacer holds a packet at now, arming at if it
// does.
func (p *pacing) hold(now int64) bool {
	if p.pacer == nil || now >= p.next {
		return false
	}
	p.at = p.next
	return true
}

// sent moves the pacing slot past a packet of n bytes sent at now,
// given the smoothed RTT srtt (0 before the first sample). A send later
// than its slot (a late timer, or idleness) keeps up to half a gap of
// credit, as Linux TCP's internal pacing does.
func (p *pacing) sent(now, srtt int64, n int) {
	if p.pacer == nil {
		return
	}
	gap := p.pacer.PacingGap(srtt, n)
	if gap <= 0 {
		p.next = 0
		return
	}
	p.next = max(p.next, now-gap/2) + gap
}
