package remote

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/transport"
)

// NumRTTBuckets is the number of RTT histogram buckets per path: bucket
// i counts samples of at most RTTBucketBound(i), 1.024 µs doubling up to
// about 1.07 s; a sample above the last is counted in RTTCount only.
const NumRTTBuckets = 21

// rttBucketShift: the first bucket's bound is 1<<rttBucketShift ns.
const rttBucketShift = 10

// RTTBucketBound is the upper bound (inclusive) of RTT bucket i.
func RTTBucketBound(i int) time.Duration { return time.Duration(1) << (rttBucketShift + i) }

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
	// posted, or its device was briefly busy).
	Retransmits, Timeouts, FastRetransmits, Duplicates, RNRNaks uint64

	// Paths are the RTT samples of each path (UDP source port index,
	// 0..Config.Paths-1) that has any, in path order.
	Paths []PathStats
}

// PathStats are the RTT samples taken on one path: an ACK's echo of
// the time its packet left, measured when the ACK arrives.
type PathStats struct {
	// Path is the source port index (the port is Listen's + Path).
	Path int
	// RTTSum and RTTCount: the samples' sum and number (the mean is
	// their ratio).
	RTTSum   time.Duration
	RTTCount uint64
	// RTTBuckets[i] counts the samples of at most RTTBucketBound(i),
	// cumulatively (a Prometheus histogram's buckets; RTTCount is its
	// +Inf bucket).
	RTTBuckets [NumRTTBuckets]uint64
}

// pathRTT is one path's RTT record. The fabric's I/O loop writes it
// (connections call their selector from the loop alone), Stats reads it
// concurrently: atomics, no lock, and two of them per sample (the count
// is the buckets' sum, an overflow bucket last).
type pathRTT struct {
	sum     atomic.Uint64
	buckets [NumRTTBuckets + 1]atomic.Uint64 // not cumulative; the last: above every bound
}

func (p *pathRTT) add(rtt int64) {
	p.sum.Add(uint64(rtt))
	// The bucket whose bound 2^(shift+i) is the first >= rtt.
	p.buckets[min(NumRTTBuckets, max(0, bits.Len64(uint64(rtt-1))-rttBucketShift))].Add(1)
}

// load reads the record as path i's PathStats (ok false: no sample).
func (p *pathRTT) load(i int) (PathStats, bool) {
	ps := PathStats{Path: i}
	for b := range p.buckets {
		ps.RTTCount += p.buckets[b].Load()
		if b < NumRTTBuckets {
			ps.RTTBuckets[b] = ps.RTTCount
		}
	}
	ps.RTTSum = time.Duration(p.sum.Load())
	return ps, ps.RTTCount > 0
}

// rttRecorder is the path selector a connection gets: its own, with
// every RTT sample also recorded for the fabric's Stats.
type rttRecorder struct {
	transport.PathSelector
	paths []pathRTT // the fabric's, one per path
}

// OnAck implements transport.PathSelector.
func (r rttRecorder) OnAck(now int64, path uint16, rtt int64) {
	r.PathSelector.OnAck(now, path, rtt)
	if rtt > 0 && int(path) < len(r.paths) {
		r.paths[path].add(rtt)
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
		Retransmits: ct.Retransmits, Timeouts: ct.Timeouts, FastRetransmits: ct.FastRetransmits,
		Duplicates: ct.Duplicates, RNRNaks: ct.RNRNaks,
	}
	for i := range f.rtt {
		if ps, ok := f.rtt[i].load(i); ok {
			s.Paths = append(s.Paths, ps)
		}
	}
	return s
}
