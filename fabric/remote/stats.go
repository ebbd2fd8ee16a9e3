package remote

import (
	"time"

	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/transport"
)

// Stats are the fabric's counters, for monitoring. Every total covers
// every connection the fabric has had, those disconnected included; all
// only grow but Connections.
type Stats struct {
	// Connections is the number of live QP connections.
	Connections int
	// Received and Sent count datagrams; SendErrors those the kernel
	// would not send (no route to a peer, a firewall).
	Received, Sent, SendErrors uint64
	// Malformed: datagrams that did not parse. UnknownConn: for no live
	// connection. Foreign: for a live connection id with the wrong
	// tenant or token (forged, or a misconfigured peer). Refused: every
	// datagram a connection refused, Foreign included.
	Malformed, UnknownConn, Foreign, Refused uint64

	// DataSent: DATA packets sent for the first time (Retransmits
	// counts the others). DataReceived: DATA packets accepted, each
	// once (Duplicates counts the copies).
	DataSent, DataReceived uint64
	// BytesSent and BytesReceived: payload bytes of the DATA packets
	// sent (retransmissions included) and received (duplicates and
	// refused ones included): what the wire carried, headers excluded.
	// BytesPlaced: payload bytes delivered, each once (the goodput).
	BytesSent, BytesReceived, BytesPlaced uint64
	// Retransmits: DATA packets sent again. Timeouts: retransmission
	// timeouts (nothing acknowledged for an RTO). FastRetransmits:
	// packets declared lost from SACKs or the reordering time, not a
	// timeout. Duplicates: DATA packets received again. RNRNaks:
	// receiver-not-ready NAKs received (the peer's QP had no receive
	// posted, or its device was stopped).
	Retransmits, Timeouts, FastRetransmits, Duplicates, RNRNaks uint64
	// SpuriousRetransmits: retransmissions the sender found unneeded
	// (the original was acknowledged after all, or the peer got the
	// packet twice; transport.Stats). CCUndos: congestion cuts taken
	// back because every loss that caused one proved spurious.
	SpuriousRetransmits, CCUndos uint64
	// Busy: DATA packets dropped unreceived because their device was in
	// a control change (its data-path gate taken, or its Begin answered
	// busy); the peer, told so, resends them. BusyNaksSent: the BUSY
	// NAKs that told it (at most one per 10 µs per connection, and one
	// per probe of the peer's; also about once a millisecond while a
	// READ response waits for such a device). BusyNaksReceived: those
	// the peers sent us (a peer device's control change); they cost a
	// retry only once a whole Transport.BusyTimeout has passed.
	Busy, BusyNaksSent, BusyNaksReceived uint64

	// Paths are the RTT samples of each path (UDP source port index,
	// 0..Config.Paths-1) that has any, in path order.
	Paths []PathStats
}

// PathStats are the RTT samples taken on one path: an ACK's echo of
// the time its packet left, measured when the ACK arrives.
type PathStats struct {
	// Path is the source port index (the port is Listen's + Path).
	Path int
	// RTT is the samples' histogram (its Sum / Count is the mean).
	RTT latency.Histogram
}

// rttRecorder is the path selector a connection gets: its own, with
// every RTT sample also recorded for the fabric's Stats.
type rttRecorder struct {
	transport.PathSelector
	paths []latency.Recorder // the fabric's, one per path
}

// OnAck implements transport.PathSelector.
func (r rttRecorder) OnAck(now int64, path uint16, rtt int64) {
	r.PathSelector.OnAck(now, path, rtt)
	if rtt > 0 && int(path) < len(r.paths) {
		r.paths[path].Observe(time.Duration(rtt))
	}
}

// Stats returns the counters.
func (f *Fabric) Stats() Stats {
	st := f.ep.Stats()
	ct := f.ep.ConnTotals()
	s := Stats{
		Connections: len(*f.conns.Load()),
		Received:    st.Received, Sent: st.Sent, SendErrors: st.SendErrors,
		Malformed: st.Malformed, UnknownConn: st.UnknownConn, Foreign: st.Foreign, Refused: st.Refused,
		DataSent: ct.DataSent, DataReceived: ct.DataReceived,
		BytesSent: st.PayloadSent, BytesReceived: st.PayloadReceived, BytesPlaced: ct.BytesPlaced,
		Retransmits: ct.Retransmits, Timeouts: ct.Timeouts, FastRetransmits: ct.FastRetransmits, SpuriousRetransmits: ct.SpuriousRetransmits,
		CCUndos:    ct.CCUndos,
		Duplicates: ct.Duplicates, RNRNaks: ct.RNRNaks, Busy: ct.Busy, BusyNaksSent: ct.BusyNaksSent, BusyNaksReceived: ct.BusyNaksReceived,
	}
	for i := range f.rtt {
		if h := f.rtt[i].Snapshot(); h.Count > 0 {
			s.Paths = append(s.Paths, PathStats{Path: i, RTT: h})
		}
	}
	return s
}
