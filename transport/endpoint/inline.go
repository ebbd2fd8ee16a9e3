package endpoint

import (
	"fmt"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// The inline send path: a small message submitted while the loop's lock
// is free goes out from the submitter's goroutine, not the loop's.
// Handing it to the loop costs a wake-up and a goroutine switch on the
// round trip's critical path (and, when every processor is busy, the
// wait until the scheduler runs the loop), which is most of what the
// transport added to a small message's latency over raw UDP. The loop
// stays the owner of everything else: large messages (an engine sending
// them competes with the loop for its lock and the socket while it has
// other QPs to serve: VM-to-VM bandwidth measured a few percent lower),
// what the poster does not send, timers, received packets, completions.

// inlineMaxLen is the largest message sent inline: a page, three
// datagrams at the transport's default payload (1392 bytes), so that it
// leaves whole.
const inlineMaxLen = 4 << 10

// inlineMax bounds the datagrams a submitter transmits itself: a small
// message's and an acknowledgement the connection owed.
const inlineMax = 4

// submitInline posts m on connection id and sends it. Called with mu and
// xmu (no leftovers in xout); it releases both. A message the connection
// does not take at once (full, failed, malformed) is queued for the
// loop, which decides in order, as for any Submit.
func (e *Endpoint) submitInline(id uint32, m transport.Message) error {
	en, ok := e.conns[id]
	if !ok {
		e.xmu.Unlock()
		e.mu.Unlock()
		return fmt.Errorf("endpoint: connection %d: %w", id, ErrNoConn)
	}
	e.smu.Lock()
	queued := len(en.q) > 0 // posting m now would overtake them
	e.smu.Unlock()
	if !queued {
		if _, err := en.c.Post(m); err == nil {
			e.sendInline(en)
			return nil
		}
	}
	e.xmu.Unlock()
	e.mu.Unlock()
	return e.enqueue(id, sub{m: m})
}

// sendInline transmits up to inlineMax datagrams of en and writes them
// from the caller's goroutine without waiting (udp.Conn.TryWriteBatch).
// Called with mu and xmu, xout empty; it releases both, mu before the
// system call. The loop is then woken for what remains: more datagrams
// (the limit was reached), datagrams the socket would not take at once
// (left in xout for the loop's send), a connection that failed (its
// completions). Otherwise the loop sleeps on, its deadline brought
// forward if en's next timer (an RTO, a pacing time) is earlier.
func (e *Endpoint) sendInline(en *entry) {
	now := e.Now()
	more := false
	for len(e.xout) < inlineMax {
		pkt, path, ok := en.c.Transmit(now, e.xbuf[len(e.xout)])
		if !ok {
			if !en.failed && en.c.Failed() {
				// Its source could not be read: the flushed messages
				// are waiting to be reported.
				en.failed, e.kick, more = true, true, true
			}
			break
		}
		if isData(pkt) {
			e.st.PayloadSent += uint64(len(pkt) - wire.HeaderLen - wire.DataLen)
		}
		e.xout = append(e.xout, udp.Message{Buf: pkt, N: len(pkt), Addr: en.peer, Path: int(path) % en.paths})
	}
	if len(e.xout) == inlineMax {
		more = true
	}
	at, timed := en.c.Timeout()
	e.mu.Unlock()

	done, failed, err := e.writeOut(e.xout, true)
	if err != nil {
		// Closed: the loop stops on it too. Nothing is left to send.
		failed += uint64(len(e.xout) - done)
		done = len(e.xout)
	}
	e.xsent.Add(uint64(done) - failed)
	e.xerrs.Add(failed)
	if done < len(e.xout) {
		e.xleft = done
		more = true
	} else {
		e.xout = e.xout[:0]
	}
	e.xmu.Unlock()
	// Only now, the datagrams gone: moving the deadline may wake the
	// thread waiting in the poller, which had better find them. The loop
	// cannot have armed a later deadline meanwhile: if it ran, it saw
	// en's timer (armDeadline holds mu).
	e.smu.Lock()
	switch {
	case more:
		e.wake()
	case timed && !e.woken && at < e.armed:
		e.armed = at
		e.sock.SetReadDeadline(e.start.Add(time.Duration(max(at, now))))
	}
	e.smu.Unlock()
}

// flushInline sends what an inline send left (the socket would not take
// it at once). The loop's; it may wait for the socket.
func (e *Endpoint) flushInline() error {
	e.xmu.Lock()
	defer e.xmu.Unlock()
	if len(e.xout) == 0 {
		return nil
	}
	done, failed, err := e.writeOut(e.xout[e.xleft:], false)
	e.xsent.Add(uint64(done) - failed)
	e.xerrs.Add(failed)
	e.xout, e.xleft = e.xout[:0], 0
	return err
}
