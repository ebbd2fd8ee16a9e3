package remote

import (
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// rnrStopped is the RNR timer (IB min_rnr_timer encoding) for refusals
// the responder gives no timer for: the device is stopped or changing
// memory (1.28 ms).
const rnrStopped = 14

// sink is a connection's transport.Sink: it hands the peer's requests to
// the local QP's responder as they arrive. Used by the loop only (and by
// releaseAll once the connection is removed from the endpoint).
type sink struct {
	cn   *conn
	resp fabric.StreamResponder
	// nextSSN is the SSN of the next receive-consuming request to
	// commit: the receive WQE at the responder's consumer index.
	nextSSN uint32
	open    []*inbound // begun, not ended
	pool    []*inbound
}

var (
	_ transport.Sink = (*sink)(nil)
	_ transport.Gate = (*sink)(nil)
)

// TryEnter implements transport.Gate: the connection enters the local
// device's data path around every packet and response read that reaches
// the responder, and turns away what the device cannot take now (a
// control change holds it) rather than wait: the loop serves every
// device of the host, and a wait for one would stall them all. The peer
// is told with a BUSY NAK, and resends soon without using up its
// retries (transport, busy.go).
func (s *sink) TryEnter() bool { return s.resp.TryEnter() }

// Exit implements transport.Gate.
func (s *sink) Exit() { s.resp.Exit() }

// inbound is one request between Begin and its end. req stays put (the
// responder may keep a pointer to it) until the Incoming is released.
type inbound struct {
	req fabric.Request
	inc fabric.Incoming // nil for an atomic until its commit
	at  int             // index in sink.open
}

// Begin implements transport.Sink.
func (s *sink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	op, ok := fabric.OpFromWire(m.Op)
	if !ok {
		return wire.NAKInvalid, 0
	}
	in := s.get()
	in.req = fabric.Request{Op: op, Src: s.cn.remote, Dst: s.cn.local, RemoteAddr: m.RAddr, RKey: m.RKey,
		Imm: m.Imm, Solicited: m.Solicited, Compare: m.Compare, SwapAdd: m.SwapAdd, Len: uint64(m.Len)}
	if in.req.Op.ConsumesRecv() {
		in.req.RecvAhead = m.SSN - s.nextSSN
	}
	if in.req.Op.IsAtomic() {
		in.req.Len = 8
	}
	inc, o := s.resp.Begin(&in.req)
	if o != fabric.OutcomeOK || inc == nil {
		if inc != nil {
			inc.Release()
		}
		nak, timer := beginNAK(o, &in.req)
		s.put(in)
		return nak, timer
	}
	in.inc = inc
	in.at = len(s.open)
	s.open = append(s.open, in)
	m.Ctx = in
	return wire.NAKNone, 0
}

// Place implements transport.Sink.
func (s *sink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	in, _ := m.Ctx.(*inbound)
	if in == nil || in.inc == nil {
		return false
	}
	if !in.inc.Place(off, b) {
		// The target went away: the transport refuses the message and
		// will not commit it, so it ends here.
		m.Ctx = nil
		s.end(in)
		return false
	}
	return true
}

// Commit implements transport.Sink.
func (s *sink) Commit(m *transport.Inbound) wire.NAK {
	in, _ := m.Ctx.(*inbound)
	if in == nil {
		return wire.NAKRemoteOp
	}
	m.Ctx = nil
	defer s.end(in)
	if in.inc == nil {
		return wire.NAKRemoteOp
	}
	if o := in.inc.Commit(); o != fabric.OutcomeOK {
		return commitNAK(o)
	}
	switch {
	case in.req.Op == fabric.OpRead:
		// The Incoming reads the response, after Release too.
		m.Response = in.inc
	case in.req.Op.IsAtomic():
		m.Result = in.inc.Value()
	case in.req.Op.ConsumesRecv():
		s.nextSSN++
	}
	return wire.NAKNone
}

// beginNAK is the answer to a refusal at Begin.
func beginNAK(o fabric.Outcome, req *fabric.Request) (wire.NAK, uint8) {
	switch o {
	case fabric.OutcomeRNR:
		if req.HasRNRTimer {
			return wire.NAKRNR, req.RNRTimer & 31
		}
		return wire.NAKRNR, rnrStopped
	case fabric.OutcomeBusy:
		// Not an RNR: that would use up the peer's rnr_retry (and fail
		// it at once with rnr_retry 0) for a control change of ours.
		return wire.NAKBusy, 0
	case fabric.OutcomeRetry:
		return wire.NAKRNR, rnrStopped // come back when the device runs
	}
	return commitNAK(o), 0
}

// commitNAK is the answer to a refusal after the request was accepted
// (no RNR any more: the transport turns it into REMOTE_OP anyway).
func commitNAK(o fabric.Outcome) wire.NAK {
	switch o {
	case fabric.OutcomeRemoteAccess:
		return wire.NAKAccess
	case fabric.OutcomeInvalidRequest, fabric.OutcomeUnreachable:
		return wire.NAKInvalid
	}
	return wire.NAKRemoteOp
}

func (s *sink) get() *inbound {
	if n := len(s.pool); n > 0 {
		in := s.pool[n-1]
		s.pool = s.pool[:n-1]
		return in
	}
	return &inbound{at: -1}
}

func (s *sink) put(in *inbound) {
	*in = inbound{at: -1}
	s.pool = append(s.pool, in)
}

// end releases in's Incoming and forgets it.
func (s *sink) end(in *inbound) {
	if in.inc != nil {
		in.inc.Release()
	}
	if i := in.at; i >= 0 && i < len(s.open) && s.open[i] == in {
		last := s.open[len(s.open)-1]
		s.open[i], last.at = last, i
		s.open[len(s.open)-1] = nil
		s.open = s.open[:len(s.open)-1]
	}
	s.put(in)
}

// releaseAll ends every Incoming begun and not committed: the
// connection is gone. Called once the endpoint no longer calls the sink,
// from a control call (Disconnect), which may wait for the device's
// data path.
func (s *sink) releaseAll() {
	if len(s.open) > 0 {
		s.resp.Enter()
		for len(s.open) > 0 {
			s.end(s.open[len(s.open)-1])
		}
		s.resp.Exit()
	}
	s.pool = nil
}
