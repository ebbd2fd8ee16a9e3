package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
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

// ringSize is the submissions the ring holds (see enqueue for what
// happens beyond): a few rounds' worth, small enough that the slots in
// use stay in cache.
const ringSize = 256

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

// sub is one queued submission: a message, new retry limits, or the
// start of the connection's stream.
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

	// Under mu: submissions taken from the ring (or the spill) and not
	// yet handed to c, in order.
	q       []sub
	pending bool // in Endpoint.pending

	// queued counts the submissions accepted and not yet handed to c or
	// flushed, wherever they are (the ring, the spill, q): while it is
	// not 0 a new message must queue behind them, not go inline. A
	// submitter counts itself before it looks at closed, so Remove, which
	// sets closed and then waits for queued to drain, flushes every
	// submission it let in and no other gets in (see Remove).
	queued atomic.Int64
	closed atomic.Bool
}

// queuedSub is a submission on its way to the loop.
type queuedSub struct {
	en *entry
	sub
}

// Endpoint is connections sharing one udp.Conn.
//
// Locks, in the order they nest: mu (the connections: Handle, Transmit,
// timers, Post, the per-connection queues), then smu (the spill,
// wake-ups) or dmu (the delivery of completions). Submit only tries mu
// and xmu (the inline send buffers, inline.go) and otherwise pushes to
// the ring, taking smu only to spill past a full ring or to wake a
// sleeping loop, briefly, so it never waits for the loop while the loop
// is inside a Sink; the loop delivers completions holding dmu but not
// mu, so a done callback may Submit. xmu is taken with a wait only by the
// loop, holding nothing else.
type Endpoint struct {
	sock  *udp.Conn
	log   *slog.Logger
	start time.Time
	poll  *Polling // nil: Run blocks in the socket read (poll.go)

	mu      sync.Mutex
	conns   map[uint32]*entry
	order   []*entry // iteration order, for fairness and determinism
	st      Stats
	gone    transport.Stats // the counters of removed connections, summed
	kick    bool            // a connection failed in Transmit: collect its completions at once
	pending []*entry        // entries with submissions in q

	// live is the connections Submit may queue for, replaced (under mu)
	// by Add and Remove, so a submitter finds its connection with one
	// load and no lock.
	live atomic.Pointer[map[uint32]*entry]
	// subs carries submissions to the loop, which takes them under mu.
	subs ring[queuedSub]
	// spilling: the ring was found full, and submissions go to spill
	// until the loop has taken every one pushed before them (enqueue).
	spilling atomic.Bool
	// asleep: the loop is blocking, or about to, in its socket read; a
	// submitter must wake it (armDeadline).
	asleep atomic.Bool

	smu       sync.Mutex
	spill     []queuedSub  // submissions past a full ring, in order
	spillMark uint64       // ring position every push before the spill's is below
	woken     atomic.Bool  // written under smu: the loop is to look at its work at once
	armed     atomic.Int64 // written under smu: the read deadline or next timer last set (Endpoint clock)

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
	qs    queuedSub // a submission being moved from the ring
	spun  spinState // polling mode's (poll.go)
}

// New creates an Endpoint on sock. Run drives it.
func New(sock *udp.Conn, log *slog.Logger) *Endpoint { return NewWith(sock, log, Options{}) }

// NewWith is New with options.
func NewWith(sock *udp.Conn, log *slog.Logger, o Options) *Endpoint {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Endpoint{sock: sock, log: log, start: time.Now(), conns: make(map[uint32]*entry)}
	if o.Poll != nil {
		p := *o.Poll
		e.poll = &p
	}
	e.live.Store(&map[uint32]*entry{})
	e.subs.init(ringSize)
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
	e.setLive(id, en)
	e.smu.Lock()
	e.wake()
	e.smu.Unlock()
	return nil
}

// setLive replaces live with a copy in which id is en, or is gone if en
// is nil. Called with mu. A copy per Add and Remove is what keeps the
// submitters' lookup free of locks; connections come and go far less
// often than messages.
func (e *Endpoint) setLive(id uint32, en *entry) {
	old := *e.live.Load()
	m := make(map[uint32]*entry, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if en != nil {
		m[id] = en
	} else {
		delete(m, id)
	}
	e.live.Store(&m)
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
	en.closed.Store(true)
	e.setLive(id, nil)
	en.c.Close()
	comps := en.c.Completions(nil)
	// Flush every submission let in, after what was posted: those the
	// loop took already (q) first, then those still in the ring or the
	// spill. A submitter counted in queued but not yet pushed finishes
	// without waiting for anything held here (it takes no lock but smu,
	// which collect does not keep), so the wait is short.
	for {
		e.collect()
		for _, s := range en.q {
			if !s.limits && !s.start {
				comps = append(comps, transport.Completion{Token: s.m.Token, Status: transport.StatusFlushed})
			}
		}
		en.queued.Add(-int64(len(en.q)))
		en.q = nil
		if en.queued.Load() == 0 {
			break
		}
		runtime.Gosched()
	}
	if len(e.pending) > 0 {
		// collect may have taken other connections' submissions off the
		// ring: the loop must see them.
		e.smu.Lock()
		e.wake()
		e.smu.Unlock()
	}
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

// enqueue hands s to the loop through the ring, and wakes the loop only
// if it sleeps. A full ring must not reorder a connection's submissions,
// nor make the submitter wait (it may be the loop itself, in a done
// callback): the submission goes to the spill, a queue under smu, and so
// does every one after it until the loop has taken the spill, which it
// does only once it has taken every push claimed before the spill's last
// (spillMark). So whatever a submitter pushed before it spilled reaches
// the loop first; a push claimed after that comes from a submitter that
// saw spilling clear before any of the spill's began, so nothing orders
// it after them.
func (e *Endpoint) enqueue(id uint32, s sub) error {
	en := (*e.live.Load())[id]
	if en == nil {
		return fmt.Errorf("endpoint: connection %d: %w", id, ErrNoConn)
	}
	en.queued.Add(1)
	if en.closed.Load() {
		en.queued.Add(-1)
		return fmt.Errorf("endpoint: connection %d: %w", id, ErrNoConn)
	}
	q := queuedSub{en: en, sub: s}
	if !e.spilling.Load() && e.subs.push(&q) {
		if e.asleep.Load() {
			e.smu.Lock()
			e.wake()
			e.smu.Unlock()
		}
		return nil
	}
	e.smu.Lock()
	e.spill = append(e.spill, q)
	e.spilling.Store(true)
	e.spillMark = e.subs.claimed()
	e.wake()
	e.smu.Unlock()
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

// wake interrupts a blocked read, and tells a polling loop to look
// (poll.go). Called with smu.
func (e *Endpoint) wake() {
	if !e.woken.Load() {
		e.woken.Store(true)
		e.sock.SetReadDeadline(time.Unix(1, 0))
	}
}

// Run drives the connections until ctx ends or the socket fails. With
// Polling set it runs them from an OS thread of its own (poll.go).
func (e *Endpoint) Run(ctx context.Context) error {
	if e.poll != nil {
		return e.runPolling(ctx)
	}
	return e.run(ctx)
}

func (e *Endpoint) run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { e.sock.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	n := 0
	for ctx.Err() == nil {
		// A wake-up from here on must interrupt the read below: clear
		// the flags before looking at the queues.
		e.smu.Lock()
		e.woken.Store(false)
		e.asleep.Store(false)
		e.smu.Unlock()
		e.process(n)
		if err := e.send(); err != nil {
			return err
		}
		if e.poll != nil {
			var err error
			if n, err = e.spin(ctx); err != nil {
				return err
			}
			if n >= 0 {
				continue
			}
			e.spun.sleep()
		}
		e.armDeadline(true)
		if ctx.Err() != nil {
			break
		}
		var err error
		n, err = e.sock.ReadBatch(e.in)
		if e.poll != nil {
			// Spin on only if woken for work: a timer alone (the idle
			// deadline, most often) is not worth a spin.
			e.spun.wake(e.Now(), n > 0 || e.woken.Load())
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("endpoint: read: %w", err)
		}
	}
	return ctx.Err()
}

// armDeadline sets armed to the next timer (at most maxIdle away), or to
// now if a wake-up came since the loop last looked, and with block makes
// it the read deadline and declares the loop asleep. Under mu, so an
// inline send's earlier timer (sendInline) is either seen here or
// brought forward after; and under smu, so a wake-up either sees the
// deadline set and overrides it, or left woken for this to see.
//
// The lost wake-up: a submitter pushes to the ring and then loads
// asleep; the loop stores asleep and then looks at the ring. The atomics
// are sequentially consistent, so one of the two sees the other's store:
// the submitter sees asleep and wakes the loop, or the loop sees the
// submission here and does not sleep. A submission still being pushed
// (its slot claimed, not published) is the first case: its submitter
// loads asleep after publishing. The spill is covered by smu, held here.
func (e *Endpoint) armDeadline(block bool) {
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
	if block {
		e.asleep.Store(true)
		if e.subs.ready() || e.spilling.Load() {
			e.woken.Store(true) // a wake-up from now on has nothing to do
		}
	}
	if e.woken.Load() {
		at = now
	}
	e.armed.Store(at)
	if block {
		e.sock.SetReadDeadline(e.start.Add(time.Duration(max(at, now))))
	}
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
	e.collect()
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
		if i > 0 {
			en.queued.Add(-int64(i))
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

// collect takes the submissions off the ring into their connections'
// queues, and the spill once every push claimed before it is taken
// (enqueue says why). Called with mu.
func (e *Endpoint) collect() {
	e.popRing()
	if !e.spilling.Load() {
		return
	}
	e.smu.Lock()
	defer e.smu.Unlock()
	e.popRing()
	if e.subs.head() < e.spillMark {
		return // a push before the spill is not published yet
	}
	for i := range e.spill {
		e.queue(&e.spill[i])
	}
	clear(e.spill)
	e.spill = e.spill[:0]
	e.spilling.Store(false)
}

// popRing moves what the ring holds into the connections' queues.
func (e *Endpoint) popRing() {
	for e.subs.pop(&e.qs) {
		e.queue(&e.qs)
	}
	e.qs = queuedSub{}
}

// queue appends q to its connection's queue. Called with mu.
func (e *Endpoint) queue(q *queuedSub) {
	en := q.en
	en.q = append(en.q, q.sub)
	if !en.pending {
		en.pending = true
		e.pending = append(e.pending, en)
	}
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
