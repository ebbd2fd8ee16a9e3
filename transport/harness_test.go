package transport_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// endpoint adapts a Conn to netsim: it parses what arrives.
type endpoint struct {
	c         *transport.Conn
	p         wire.Packet
	badWire   int
	firstBad  error
	dropped   int
	firstDrop error
}

func (e *endpoint) Receive(now int64, pkt []byte) {
	if err := wire.Parse(pkt, &e.p); err != nil {
		if e.badWire == 0 {
			e.firstBad = err
		}
		e.badWire++
		return
	}
	if err := e.c.Handle(now, &e.p); err != nil {
		if e.dropped == 0 {
			e.firstDrop = err
		}
		e.dropped++
	}
}
func (e *endpoint) Transmit(now int64, buf []byte) ([]byte, uint16, bool) {
	return e.c.Transmit(now, buf)
}
func (e *endpoint) Timeout() (int64, bool)  { return e.c.Timeout() }
func (e *endpoint) HandleTimeout(now int64) { e.c.HandleTimeout(now) }

// Guest memory of the receiving side, as the test lays it out: WRITE
// targets in slots, one per message in flight, and receive buffers.
const (
	slotSize  = 64 << 10
	slots     = 64
	recvBufs  = 64
	maxInMsgs = 32 // messages a test keeps outstanding per direction
	// READs read a read-only pattern at roBase; atomics work on one
	// counter at ctrAddr.
	roBase  = 1 << 40
	roSize  = 256 << 10
	ctrAddr = 1 << 41
)

// pattern is what the read-only region holds.
func pattern(off uint64) byte { return byte(off*31 + off>>8) }

// bytesDst is a READ's destination.
type bytesDst []byte

func (b bytesDst) WriteAt(p []byte, off uint64) bool { copy(b[off:], p); return true }

// bytesSrc is a message payload.
type bytesSrc []byte

func (b bytesSrc) ReadAt(p []byte, off uint64) bool { copy(p, b[off:]); return true }

// response is a READ's response source that checks the Finisher
// contract: Finish once, after the commit that gave it.
type response struct {
	bytesSrc
	s        *sink
	finished bool
}

func (r *response) Finish() {
	if r.finished {
		r.s.errorf("a READ response finished twice")
	}
	r.finished = true
	r.s.finishes++
}

// sink is the receiving side's device: it checks every placement and
// commit against what the sender posted.
type sink struct {
	t          *testing.T
	name       string
	mem        []byte // WRITE targets
	recv       []byte // receive buffers, recvBufs of slotSize
	posted     uint32 // receive WQEs posted (ssn < posted may be used)
	commits    uint32 // messages committed
	lastCommit uint32 // msn of the last
	peer       *side  // the sender, for the expected bytes
	failed     bool   // a check failed (reported once)
	ro         []byte // the read-only region
	ctr        uint64 // the atomic counter
	// responses and finishes count the READ responses given and those
	// the connection said it needs no more (transport.Finisher).
	responses, finishes int
	// revoke, if set, says a message's target went away (Place fails).
	revoke func(m *transport.Inbound) bool
	// refuse, if set, refuses a message at its commit.
	refuse func(m *transport.Inbound) wire.NAK
	// forged says packets with the peer's token come from elsewhere too
	// (a fuzzer): a message the peer never posted, or posted with other
	// bytes, may commit; order and placement are still checked.
	forged bool
}

func (s *sink) errorf(format string, args ...any) {
	if !s.failed {
		s.t.Errorf(s.name+": "+format, args...)
	}
	s.failed = true
}

func (s *sink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	switch m.Op {
	case wire.OpReadReq:
		if m.RAddr < roBase || m.RAddr+uint64(m.Len) > roBase+roSize || m.RKey != 0x1234 {
			return wire.NAKAccess, 0
		}
	case wire.OpCmpSwap, wire.OpFetchAdd:
		if m.RAddr != ctrAddr || m.RKey != 0x1234 {
			return wire.NAKAccess, 0
		}
	case wire.OpWrite, wire.OpWriteImm:
		if m.RAddr+uint64(m.Len) > uint64(len(s.mem)) || m.RKey != 0x1234 {
			return wire.NAKAccess, 0
		}
	}
	if m.Op == wire.OpSend || m.Op == wire.OpSendImm || m.Op == wire.OpWriteImm {
		if !wire.SeqLess(m.SSN, s.posted) {
			return wire.NAKRNR, 1
		}
	}
	if m.Op == wire.OpSend || m.Op == wire.OpSendImm {
		if m.Len > slotSize {
			return wire.NAKInvalid, 0
		}
	}
	return wire.NAKNone, 0
}

func (s *sink) target(m *transport.Inbound) []byte {
	if m.Op == wire.OpSend || m.Op == wire.OpSendImm {
		b := (m.SSN % recvBufs) * slotSize
		return s.recv[b : b+slotSize]
	}
	return s.mem[m.RAddr : m.RAddr+uint64(m.Len)]
}

func (s *sink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	if s.revoke != nil && s.revoke(m) {
		return false
	}
	dst := s.target(m)
	if off+uint64(len(b)) > uint64(m.Len) || off+uint64(len(b)) > uint64(len(dst)) {
		s.errorf("msn %d: placement [%d, +%d) outside %d bytes", m.MSN, off, len(b), m.Len)
		return true
	}
	copy(dst[off:], b)
	return true
}

func (s *sink) Commit(m *transport.Inbound) wire.NAK {
	if s.refuse != nil {
		if nak := s.refuse(m); nak != wire.NAKNone {
			return nak
		}
	}
	if s.commits > 0 && !wire.SeqLess(s.lastCommit, m.MSN) {
		s.errorf("commit of msn %d after %d (order or duplicate)", m.MSN, s.lastCommit)
	}
	s.commits++
	s.lastCommit = m.MSN
	want, ok := s.peer.sent[m.MSN]
	if !ok {
		if !s.forged {
			s.errorf("commit of msn %d that was never posted", m.MSN)
		}
		return wire.NAKNone
	}
	s.peer.committed[m.MSN]++
	switch m.Op {
	case wire.OpReadReq:
		off := m.RAddr - roBase
		m.Response = &response{bytesSrc: s.ro[off : off+uint64(m.Len)], s: s}
		s.responses++
		return wire.NAKNone
	case wire.OpFetchAdd:
		m.Result = s.ctr
		s.ctr += m.SwapAdd
		return wire.NAKNone
	case wire.OpCmpSwap:
		m.Result = s.ctr
		if s.ctr == m.Compare {
			s.ctr = m.SwapAdd
		}
		return wire.NAKNone
	}
	if got := s.target(m)[:m.Len]; !bytes.Equal(got, want.data) && !s.forged {
		s.errorf("msn %d (%v, %d bytes): wrong bytes", m.MSN, m.Op, m.Len)
	}
	return wire.NAKNone
}

// side is one end: its connection, what it posted, what completed.
type side struct {
	ep        *endpoint
	sink      *sink
	sent      map[uint32]posted
	committed map[uint32]int // by the peer's sink
	nextMSN   uint32         // messages posted
	done      uint32         // completions seen (they come in posting order)
	lastDone  uint32         // msn of the last completion
	adds      uint64         // FETCH_ADDs completed: the next one returns this
	posts     int            // messages to post in all
	failedAt  int            // index of the first error completion, -1 if none
	statuses  map[transport.Status]int
}

type posted struct {
	op    wire.Op
	data  []byte // WRITE/SEND payload; READ: the destination
	raddr uint64
	token uint64
}

// newPair connects two sides with cfg (a and b get their ids and tokens).
func newPair(t *testing.T, cfg transport.Config) (a, b *side) {
	t.Helper()
	a, b = &side{}, &side{}
	for i, s := range []*side{a, b} {
		s.sent, s.committed, s.failedAt, s.statuses = map[uint32]posted{}, map[uint32]int{}, -1, map[transport.Status]int{}
		s.sink = &sink{t: t, name: fmt.Sprintf("side %d", i), mem: make([]byte, slots*slotSize), recv: make([]byte, recvBufs*slotSize),
			posted: 1 << 30, ro: make([]byte, roSize)}
		for j := range s.sink.ro {
			s.sink.ro[j] = pattern(uint64(j))
		}
	}
	a.sink.peer, b.sink.peer = b, a
	ca, cb := cfg, cfg
	ca.LocalConn, ca.LocalToken, ca.RemoteConn, ca.RemoteToken = 1, 0xaaaa, 2, 0xbbbb
	cb.LocalConn, cb.LocalToken, cb.RemoteConn, cb.RemoteToken = 2, 0xbbbb, 1, 0xaaaa
	var err error
	var conn *transport.Conn
	if conn, err = transport.NewConn(ca, a.sink); err != nil {
		t.Fatal(err)
	}
	a.ep = &endpoint{c: conn}
	if conn, err = transport.NewConn(cb, b.sink); err != nil {
		t.Fatal(err)
	}
	b.ep = &endpoint{c: conn}
	return a, b
}

// post queues a random message (op among ops) of up to maxLen bytes.
func (s *side) post(t *testing.T, rng *rand.Rand, ops []wire.Op, maxLen int) {
	op := ops[rng.IntN(len(ops))]
	n := rng.IntN(maxLen + 1)
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	idx := s.nextMSN
	m := transport.Message{Op: op, Len: uint32(n), Src: bytesSrc(data), Token: uint64(idx) + 1000,
		RAddr: uint64(idx%slots) * slotSize, RKey: 0x1234, Imm: idx}
	switch op {
	case wire.OpReadReq:
		n = min(n, roSize)
		m.Len, m.Src = uint32(n), nil
		m.RAddr = roBase + rng.Uint64N(roSize-uint64(n)+1)
		data = make([]byte, n)
		m.Dst = bytesDst(data)
	case wire.OpFetchAdd:
		m.Len, m.Src, m.RAddr, m.SwapAdd = 0, nil, ctrAddr, 1
	}
	msn, err := s.ep.c.Post(m)
	if err != nil {
		t.Fatalf("post %d: %v", idx, err)
	}
	s.sent[msn] = posted{op: op, data: data, raddr: m.RAddr, token: m.Token}
	s.nextMSN++
}

// collect checks the side's completions: each message once, in order,
// OK only if the peer committed it, and everything after a failure
// flushed.
func (s *side) collect(t *testing.T) {
	for _, c := range s.ep.c.Completions(nil) {
		if c.Token != uint64(s.done)+1000 || s.sent[c.MSN].token != c.Token {
			t.Errorf("completion msn %d token %d, want token %d (duplicate or out of order)", c.MSN, c.Token, s.done+1000)
		}
		s.statuses[c.Status]++
		switch {
		case c.Status == transport.StatusOK:
			if s.failedAt >= 0 {
				t.Errorf("msn %d OK after the connection failed", c.MSN)
			}
			if s.committed[c.MSN] != 1 {
				t.Errorf("msn %d completed OK but committed %d times", c.MSN, s.committed[c.MSN])
			}
			switch p := s.sent[c.MSN]; p.op {
			case wire.OpReadReq:
				for i, b := range p.data {
					if b != pattern(p.raddr-roBase+uint64(i)) {
						t.Errorf("READ msn %d: byte %d wrong", c.MSN, i)
						break
					}
				}
			case wire.OpFetchAdd:
				// Executed exactly once each, in order: the values
				// returned count up.
				if c.Value != s.adds {
					t.Errorf("FETCH_ADD msn %d returned %d, want %d", c.MSN, c.Value, s.adds)
				}
				s.adds++
			}
		case s.failedAt < 0:
			s.failedAt = int(c.MSN)
		case c.Status != transport.StatusFlushed:
			t.Errorf("msn %d: %v after the failure, want FLUSHED", c.MSN, c.Status)
		}
		s.done++
		s.lastDone = c.MSN
	}
}

// outstanding is how many posted messages have not completed.
func (s *side) outstanding() int { return int(s.nextMSN - s.done) }

// finished: every posted message completed, and all were posted (or the
// connection failed, after which nothing more can be).
func (s *side) finished() bool {
	return s.done == s.nextMSN && (int(s.nextMSN) >= s.posts || s.ep.c.Failed())
}

// peerCounter is the atomic counter at the peer.
func (s *side) peerCounter() uint64 {
	if s.sink.peer == nil {
		return 0
	}
	return s.sink.peer.sink.ctr
}

// batching is an endpoint that handles what arrives in batches, as the
// socket endpoint does (one system call reads many datagrams, and the
// connection acknowledges once after them): a packet waits until hold
// ns have passed since the first of its batch arrived.
type batching struct {
	*endpoint
	hold int64
	due  int64 // when the waiting batch is handled (0: none waits)
	q    [][]byte
}

func (b *batching) Receive(now int64, pkt []byte) {
	b.q = append(b.q, bytes.Clone(pkt)) // netsim reuses pkt
	if b.due == 0 {
		b.due = now + b.hold
	}
}

func (b *batching) Timeout() (int64, bool) {
	at, ok := b.endpoint.Timeout()
	if b.due != 0 && (!ok || b.due < at) {
		return b.due, true
	}
	return at, ok
}

func (b *batching) HandleTimeout(now int64) {
	if b.due != 0 && now >= b.due {
		for _, p := range b.q {
			b.endpoint.Receive(now, p)
		}
		b.q, b.due = b.q[:0], 0
	}
	if at, ok := b.endpoint.Timeout(); ok && at <= now {
		b.endpoint.HandleTimeout(now)
	}
}

// recording is an endpoint that records the timestamp of every DATA
// packet that reaches it.
type recording struct {
	netsim.Endpoint
	ts map[int64]bool
}

func (r *recording) Receive(now int64, pkt []byte) {
	var p wire.Packet
	if wire.Parse(pkt, &p) == nil && p.Type == wire.TypeData {
		r.ts[p.TS] = true
	}
	r.Endpoint.Receive(now, pkt)
}
