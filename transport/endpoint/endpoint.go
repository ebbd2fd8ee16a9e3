package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
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

// Stats count what the loop dropped.
type Stats struct {
	Malformed, UnknownConn, Refused uint64
	Received, Sent                  uint64
}

type entry struct {
	c     *transport.Conn
	peer  netip.AddrPort
	paths int
	done  func(transport.Completion) // may be nil
	comps []transport.Completion
}

// Endpoint is connections sharing one udp.Conn.
type Endpoint struct {
	sock  *udp.Conn
	log   *slog.Logger
	start time.Time

	mu    sync.Mutex
	conns map[uint32]*entry
	order []*entry // iteration order, for fairness and determinism
	st    Stats
	woken bool

	in   []udp.Message
	out  []udp.Message
	obuf [][]byte
	pkt  wire.Packet
}

// New creates an Endpoint on sock. Run drives it.
func New(sock *udp.Conn, log *slog.Logger) *Endpoint {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Endpoint{sock: sock, log: log, start: time.Now(), conns: make(map[uint32]*entry)}
	e.in = make([]udp.Message, batch)
	for i := range e.in {
		e.in[i].Buf = make([]byte, bufSize)
	}
	e.out = make([]udp.Message, 0, batch)
	e.obuf = make([][]byte, batch)
	for i := range e.obuf {
		e.obuf[i] = make([]byte, bufSize)
	}
	return e
}

// Now is the Endpoint's clock (ns), the time its connections see.
func (e *Endpoint) Now() int64 { return int64(time.Since(e.start)) }

// Add registers c, which the peer addresses as id (c's LocalConn), and
// sends to peer over paths source ports (1..the socket's). done, if not
// nil, is called from the loop for every completion.
func (e *Endpoint) Add(id uint32, c *transport.Conn, peer netip.AddrPort, paths int, done func(transport.Completion)) error {
	if paths < 1 || paths > e.sock.Paths() {
		return fmt.Errorf("endpoint: %d paths, the socket has %d", paths, e.sock.Paths())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.conns[id]; dup {
		return fmt.Errorf("endpoint: connection %d exists", id)
	}
	en := &entry{c: c, peer: peer, paths: paths, done: done}
	e.conns[id] = en
	e.order = append(e.order, en)
	e.wake()
	return nil
}

// Post posts m on connection id and wakes the loop.
func (e *Endpoint) Post(id uint32, m transport.Message) (uint32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	en, ok := e.conns[id]
	if !ok {
		return 0, fmt.Errorf("endpoint: no connection %d", id)
	}
	msn, err := en.c.Post(m)
	if err == nil {
		e.wake()
	}
	return msn, err
}

// Stats returns the loop's counters.
func (e *Endpoint) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st
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

// wake interrupts a blocked read. Called with mu.
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
	for ctx.Err() == nil {
		if err := e.send(); err != nil {
			return err
		}
		deadline := e.deadline()
		e.sock.SetReadDeadline(deadline)
		e.mu.Lock()
		e.woken = false
		e.mu.Unlock()
		if ctx.Err() != nil {
			break
		}
		n, err := e.sock.ReadBatch(e.in)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("endpoint: read: %w", err)
		}
		e.receive(n)
	}
	return ctx.Err()
}

// deadline is when the next timer is due (at most maxIdle away).
func (e *Endpoint) deadline() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.Now()
	at := now + int64(maxIdle)
	for _, en := range e.order {
		if t, ok := en.c.Timeout(); ok && t < at {
			at = t
		}
	}
	if e.woken {
		at = now
	}
	return e.start.Add(time.Duration(max(at, now)))
}

// receive hands n datagrams to their connections, runs due timers and
// reports completions.
func (e *Endpoint) receive(n int) {
	e.mu.Lock()
	now := e.Now()
	for i := range n {
		m := &e.in[i]
		e.st.Received++
		if err := wire.Parse(m.Buf[:m.N], &e.pkt); err != nil {
			e.st.Malformed++
			continue
		}
		en, ok := e.conns[e.pkt.Conn]
		if !ok {
			e.st.UnknownConn++
			continue
		}
		if err := en.c.Handle(now, &e.pkt); err != nil {
			e.st.Refused++
		}
	}
	for _, en := range e.order {
		if t, ok := en.c.Timeout(); ok && t <= now {
			en.c.HandleTimeout(now)
		}
		en.comps = en.c.Completions(en.comps[:0])
	}
	e.mu.Unlock()
	for _, en := range e.order {
		if en.done != nil {
			for _, c := range en.comps {
				en.done(c)
			}
		}
	}
}

// send transmits everything the connections have, in batches.
func (e *Endpoint) send() error {
	for {
		e.mu.Lock()
		now := e.Now()
		e.out = e.out[:0]
		for _, en := range e.order {
			for len(e.out) < batch {
				pkt, path, ok := en.c.Transmit(now, e.obuf[len(e.out)])
				if !ok {
					break
				}
				e.out = append(e.out, udp.Message{Buf: pkt, N: len(pkt), Addr: en.peer, Path: int(path) % en.paths})
			}
		}
		e.mu.Unlock()
		if len(e.out) == 0 {
			return nil
		}
		for sent := 0; sent < len(e.out); {
			n, err := e.sock.WriteBatch(e.out[sent:])
			if err != nil {
				return fmt.Errorf("endpoint: write: %w", err)
			}
			sent += n
		}
		e.mu.Lock()
		e.st.Sent += uint64(len(e.out))
		e.mu.Unlock()
		if len(e.out) < batch {
			return nil
		}
	}
}
