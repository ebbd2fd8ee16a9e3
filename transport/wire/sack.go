package wire

// SeqLess reports whether a comes before b in 32-bit serial-number
// arithmetic (RFC 1982): b is 1..2^31-1 steps ahead of a, modulo 2^32.
// Two numbers exactly 2^31 apart are unordered (the RFC leaves the case
// undefined): SeqLess is false both ways, so callers never see a < b and
// b < a at once.
func SeqLess(a, b uint32) bool {
	d := b - a
	return d != 0 && d < 1<<31
}

// Has reports whether the ACK covers psn: psn is before Cum (serial
// arithmetic), or psn is in Cum+1..Cum+SACKBits and its SACK bit is set.
// Cum itself is the next PSN expected, so it is never covered.
func (a *Ack) Has(psn uint32) bool {
	if SeqLess(psn, a.Cum) {
		return true
	}
	i := psn - a.Cum - 1 // wraps to a huge value for psn == Cum
	if i >= SACKBits {
		return false
	}
	return a.SACK[i/64]&(1<<(i%64)) != 0
}

// Set sets the SACK bit for psn if psn is in Cum+1..Cum+SACKBits and
// reports whether it fit. Outside that window, including psn <= Cum (which
// the cumulative part already speaks for, or Cum itself), it changes
// nothing and returns false.
func (a *Ack) Set(psn uint32) bool {
	i := psn - a.Cum - 1
	if i >= SACKBits {
		return false
	}
	a.SACK[i/64] |= 1 << (i % 64)
	return true
}
