package remote

import (
	"encoding/binary"
	"sync"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// conn is one connected QP pair as seen from its local QP: the requests
// it posted (the requester side) and the sink its peer's requests arrive
// in (the responder side).
type conn struct {
	f             *Fabric
	local, remote fabric.Addr
	tenant        uint32
	id            uint32 // the endpoint's: what the peer addresses us as

	// Where the two packet streams started: the peer's at rq_psn; ours at
	// sq_psn once sending (from RTS; a response to the peer's READ or
	// atomic may have started the transport's stream before, at the
	// peer's rq_psn, which sq_psn should equal). Under Fabric.cmu.
	rqPSN, sqPSN uint32
	sending      bool

	// sink is the loop's (and close's, once the loop is done with it).
	sink sink

	// mu guards the table of requests in flight. Held only for table
	// updates and Submit (which only tries the endpoint's main lock, and
	// sends without waiting for the socket), never across a wait for the
	// loop: Post runs under the engine's gate.
	mu     sync.Mutex
	closed bool
	slots  []*slot
	free   []uint32
}

// slot is one request in flight. It is the message's Source (WRITE,
// SEND) or Placer (READ) too, so a post allocates nothing once the table
// has grown to the connection's depth.
type slot struct {
	req  *fabric.Request
	comp fabric.Completer
	gen  uint32 // bumped on every reuse: a stale token finds nothing
}

// ReadAt implements transport.Source over the requester's memory. The
// transport calls it only between Post and the completion.
func (s *slot) ReadAt(p []byte, off uint64) bool { return readViews(s.req.Local, p, off) }

// WriteAt implements transport.Placer for a READ's response.
func (s *slot) WriteAt(p []byte, off uint64) bool { return writeViews(s.req.Local, off, p) }

func newConn(f *Fabric, c fabric.Connection, id uint32, r fabric.StreamResponder) *conn {
	cn := &conn{f: f, local: c.Local, remote: c.Remote, tenant: c.Tenant, id: id, rqPSN: c.RQPSN}
	if c.Send {
		cn.sending, cn.sqPSN = true, c.SQPSN
	}
	cn.sink = sink{cn: cn, resp: r}
	return cn
}

// post hands req to the endpoint, which sends it at once or queues it;
// the loop completes it.
func (c *conn) post(req *fabric.Request, comp fabric.Completer) {
	if req.Op.Wire() == 0 || req.Len > wire.MaxMsgLen {
		comp.Complete(req, fabric.OutcomeLocalError)
		return
	}
	m := transport.Message{Op: req.Op.Wire(), Len: uint32(req.Len), RAddr: req.RemoteAddr, RKey: req.RKey,
		Imm: req.Imm, Solicited: req.Solicited, Compare: req.Compare, SwapAdd: req.SwapAdd}
	switch {
	case req.Op.IsAtomic():
		if req.RemoteAddr%8 != 0 {
			comp.Complete(req, fabric.OutcomeInvalidRequest) // what the responder would say
			return
		}
		m.Len = 8
	case guestmem.ViewsLen(req.Local) < req.Len:
		// The buffers cannot hold the message: better refused now than
		// failing the connection at the first packet.
		comp.Complete(req, fabric.OutcomeLocalError)
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		comp.Complete(req, fabric.OutcomeFlushed)
		return
	}
	idx := c.alloc()
	s := c.slots[idx]
	s.req, s.comp = req, comp
	m.Token = uint64(s.gen)<<32 | uint64(idx)
	if m.Len > 0 {
		switch req.Op {
		case fabric.OpWrite, fabric.OpWriteImm, fabric.OpSend, fabric.OpSendImm:
			m.Src = s
		case fabric.OpRead:
			m.Dst = s
		}
	}
	if err := c.f.ep.Submit(c.id, m); err != nil {
		// Removed under us (only if close did not get here first).
		c.release(idx)
		c.mu.Unlock()
		comp.Complete(req, fabric.OutcomeFlushed)
		return
	}
	c.mu.Unlock()
}

// alloc returns a free slot's index. Called with mu.
func (c *conn) alloc() uint32 {
	if n := len(c.free); n > 0 {
		idx := c.free[n-1]
		c.free = c.free[:n-1]
		return idx
	}
	c.slots = append(c.slots, &slot{})
	return uint32(len(c.slots) - 1)
}

// release empties slot idx. Called with mu.
func (c *conn) release(idx uint32) {
	s := c.slots[idx]
	s.req, s.comp = nil, nil
	s.gen++
	c.free = append(c.free, idx)
}

// done receives the transport's completions: from the loop, or from
// Remove for what a disconnect flushes. No endpoint lock is held.
func (c *conn) done(tc transport.Completion) {
	idx, gen := uint32(tc.Token), uint32(tc.Token>>32)
	c.mu.Lock()
	if idx >= uint32(len(c.slots)) || c.slots[idx].gen != gen || c.slots[idx].req == nil {
		c.mu.Unlock()
		c.f.log.Error("remote: completion for no request", "local", c.local, "token", tc.Token, "status", tc.Status)
		return
	}
	s := c.slots[idx]
	req, comp := s.req, s.comp
	c.release(idx)
	c.mu.Unlock()
	o := outcome(tc.Status)
	if o == fabric.OutcomeOK && req.Op.IsAtomic() {
		// The word before the operation, little-endian like the
		// in-process responder writes it.
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], tc.Value)
		if !writeViews(req.Local, 0, b[:min(8, guestmem.ViewsLen(req.Local))]) {
			o = fabric.OutcomeLocalError
		}
	}
	comp.Complete(req, o)
}

// outcome maps a transport status to the requester's outcome.
func outcome(st transport.Status) fabric.Outcome {
	switch st {
	case transport.StatusOK:
		return fabric.OutcomeOK
	case transport.StatusRetryExceeded:
		return fabric.OutcomeRetryExceeded
	case transport.StatusRNRRetryExceeded:
		return fabric.OutcomeRNRExceeded
	case transport.StatusRemoteAccess:
		return fabric.OutcomeRemoteAccess
	case transport.StatusRemoteInvalid:
		return fabric.OutcomeInvalidRequest
	case transport.StatusRemoteOp:
		return fabric.OutcomeRemoteOp
	case transport.StatusFlushed:
		return fabric.OutcomeFlushed
	case transport.StatusLocal:
		return fabric.OutcomeLocalError
	}
	return fabric.OutcomeRemoteOp
}

// close ends the connection: no new request is taken, the endpoint
// flushes what is in flight (each completes OutcomeFlushed before it
// returns) and waits out the loop's call into the sink, and the
// Incomings begun and not ended are released.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.f.ep.Remove(c.id)
	c.sink.releaseAll()
	// Every submitted request got its completion from Remove; anything
	// left would be a bug, but must still complete exactly once.
	c.mu.Lock()
	var left []*slot
	for i, s := range c.slots {
		if s.req != nil {
			left = append(left, &slot{req: s.req, comp: s.comp})
			c.release(uint32(i))
		}
	}
	c.mu.Unlock()
	for _, s := range left {
		c.f.log.Error("remote: request left after disconnect", "local", c.local, "op", s.req.Op)
		s.comp.Complete(s.req, fabric.OutcomeFlushed)
	}
}
