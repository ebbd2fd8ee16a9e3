package transport

// The policy seams, after UCCL's hooks (EventOnSelectPath, EventOnRxACK,
// EventOnTxRTXData, ...): the connection asks a PathSelector where each
// packet goes and tells it what each path did; it asks a
// CongestionControl how much may be in flight and tells it about
// acknowledgements, losses and timeouts. Both are called only from the
// connection's own methods, so they need no locking, and they are fed
// time, never read it, so they stay deterministic.

// PathSelector picks the path (the UDP source-port entropy index) of
// every packet and learns from what happens on each path.
type PathSelector interface {
	// SelectPath returns the path for the packet psn sent at now; retx
	// says it is a retransmission (a spraying policy may avoid the path
	// that lost it).
	SelectPath(now int64, psn uint32, retx bool) uint16
	// OnAck reports, at now, an RTT sample (ns) for a packet sent on
	// path.
	OnAck(now int64, path uint16, rtt int64)
	// OnLoss reports, at now, a packet sent on path declared lost.
	OnLoss(now int64, path uint16)
	// OnTimeout reports, at now, a retransmission timeout: nothing was
	// acknowledged for an RTO, on any path (every packet in flight is
	// then declared lost, each reported to OnLoss). A selector may stop
	// exploring for a while (REPS's freeze) or re-probe its paths.
	OnTimeout(now int64)
}

// CongestionControl bounds the packets in flight.
type CongestionControl interface {
	// Window is the number of packets that may be in flight now.
	Window() int
	// OnAck reports, at now, acked newly acknowledged packets last sent
	// on path, and the RTT sample (ns, 0 if none) taken on path. One
	// acknowledgement may give several calls, one per run of packets
	// sent on the same path; the sample comes with the first call for
	// its path (or alone, with acked 0, if none of the packets it
	// acknowledges went on that path).
	OnAck(now int64, path uint16, acked int, rtt int64)
	// OnLoss reports, at now, one packet declared lost (by SACK, the
	// reordering time or go-back-N; not by a timeout, which OnTimeout
	// reports) that was last sent on path at sentAt: a controller that
	// reduces once per congestion event ignores a loss of a packet sent
	// before its last reduction.
	OnLoss(now int64, path uint16, sentAt int64)
	// OnTimeout reports a retransmission timeout: nothing was
	// acknowledged for an RTO, on any path.
	OnTimeout(now int64)
}

// Undoer is what a CongestionControl may also implement so that a cut
// for losses that all prove spurious (reordering taken for loss) is
// taken back, as TCP's DSACK-based undo does (RFC 3708; the Eifel
// response, RFC 4015): the connection marks the start of each loss
// episode, and undoes it once every loss it reported since has proved
// spurious, before any timeout.
type Undoer interface {
	// MarkUndo is called, at now, before the first OnLoss of a loss
	// episode: the controller keeps the state it would go back to.
	MarkUndo(now int64)
	// Undo is called, at now, when every loss reported to OnLoss since
	// the last MarkUndo proved spurious, and OnTimeout was not called
	// in between: the controller takes back the reductions those
	// losses caused (keeping a larger window if it has grown one since)
	// and reports whether there were any. At most once per MarkUndo.
	Undo(now int64) bool
}

// Pacer is what a CongestionControl may also implement to space the
// connection's data packets (first transmissions and retransmissions;
// acknowledgements are never paced): after sending one of n bytes, the
// connection sends no other before PacingGap has passed. A window below
// one packet needs it (Swift sends one packet every srtt/cwnd); a
// controller may also pace generally, at its window per RTT.
type Pacer interface {
	// PacingGap is the time (ns) to leave after a data packet of n
	// bytes, given the connection's smoothed RTT srtt (ns, 0 before the
	// first sample); 0 or less: no pacing.
	PacingGap(srtt int64, n int) int64
}

// SinglePath sends everything on one path, as RoCE's ECMP hashing puts a
// connection on one: the baseline the next issue's sprayers beat.
type SinglePath struct{ Entropy uint16 }

// SelectPath implements PathSelector.
func (s SinglePath) SelectPath(int64, uint32, bool) uint16 { return s.Entropy }

// OnAck implements PathSelector.
func (SinglePath) OnAck(int64, uint16, int64) {}

// OnLoss implements PathSelector.
func (SinglePath) OnLoss(int64, uint16) {}

// OnTimeout implements PathSelector: with one path there is no other
// to turn to.
func (SinglePath) OnTimeout(int64) {}

// FixedWindow allows a fixed number of packets in flight: no congestion
// control beyond the connection's window (transport/cc has Swift and
// CUBIC).
type FixedWindow struct{ n int }

// NewFixedWindow returns a FixedWindow of n packets.
func NewFixedWindow(n int) *FixedWindow { return &FixedWindow{n: n} }

// Window implements CongestionControl.
func (w *FixedWindow) Window() int { return w.n }

// OnAck implements CongestionControl.
func (*FixedWindow) OnAck(int64, uint16, int, int64) {}

// OnLoss implements CongestionControl.
func (*FixedWindow) OnLoss(int64, uint16, int64) {}

// OnTimeout implements CongestionControl.
func (*FixedWindow) OnTimeout(int64) {}
