package transport

// ArrivedFirst calls f with the psn and first timestamp of each packet
// among the last pktHistory c sent whose first transmission c holds
// for delivered (the proof undo.go undoes a cut on).
func ArrivedFirst(c *Conn, f func(psn uint32, firstTS int64)) {
	s := &c.tx
	for psn := s.nxt - pktHistory; psn != s.nxt; psn++ {
		if p := s.pkt(psn); p.arrived && p.tx > 0 {
			f(psn, p.firstTS)
		}
	}
}

// RTT returns c's smoothed RTT and its current retransmission timeout
// (ns).
func RTT(c *Conn) (srtt, rto int64) { return c.tx.srtt, c.tx.rto }
