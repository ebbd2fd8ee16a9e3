package transport

import (
	"fmt"
	"time"

	"github.com/vstellar/vstellar/transport/wire"
)

// Conn is one reliable connection: both directions of a QP pair.
type Conn struct {
	cfg  Config
	sink Sink

	tx sender
	rx receiver

	failed bool
	comps  []Completion
	st     Stats
	hdr    wire.Header // scratch for Transmit

	// sending: our stream has its PSN and token (not SendLater, or
	// StartSend was called, or early). early: a response to the peer
	// started it (Config.StreamToken), and StartSend has not come yet.
	sending bool
	early   bool
	// gate is the sink's, if it has one. lastResp is the msn of the
	// newest READ response that reads from the sink, while responding
	// (until every message up to it completed); busyAt is when to try
	// the gate again for it (0: not waiting).
	gate       Gate
	lastResp   uint32
	responding bool
	busyAt     int64
	// heldNakAt: when the peer was last told (a BUSY NAK) that a
	// response is held back (heldNaked: it was).
	heldNakAt int64
	heldNaked bool
}

// Stats are a connection's counters.
type Stats struct {
	DataSent, Retransmits, AcksSent, AcksReceived uint64
	DataReceived, Duplicates                      uint64
	Timeouts, FastRetransmits, RNRNaks            uint64
	// SpuriousRetransmits counts retransmissions the sender found were
	// not needed: the original was acknowledged after all (its echoed
	// timestamp, or an ACK too soon after the retransmission), or the
	// receiver reported a copy it got twice (wire.FlagDup), each
	// retransmission at most once. A lower bound: the receiver's
	// Duplicates counts every copy it got twice.
	SpuriousRetransmits uint64
	// CCUndos counts loss episodes (the losses of one congestion cut)
	// whose every loss proved spurious, and whose cut the congestion
	// controller (an Undoer) took back.
	CCUndos uint64
	// Dropped counts packets refused: another tenant, connection or
	// token (Foreign), or contradicting the connection's state (Invalid).
	Foreign, Invalid uint64
	BytesPlaced      uint64
	// Busy counts DATA packets dropped unreceived because the sink's
	// gate was taken, or its Begin answered NAKBusy (its device in a
	// control change): the peer resends them.
	Busy uint64
	// BusyNaksSent counts the BUSY NAKs that told the peer so (at most
	// one per busyNakInterval, but one for each of its probes), or that
	// a READ response waits for the sink (one a millisecond);
	// BusyNaksReceived those the peer sent us.
	BusyNaksSent, BusyNaksReceived uint64
}

// NewConn creates a connection delivering inbound messages to sink.
func NewConn(cfg Config, sink Sink) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("transport: no sink: %w", ErrConfig)
	}
	c := &Conn{cfg: cfg, sink: sink, sending: !cfg.SendLater}
	c.gate, _ = sink.(Gate)
	c.tx.init(&c.cfg)
	c.rx.init(&c.cfg)
	c.hdr = wire.Header{Tenant: cfg.Tenant, Conn: cfg.RemoteConn}
	if c.sending {
		c.startSend(cfg.SendPSN, cfg.RemoteToken)
	}
	return c, nil
}

// StartSend gives a SendLater connection's stream its first PSN and its
// token (an RC QP's sq_psn, at RTS): from then on it posts and sends.
// If a response to the peer started the stream already (early), with
// this psn and token, it only lets Post in. It fails on a connection
// whose stream has started otherwise; an early stream then keeps its
// start.
func (c *Conn) StartSend(psn uint32, token uint64) error {
	switch {
	case c.early && psn == c.cfg.SendPSN && token == c.cfg.RemoteToken:
		c.early = false
		return nil
	case c.early:
		c.early = false
		return fmt.Errorf("transport: send stream started at psn %#x by a response, not %#x: %w", c.cfg.SendPSN, psn, ErrConfig)
	case c.sending:
		return fmt.Errorf("transport: send stream started already: %w", ErrConfig)
	}
	c.startSend(psn, token)
	return nil
}

// startForResponse starts our stream, if it has not started and
// Config.StreamToken allows, for a response to the peer's request,
// at respPSN: the request's resp_psn, where the peer expects it.
func (c *Conn) startForResponse(respPSN uint32) {
	if c.sending || c.cfg.StreamToken == nil {
		return
	}
	c.startSend(respPSN, c.cfg.StreamToken(respPSN))
	c.early = true
}

// startSend starts our stream at psn. Nothing of it has been sent (a
// response may be queued), so the window is empty.
func (c *Conn) startSend(psn uint32, token uint64) {
	c.sending = true
	c.cfg.SendPSN, c.cfg.RemoteToken = psn, token
	c.hdr.Token = token
	c.tx.una, c.tx.nxt = psn, psn
}

// Stats returns the counters.
func (c *Conn) Stats() Stats { return c.st }

// Failed reports whether the connection has failed (every message
// completed with an error from then on).
func (c *Conn) Failed() bool { return c.failed }

// Post queues a message and returns its message sequence number (the
// MSN its Completion carries; responses to the peer's READs and atomics
// take numbers too, so a connection's own messages are increasing, not
// consecutive). It fails if the connection failed, the message is
// malformed, or maxMessages are outstanding.
func (c *Conn) Post(m Message) (uint32, error) {
	if c.failed {
		return 0, ErrClosed
	}
	if !c.sending || c.early {
		return 0, ErrNotStarted
	}
	if err := m.validate(); err != nil {
		return 0, err
	}
	return c.tx.post(m)
}

// Completions appends the completions since the last call to dst.
func (c *Conn) Completions(dst []Completion) []Completion {
	dst = append(dst, c.comps...)
	c.comps = c.comps[:0]
	return dst
}

// Handle processes one received packet at time now (ns). A packet that
// is not this connection's, or that contradicts its state, is dropped
// and counted, and the error says why.
func (c *Conn) Handle(now int64, p *wire.Packet) error {
	// A DATA packet carries the token of the peer's stream, an ACK that
	// of ours, which it acknowledges: before our stream started, no ACK
	// can be for us.
	token, ok := c.cfg.LocalToken, true
	if p.Type == wire.TypeAck {
		token, ok = c.cfg.RemoteToken, c.sending
	}
	if p.Tenant != c.cfg.Tenant || p.Conn != c.cfg.LocalConn || p.Token != token || !ok {
		c.st.Foreign++
		return fmt.Errorf("tenant %d conn %d: %w", p.Tenant, p.Conn, ErrForeign)
	}
	if c.failed {
		// A failed (or closed) connection is a QP in ERR: what arrives
		// is dropped, and the sink is not called again.
		return fmt.Errorf("packet %d: %w", p.PSN, ErrClosed)
	}
	switch p.Type {
	case wire.TypeData:
		if c.gate == nil {
			return c.rx.data(c, now, p)
		}
		if !c.gate.TryEnter() {
			// Not received: the peer is told to resend it soon.
			return c.rx.turnedAway(c, now, p)
		}
		err := c.rx.data(c, now, p)
		c.gate.Exit()
		return err
	case wire.TypeAck:
		return c.tx.ack(c, now, p)
	}
	c.st.Invalid++
	return fmt.Errorf("packet type %v: %w", p.Type, ErrInvalid)
}

// Transmit writes the next packet to send into buf (which must hold
// wire.HeaderLen + wire.AckLen, or a full data packet) and returns it and
// its path; ok is false when there is nothing to send now. Acknowledgements
// go first, then retransmissions, then new data as the window allows.
func (c *Conn) Transmit(now int64, buf []byte) (pkt []byte, path uint16, ok bool) {
	if c.rx.ackPending {
		pkt, path = c.rx.appendAck(c, buf[:0])
		c.st.AcksSent++
		return pkt, path, true
	}
	if c.failed || !c.sending {
		return nil, 0, false
	}
	if c.gate == nil || !c.readsSink() {
		return c.tx.transmit(c, now, buf)
	}
	if !c.gate.TryEnter() {
		// A response would read from the sink: it waits, and so does
		// what comes after it. The peer, waiting for it, hears why
		// (busy.go).
		if c.busyAt <= now {
			c.busyAt = now + busyRetry
		}
		if !c.heldNaked || now-c.heldNakAt >= busyHoldNak {
			c.heldNaked, c.heldNakAt = true, now
			c.rx.nakHeld(c.heldRequest())
			pkt, path = c.rx.appendAck(c, buf[:0])
			c.st.AcksSent++
			return pkt, path, true
		}
		return nil, 0, false
	}
	c.busyAt = 0
	pkt, path, ok = c.tx.transmit(c, now, buf)
	c.gate.Exit()
	return pkt, path, ok
}

// busyRetry is how soon a connection whose response waits for the
// sink's gate asks to try again.
const busyRetry = int64(50 * time.Microsecond)

// readsSink reports whether a packet Transmit sends may read a READ
// response from the sink: one is queued or not yet committed by the
// peer. Messages complete in msn order, so once msnUna has passed the
// newest such response, none is left.
func (c *Conn) readsSink() bool {
	if c.responding && wire.SeqLess(c.lastResp, c.tx.msnUna) {
		c.responding = false
	}
	return c.responding
}

// heldRequest is the peer's request whose response (lastResp) is held
// back while the sink is busy.
func (c *Conn) heldRequest() uint32 {
	s := &c.tx
	if inRange(c.lastResp, s.msnUna, s.msnNxt) {
		return uint32(s.msg(c.lastResp).RAddr) // a response's raddr is its request's msn
	}
	if i := c.lastResp - s.msnNxt; i < uint32(len(s.pending)) {
		return s.pending[i].reqMSN
	}
	return c.rx.commit - 1 // not reached while responding: committed, so stale at the peer
}

// respondFromSink notes that the READ response about to be queued reads
// from the sink. Responses take msns in order as room allows, after
// those still queued, so its msn is known now.
func (c *Conn) respondFromSink() {
	c.lastResp, c.responding = c.tx.msnNxt+uint32(len(c.tx.pending)), true
}

// Timeout is the next time HandleTimeout must be called (ok false: none).
// It includes the pacing deadline: when the CC is a Pacer and a packet
// waits only for it, the time it may leave, after which the driver calls
// HandleTimeout and then Transmit; likewise, while a response waits for
// the sink's Gate, when to try again.
func (c *Conn) Timeout() (at int64, ok bool) {
	if c.failed {
		return 0, false
	}
	at, ok = c.tx.timeout()
	if c.busyAt != 0 && (!ok || c.busyAt < at) {
		at, ok = c.busyAt, true
	}
	return at, ok
}

// HandleTimeout runs the timers due at now: retransmission timeout,
// reordering time, receiver-not-ready waits, the probe of a busy peer,
// the pacing deadline and the wait for the sink's gate (which only let
// Transmit send again).
func (c *Conn) HandleTimeout(now int64) {
	if c.busyAt != 0 && now >= c.busyAt {
		c.busyAt = 0 // Transmit tries the gate again
	}
	if !c.failed {
		c.tx.handleTimeout(c, now)
	}
}

// SetLimits changes the retry limit and the receiver-not-ready retries
// (IB retry_cnt and rnr_retry, which a QP learns only at RTS, after its
// connection was made at RTR). Messages already posted keep their RNR
// budget.
func (c *Conn) SetLimits(retryLimit, rnrRetry int) error {
	cfg := c.cfg
	cfg.RetryLimit, cfg.RNRRetry = retryLimit, rnrRetry
	if _, err := cfg.withDefaults(); err != nil || retryLimit == 0 || rnrRetry == 0 {
		return fmt.Errorf("transport: retry limit %d / rnr retry %d outside 1..7: %w", retryLimit, rnrRetry, ErrConfig)
	}
	c.cfg.RetryLimit, c.cfg.RNRRetry = retryLimit, rnrRetry
	return nil
}

// Close fails the connection on purpose (its QP was reset or destroyed):
// every outstanding message completes StatusFlushed at once, and nothing
// more is sent or delivered to the sink.
func (c *Conn) Close() { c.fail(StatusFlushed) }

// complete records a message's completion (with an atomic's result).
func (c *Conn) complete(m *outMsg, st Status) {
	c.comps = append(c.comps, Completion{Token: m.Token, MSN: m.msn, Status: st, Value: m.value})
}

// fail ends the connection: the oldest incomplete message completes with
// st, every other with StatusFlushed.
func (c *Conn) fail(st Status) {
	if c.failed {
		return
	}
	c.failed = true
	c.tx.flush(c, st)
}

func dur(d time.Duration) int64 { return int64(d) }
