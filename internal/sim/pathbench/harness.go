package pathbench

import (
	"encoding/binary"
	"fmt"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/pathsel"
	"github.com/vstellar/vstellar/transport/wire"
)

// maxViolations bounds the violations kept: the first few say enough.
const maxViolations = 20

// endpoint adapts a Conn to netsim.Endpoint: it parses what arrives.
type endpoint struct {
	c       *transport.Conn
	p       wire.Packet
	h       *harness
	dropped uint64            // packets the Conn refused (late ones after a failure)
	sel     *pathsel.Selector // its path selector, for the paths it took down
}

func (e *endpoint) Receive(now int64, pkt []byte) {
	if err := wire.Parse(pkt, &e.p); err != nil {
		e.h.violate("unparsable packet: %v", err)
		return
	}
	if e.c.Handle(now, &e.p) != nil {
		e.dropped++
	}
}

func (e *endpoint) Transmit(now int64, buf []byte) ([]byte, uint16, bool) {
	return e.c.Transmit(now, buf)
}
func (e *endpoint) Timeout() (int64, bool)  { return e.c.Timeout() }
func (e *endpoint) HandleTimeout(now int64) { e.c.HandleTimeout(now) }

// msgSrc is message idx of flow: each packet's payload starts with its
// offset and the message's identity, which the sink checks.
type msgSrc struct{ flow, idx uint32 }

func (m msgSrc) tag() uint64 { return uint64(m.flow)<<32 | uint64(m.idx) }

func (m msgSrc) ReadAt(p []byte, off uint64) bool {
	if len(p) >= 16 {
		binary.LittleEndian.PutUint64(p, off)
		binary.LittleEndian.PutUint64(p[8:], m.tag())
	}
	return true
}

// sink is a flow's receiver: it checks placements and counts commits and
// delivered bytes.
type sink struct {
	h       *harness
	flow    uint32
	commits []uint8 // per message
}

func (s *sink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	if m.Op != wire.OpWrite || int(m.MSN) >= len(s.commits) || m.Len != uint32(s.h.sc.MessageBytes) {
		s.h.violate("flow %d: unexpected %v msn %d of %d bytes", s.flow, m.Op, m.MSN, m.Len)
		return wire.NAKInvalid, 0
	}
	return wire.NAKNone, 0
}

func (s *sink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	if off+uint64(len(b)) > uint64(m.Len) {
		s.h.violate("flow %d msn %d: %d bytes at %d beyond %d", s.flow, m.MSN, len(b), off, m.Len)
		return true
	}
	want := msgSrc{flow: s.flow, idx: m.MSN}
	if len(b) >= 16 && (binary.LittleEndian.Uint64(b) != off || binary.LittleEndian.Uint64(b[8:]) != want.tag()) {
		s.h.violate("flow %d msn %d: bytes for offset %d are not what was sent there", s.flow, m.MSN, off)
	}
	s.h.deliver(len(b))
	return true
}

func (s *sink) Commit(m *transport.Inbound) wire.NAK {
	if s.commits[m.MSN]++; s.commits[m.MSN] > 1 {
		s.h.violate("flow %d: msn %d committed %d times", s.flow, m.MSN, s.commits[m.MSN])
	}
	return wire.NAKNone
}

// flowRun is one flow's sender side and its bookkeeping.
type flowRun struct {
	Flow
	a, b     *endpoint
	sink     *sink
	posted   int
	done     int
	ok       int
	status   transport.Status
	failed   bool
	finish   int64
	finished bool
}

// collect checks the flow's completions: in posting order, once each, OK
// only when committed once, everything after a failure flushed.
func (f *flowRun) collect(h *harness, now int64) {
	h.comps = f.a.c.Completions(h.comps[:0])
	for _, c := range h.comps {
		if c.Token != uint64(f.done) {
			h.violate("flow %d->%d: completion of message %d, want %d", f.Src, f.Dst, c.Token, f.done)
		}
		switch {
		case c.Status == transport.StatusOK:
			if f.failed {
				h.violate("flow %d->%d: message %d OK after a failure", f.Src, f.Dst, c.Token)
			}
			if c.Token >= uint64(len(f.sink.commits)) || f.sink.commits[c.Token] != 1 {
				h.violate("flow %d->%d: message %d OK but not committed once", f.Src, f.Dst, c.Token)
			}
			f.ok++
		case !f.failed:
			f.failed, f.status = true, c.Status
		case c.Status != transport.StatusFlushed:
			h.violate("flow %d->%d: message %d %v after the failure, want FLUSHED", f.Src, f.Dst, c.Token, c.Status)
		}
		f.done++
		f.finish = now
	}
	if !f.finished && f.done == f.posted && (f.posted == h.sc.Messages || f.a.c.Failed()) {
		f.finished = true
	}
}

// post keeps Outstanding messages posted until all are.
func (f *flowRun) post(h *harness, idx uint32) {
	for f.posted-f.done < h.sc.Outstanding && f.posted < h.sc.Messages && !f.a.c.Failed() {
		m := transport.Message{Op: wire.OpWrite, Len: uint32(h.sc.MessageBytes), RKey: 1, Token: uint64(f.posted),
			RAddr: uint64(f.posted%h.sc.Outstanding) * uint64(h.sc.MessageBytes), Src: msgSrc{flow: idx, idx: uint32(f.posted)}}
		if _, err := f.a.c.Post(m); err != nil {
			h.violate("flow %d->%d: post %d: %v", f.Src, f.Dst, f.posted, err)
			return
		}
		f.posted++
	}
}

// harness is one run's state.
type harness struct {
	sc         Scenario
	now        func() int64
	delivered  []int64
	violations []string
	comps      []transport.Completion
}

func (h *harness) violate(format string, args ...any) {
	if len(h.violations) < maxViolations {
		h.violations = append(h.violations, fmt.Sprintf(format, args...))
	}
}

func (h *harness) deliver(n int) {
	bin := int(h.now() / int64(h.sc.Bin))
	for len(h.delivered) <= bin {
		h.delivered = append(h.delivered, 0)
	}
	h.delivered[bin] += int64(n)
}
