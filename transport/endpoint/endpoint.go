package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// batch is the datagrams read or written per system call.
const batch = 64

// bufSize holds the largest datagram the transport sends (MaxPayload is
// at most 65535, plus headers, within a UDP datagram).
const bufSize = udp.MaxDatagram

// maxIdle bounds a blocked read when no timer is due, so a missed wake-up
// costs at most this.
const maxIdle = 10 * time.Millisecond

// Errors, wrapped with the connection id.
var (
	// ErrExists: Add of an id a live connection has.
	ErrExists = errors.New("endpoint: connection id in use")
	// ErrNoConn: the id names no live connection (never added, or
	// removed).
	ErrNoConn = errors.New("endpoint: no such connection")
)

// Stats count what the loop received, sent and dropped.
type Stats struct {
	// Malformed: datagrams that do not parse. UnknownConn: datagrams for
	// no live connection. Refused: datagrams a connection refused (every
	// reason); Foreign is the part of Refused whose tenant or token did
	// not match (forged or misdirected).
	Malformed, UnknownConn, Refused, Foreign uint64
	Received, Sent                           uint64
	// SendErrors: datagrams the kernel would not send (no route to the
	// peer, refused by a firewall, ...): dropped like a packet lost on
	// the wire, for the transport to resend or give up on.
	SendErrors uint64
	// PayloadSent: payload bytes of the DATA packets the connections
	// transmitted, retransmissions included (what the wire carried for
	// them, headers excluded). PayloadReceived: payload bytes of the
	// DATA packets that parsed, whatever their connection made of them
	// (duplicates and refused ones included).
	PayloadSent, PayloadReceived uint64
}

// sub is one queued submission: a message, or new retry limits.
type sub struct {
	m               transport.Message
	limits          bool
	retry, rnrRetry int
	// start: StartSend with psn and token.
	start bool
	psn   uint32
	token uint64
}

type entry struct {
	id    uint32
	c     *transport.Conn
	peer  netip.AddrPort
	paths int
	done  func(transport.Completion) // may be nil

	comps  []transport.Completion // loop's: collected under mu, delivered under dmu
	failed bool                   // under mu: seen failed by send

	// Under Endpoint.smu.
	q       []sub // submissions not yet handed to c, in order
	pending bool  // in Endpoint.pending
}

// Endpoint is connections sharing one udp.Conn.
//
// Locks, in the order they nest: mu (the connections: Handle, Transmit,
// timers, Post), then smu (the submission queues, wake-ups) or dmu (the
// delivery of completions). Submit only tries mu and xmu (the inline
// send buffers, inline.go) and otherwise takes only smu, briefly, so it
// never waits for the loop while the loop is inside a Sink; the loop
// delivers completions holding dmu but not mu, so a done callback may
// Submit. xmu is taken with a wait only by the loop, holding nothing
// else.
type Endpoint struct {
	sock  *udp.Conn
	log   *slog.Logger
	start time.Time

	mu    sync.Mutex
	conns map[uint32]*entry
	order []*entry // iteration order, for fairness and determinism
	st    Stats
	gone  transport.Stats // the counters of removed connections, summed
	kick  bool            // a connection failed in Transmit: collect its completions at once

	smu     sync.Mutex
	live    map[uint32]*entry // the connections Submit may queue for
	pending []*entry          // entries with queued submissions
	woken   bool
	armed   int64 // the read deadline last set (Endpoint clock)

	dmu sync.Mutex

	// The inline send path's (inline.go), under xmu: datagrams a poster
	// transmitted, xout[xleft:] of them still to send (by the loop).
	xmu          sync.Mutex
	xout         []udp.Message
	xbuf         [][]byte
	xleft        int
	xsent, xerrs atomic.Uint64 // datagrams sent inline, and refused

	// The loop's own.
	work  []*entry // pending entries being drained
	ready []*entry // entries with completions to deliver
	in    []udp.Message
	out   []udp.Message
	obuf  [][]byte
	pkt   wire.Packet
}

// New creates an Endpoint on sock. Run drives it.
func New(sock *udp.Conn, log *slog.Logger) *Endpoint {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Endpoint{sock: sock, log: log, start: time.Now(), conns: make(map[uint32]*entry), live: make(map[uint32]*entry)}
	e.in = make([]udp.Message, batch)
	for i := range e.in {
		e.in[i].Buf = make([]byte, bufSize)
	}
	e.out = make([]udp.Message, 0, batch)
	e.obuf = make([][]byte, batch)
	for i := range e.obuf {
		e.obuf[i] = make([]byte, bufSize)
	}
	e.xout = make([]udp.Message, 0, inlineMax)
	e.xbuf = make([][]byte, inlineMax)
	for i := range e.xbuf {
		e.xbuf[i] = make([]byte, bufSize)
	}
	return e
}

// Now is the Endpoint's clock (ns), the time its connections see.
func (e *Endpoint) Now() int64 { return int64(time.Since(e.start)) }

// Add registers c, which the peer addresses as id (c's LocalConn), and
// sends to peer over paths source ports (1..the socket's). done, if not
// nil, is called for every completion of c, in order: from the loop, or
// from Remove for what Remove flushes. It must not call Remove.
func (e *Endpoint) Add(id uint32, c *transport.Conn, peer netip.AddrPort, paths int, done func(transport.Completion)) error {
	if paths < 1 || paths > e.sock.Paths() {
		return fmt.Errorf("endpoint: %d paths, the socket has %d", paths, e.sock.Paths())
	}
	if c == nil {
		return fmt.Errorf("endpoint: connection %d: nil Conn", id)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.conns[id]; dup {
		return fmt.Errorf("endpoint: connection %d: %w", id, ErrExists)
	}
	en := &entry{id: id, c: c, peer: peer, paths: paths, done: done}
	e.conns[id] = en
	e.order = append(e.order, en)
	e.smu.Lock()
	e.live[id] = en
	e.wake()
	e.smu.Unlock()
	return nil
}

// Remove closes connection id (transport.Conn.Close: every message
// outstanding or still queued completes StatusFlushed) and forgets it.
// Those completions are delivered through done before Remove returns,
// after any the loop was delivering; once Remove returns, no Sink method
// of the connection runs again and done is not called again. Remove
// waits for the loop to finish the Sink call in progress, so it must not
// be called from the loop (a Sink or a done callback). ok is false if
// there was no such connection.
func (e *Endpoint) Remove(id uint32) (ok bool) {
	e.mu.Lock()
	en, ok := e.conns[id]
	if !ok {
		e.mu.Unlock()
		return false
	}
	en.c.Close()
	comps := en.c.Completions(nil)
	e.smu.Lock()
	delete(e.live, id)
	for _, s := range en.q {
		if !s.limits && !s.start {
			comps = append(comps, transport.Completion{Token: s.m.Token, Status: transport.StatusFlushed})
		}
	}
	en.q = nil
	e.smu.Unlock()
	delete(e.conns, id)
	e.order = slices.DeleteFunc(e.order, func(x *entry) bool { return x == en })
	// Closed, the connection counts nothing more: its counters join
	// the totals here, under mu, so ConnTotals never misses or doubles
	// them.
	addStats(&e.gone, en.c.Stats())
	// The loop may be delivering earlier completions of en (it took dmu
	// before it let go of mu): ours come after.
	e.dmu.Lock()
	e.mu.Unlock()
	defer e.dmu.Unlock()
	if en.done != nil {
		for _, c := range comps {
			en.done(c)
		}
	}
	return true
}

// Submit posts m on connection id, in submission order, and never waits
// for the loop: if m is small (inlineMaxLen), the loop's lock is free
// and nothing is queued for the connection, it posts m at once and sends
// it itself (see sendInline); otherwise it queues m and wakes the loop,
// which posts it. It never waits for the lock the loop holds while it
// calls a Sink, so it is safe from a goroutine the loop may be waiting
// for. Every submitted message completes exactly once through the
// connection's done: a message the connection refuses (it failed or was
// removed) completes StatusFlushed, a malformed one StatusLocal (after
// failing the connection, so completions stay in order); a full
// connection keeps the rest queued until completions make room. The
// error (ErrNoConn) is for a connection that is not there: then nothing
// is queued and done is not called.
func (e *Endpoint) Submit(id uint32, m transport.Message) error {
	if m.Len <= inlineMaxLen && e.xmu.TryLock() {
		if len(e.xout) == 0 && e.mu.TryLock() {
			return e.submitInline(id, m)
		}
		e.xmu.Unlock()
	}
	return e.enqueue(id, sub{m: m})
}

// SetLimits queues new retry limits for connection id (see
// transport.Conn.SetLimits), applied by the loop in order with the
// messages submitted before and after.
func (e *Endpoint) SetLimits(id uint32, retryLimit, rnrRetry int) error {
	if retryLimit < 1 || retryLimit > 7 || rnrRetry < 1 || rnrRetry > 7 {
		return fmt.Errorf("endpoint: connection %d: retry limit %d / rnr retry %d outside 1..7: %w", id, retryLimit, rnrRetry, transport.ErrConfig)
	}
	return e.enqueue(id, sub{limits: true, retry: retryLimit, rnrRetry: rnrRetry})
}

// StartSend queues the start of connection id's own stream (see
// transport.Conn.StartSend), applied by the loop in order with the
// messages submitted before and after.
func (e *Endpoint) StartSend(id uint32, psn uint32, token uint64) error {
	return e.enqueue(id, sub{start: true, psn: psn, token: token})
}

func (e *Endpoint) enqueue(id uint32, s sub) error {
	e.smu.Lock()
	defer e.smu.Unlock()
	en, ok := e.live[id]
	if !ok {
		return fmt.Errorf("endpoint: connection %d: %w", id, ErrNoConn)
	}
	en.q = append(en.q, s)
	if !en.pending {
		en.pending = true
		e.pending = append(e.pending, en)
	}
	e.wake()
	return nil
}

// Post posts m on connection id at once and wakes the loop, which sends
// it. Unlike Submit it takes the loop's lock, so it waits while the loop
// is inside a Sink; it reports a full connection (transport.ErrFull) to
// the caller. Use one of Post and Submit per connection, not both.
//
// It does not send inline: its callers post and then wait for the
// completion themselves, and a poster that blocks right after sending
// leaves the reply to a thread waiting in the network poller on another
// processor, where the loop, having sent, finds it on its own (measured:
// the transport-alone ping-pong of vstellar-bench wire got slower).
func (e *Endpoint) Post(id uint32, m transport.Message) (uint32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	en, ok := e.conns[id]
	if !ok {
		return 0, fmt.Errorf("endpoint: connection %d: %w", id, ErrNoConn)
	}
	msn, err := en.c.Post(m)
	if err == nil {
		e.smu.Lock()
		e.wake()
		e.smu.Unlock()
	}
	return msn, err
}

// Stats returns the loop's counters, and the inline sends'.
func (e *Endpoint) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.st
	st.Sent += e.xsent.Load()
	st.SendErrors += e.xerrs.Load()
	return st
}

// Len returns the number of live connections.
func (e *Endpoint) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

// ConnStats returns connection id's counters.
func (e *Endpoint) ConnStats(id uint32) (transport.Stats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	en, ok := e.conns[id]
	if !ok {
		return transport.Stats{}, false
	}
	return en.c.Stats(), true
}

// ConnTotals returns the counters of every connection the Endpoint has
// had, summed: the live ones' and those of connections removed. It is
// what a monitor scrapes; the hot path pays nothing for it (each
// connection keeps its own counters, summed only here).
func (e *Endpoint) ConnTotals() transport.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.gone
	for _, en := range e.order {
		addStats(&t, en.c.Stats())
	}
	return t
}

// addStats adds every counter of s to t.
func addStats(t *transport.Stats, s transport.Stats) {
	t.DataSent += s.DataSent
	t.Retransmits += s.Retransmits
	t.AcksSent += s.AcksSent
	t.AcksReceived += s.AcksReceived
	t.DataReceived += s.DataReceived
	t.Duplicates += s.Duplicates
	t.Timeouts += s.Timeouts
	t.FastRetransmits += s.FastRetransmits
	t.SpuriousRetransmits += s.SpuriousRetransmits
	t.CCUndos += s.CCUndos
	t.RNRNaks += s.RNRNaks
	t.Foreign += s.Foreign
	t.Invalid += s.Invalid
	t.BytesPlaced += s.BytesPlaced
	t.Busy += s.Busy
	t.BusyNaksSent += s.BusyNaksSent
	t.BusyNaksReceived += s.BusyNaksReceived
}

// wake interrupts a blocked read. Called with smu.
func (e *Endpoint) wake() {
	if !e.woken {
		e.woken = true
		e.sock.SetReadDeadline(time.Unix(1, 0))
	}
}

// Run drives the connections until ctx ends or the socket fails.
func (e *Endpoint) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { e.sock.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	n := 0
	for ctx.Err() == nil {
		// A wake-up from here on must interrupt the read below: clear
		// the flag before looking at the queues.
		e.smu.Lock()
		e.woken = false
		e.smu.Unlock()
		e.process(n)
		if err := e.send(); err != nil {
			return err
		}
		e.armDeadline()
		if ctx.Err() != nil {
			break
		}
		var err error
		n, err = e.sock.ReadBatch(e.in)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("endpoint: read: %w", err)
		}
	}
	return ctx.Err()
}

// armDeadline sets the read deadline to the next timer (at most maxIdle
// away), or to now if a wake-up came since the loop last looked. Under
// mu, so an inline send's earlier timer (sendInline) is either seen here
// or brought forward after; and under smu, so a Submit either sees the
// deadline set and overrides it, or left woken for this to see.
func (e *Endpoint) armDeadline() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.Now()
	at := now + int64(maxIdle)
	for _, en := range e.order {
		if t, ok := en.c.Timeout(); ok && t < at {
			at = t
		}
	}
	if e.kick {
		e.kick, at = false, now
	}
	e.smu.Lock()
	defer e.smu.Unlock()
	if e.woken {
		at = now
	}
	e.armed = at
	e.sock.SetReadDeadline(e.start.Add(time.Duration(max(at, now))))
}

// process hands n received datagrams to their connections, runs due
// timers, moves queued submissions into the connections and delivers
// the completions.
func (e *Endpoint) process(n int) {
	e.mu.Lock()
	now := e.Now()
	for i := range n {
		m := &e.in[i]
		e.st.Received++
		if err := wire.Parse(m.Buf[:m.N], &e.pkt); err != nil {
			e.st.Malformed++
			continue
		}
		if e.pkt.Type == wire.TypeData {
			e.st.PayloadReceived += uint64(len(e.pkt.Payload))
		}
		en, ok := e.conns[e.pkt.Conn]
		if !ok {
			e.st.UnknownConn++
			continue
		}
		if err := en.c.Handle(now, &e.pkt); err != nil {
			e.st.Refused++
			if errors.Is(err, transport.ErrForeign) {
				e.st.Foreign++
			}
		}
	}
	e.ready = e.ready[:0]
	for _, en := range e.order {
		if t, ok := en.c.Timeout(); ok && t <= now {
			en.c.HandleTimeout(now)
		}
		en.comps = en.c.Completions(en.comps[:0])
	}
	e.drain()
	for _, en := range e.order {
		if len(en.comps) > 0 {
			e.ready = append(e.ready, en)
		}
	}
	if len(e.ready) == 0 {
		e.mu.Unlock()
		return
	}
	// Deliver without mu (a done callback may Submit, or block briefly),
	// but holding dmu from before mu is let go, so a Remove cannot slip
	// its flushes in ahead of these.
	e.dmu.Lock()
	e.mu.Unlock()
	for _, en := range e.ready {
		if en.done != nil {
			for _, c := range en.comps {
				en.done(c)
			}
		}
		en.comps = en.comps[:0]
	}
	e.dmu.Unlock()
}

// drain moves queued submissions into their connections, in order.
// Called with mu, after the connections' own completions were collected
// (a refused message completes after everything posted before it).
func (e *Endpoint) drain() {
	e.smu.Lock()
	defer e.smu.Unlock()
	if len(e.pending) == 0 {
		return
	}
	e.work = append(e.work[:0], e.pending...)
	clear(e.pending)
	e.pending = e.pending[:0]
	for _, en := range e.work {
		en.pending = false
		if e.conns[en.id] != en {
			continue // removed: Remove flushed its queue
		}
		i := 0
		for ; i < len(en.q); i++ {
			if !e.post(en, &en.q[i]) {
				break
			}
		}
		n := copy(en.q, en.q[i:])
		clear(en.q[n:])
		en.q = en.q[:n]
		if n > 0 {
			// Full: try again on the next pass (completions come with
			// acknowledgements, which wake the loop).
			en.pending = true
			e.pending = append(e.pending, en)
		}
	}
	clear(e.work)
}

// post hands one submission to its connection; false: the connection is
// full, keep it queued.
func (e *Endpoint) post(en *entry, s *sub) bool {
	if s.limits {
		if err := en.c.SetLimits(s.retry, s.rnrRetry); err != nil {
			e.log.Warn("endpoint: set limits", "conn", en.id, "err", err)
		}
		return true
	}
	if s.start {
		if err := en.c.StartSend(s.psn, s.token); err != nil {
			e.log.Warn("endpoint: start send", "conn", en.id, "err", err)
		}
		return true
	}
	_, err := en.c.Post(s.m)
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrFull):
		return false
	case errors.Is(err, transport.ErrClosed):
		en.comps = append(en.comps, transport.Completion{Token: s.m.Token, Status: transport.StatusFlushed})
	default:
		// A malformed message is the caller's bug. Failing the
		// connection keeps completions in order: everything before it
		// completes (flushed) first.
		e.log.Error("endpoint: refused message", "conn", en.id, "err", err)
		en.c.Close()
		en.comps = en.c.Completions(en.comps)
		en.comps = append(en.comps, transport.Completion{Token: s.m.Token, Status: transport.StatusLocal})
	}
	return true
}

// send transmits everything the connections have, in batches, after
// what an inline send left.
func (e *Endpoint) send() error {
	if err := e.flushInline(); err != nil {
		return err
	}
	for {
		e.mu.Lock()
		now := e.Now()
		e.out = e.out[:0]
		for _, en := range e.order {
			for len(e.out) < batch {
				pkt, path, ok := en.c.Transmit(now, e.obuf[len(e.out)])
				if !ok {
					if !en.failed && en.c.Failed() {
						// Its source could not be read: the flushed
						// messages are waiting to be reported.
						en.failed, e.kick = true, true
					}
					break
				}
				if isData(pkt) {
					e.st.PayloadSent += uint64(len(pkt) - wire.HeaderLen - wire.DataLen)
				}
				e.out = append(e.out, udp.Message{Buf: pkt, N: len(pkt), Addr: en.peer, Path: int(path) % en.paths})
			}
		}
		e.mu.Unlock()
		if len(e.out) == 0 {
			return nil
		}
		_, failed, err := e.writeOut(e.out, false)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.st.Sent += uint64(len(e.out)) - failed
		e.st.SendErrors += failed
		e.mu.Unlock()
		if len(e.out) < batch {
			return nil
		}
	}
}

// writeOut sends msgs in order, skipping (and counting in failed) those
// the kernel refuses: one peer's trouble must not stop the others'
// traffic. With try it never waits (udp.Conn.TryWriteBatch): done <
// len(msgs) then says the rest would have had to. The error is for a
// closed socket.
func (e *Endpoint) writeOut(msgs []udp.Message, try bool) (done int, failed uint64, err error) {
	for done < len(msgs) {
		var n int
		if try {
			n, err = e.sock.TryWriteBatch(msgs[done:])
		} else {
			n, err = e.sock.WriteBatch(msgs[done:])
		}
		done += n
		switch {
		case err == nil:
			if try && done < len(msgs) {
				return done, failed, nil
			}
		case errors.Is(err, net.ErrClosed):
			return done, failed, fmt.Errorf("endpoint: write: %w", err)
		case done < len(msgs):
			if failed == 0 {
				e.log.Debug("endpoint: datagram not sent", "peer", msgs[done].Addr, "err", err)
			}
			failed++
			done++
		}
	}
	return done, failed, nil
}

// isData reports whether pkt, as a connection built it, is a DATA packet:
// the type is the common header's fourth byte (docs/wire.md), which the
// connection wrote, so no parse is needed.
func isData(pkt []byte) bool {
	return len(pkt) >= wire.HeaderLen+wire.DataLen && wire.Type(pkt[3]) == wire.TypeData
}
