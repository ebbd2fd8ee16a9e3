package transport

// sendWindow is the sender's packets: win[psn%pktHistory] for psn in
// [una, nxt), and what is left of those acknowledged, for the last
// pktHistory psns.
//
// Invariants:
//   - una is the oldest psn not acknowledged (una == nxt: none).
//   - inFlight and lost count the packets of [una, nxt) in pktInFlight
//     and in pktLost (the retransmission queue): a packet's state
//     changes only through set, which keeps them (but for the sender's
//     flush, once the connection failed).
type sendWindow struct {
	win      [pktHistory]txPkt
	una, nxt uint32
	inFlight int
	lost     int
}

func (w *sendWindow) pkt(psn uint32) *txPkt { return &w.win[psn%pktHistory] }

// set moves packet p (of [una, nxt)) to state st.
func (w *sendWindow) set(p *txPkt, st uint8) {
	switch p.state {
	case pktInFlight:
		w.inFlight--
	case pktLost:
		w.lost--
	}
	switch st {
	case pktInFlight:
		w.inFlight++
	case pktLost:
		w.lost++
	}
	p.state = st
}
