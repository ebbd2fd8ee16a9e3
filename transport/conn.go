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
}

// Stats are a connection's counters.
type Stats struct {
	DataSent, Retransmits, AcksSent, AcksReceived uint64
	DataReceived, Duplicates                      uint64
	Timeouts, FastRetransmits, RNRNaks            uint64
	// Dropped counts packets refused: another tenant, connection or
	// token (Foreign), or contradicting the connection's state (Invalid).
	Foreign, Invalid uint64
	BytesPlaced      uint64
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
	c := &Conn{cfg: cfg, sink: sink}
	c.tx.init(&c.cfg)
	c.rx.init(&c.cfg)
	c.hdr = wire.Header{Tenant: cfg.Tenant, Conn: cfg.RemoteConn, Token: cfg.RemoteToken}
	return c, nil
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
	if p.Tenant != c.cfg.Tenant || p.Conn != c.cfg.LocalConn || p.Token != c.cfg.LocalToken {
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
		return c.rx.data(c, now, p)
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
	if c.failed {
		return nil, 0, false
	}
	return c.tx.transmit(c, now, buf)
}

// Timeout is the next time HandleTimeout must be called (ok false: none).
// It includes the pacing deadline: when the CC is a Pacer and a packet
// waits only for it, the time it may leave, after which the driver calls
// HandleTimeout and then Transmit.
func (c *Conn) Timeout() (at int64, ok bool) {
	if c.failed {
		return 0, false
	}
	return c.tx.timeout()
}

// HandleTimeout runs the timers due at now: retransmission timeout,
// reordering time, receiver-not-ready waits, the pacing deadline (which
// only lets Transmit send again).
func (c *Conn) HandleTimeout(now int64) {
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
