package transport

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/vstellar/vstellar/transport/wire"
)

// inMsg is one inbound message being received.
type inMsg struct {
	Inbound
	valid   bool     // the slot holds msn Inbound.MSN
	begun   bool     // Begin accepted it
	refused wire.NAK // Begin refused it for good
	placed  uint64   // bytes placed
	respPSN uint32   // READ_REQ, atomics: where the peer expects our stream to start
}

// receiver is the receiving half: the reordering window, placement,
// in-order commit and acknowledgements.
type receiver struct {
	cfg *Config

	nxt    uint32                 // next psn expected: all below received
	seen   [maxWindow / 64]uint64 // bit (psn - nxt) for psn in (nxt, nxt+maxWindow)
	base   uint32                 // psn of bit 0 of seen (== nxt)
	msgs   [maxMessages]inMsg     // msgs[msn%maxMessages], msn in [commit, commit+maxMessages)
	commit uint32                 // next msn to commit

	ackPending bool
	echoTS     int64
	ackPath    uint16
	rnrMSN     uint32 // a receiver-not-ready NAK to send (rnrPending)
	rnrTimer   uint8
	rnrPending bool
	rnrTS      int64 // the refused packet's ts, which the NAK echoes
	// A BUSY NAK to send (busyPending) about busyMSN, and when the last
	// was queued (busyNaked: one was), for the rate limit.
	busyMSN     uint32
	busyPending bool
	busyNaked   bool
	busyNakAt   int64
	// Duplicate reports to send (FlagDup), oldest first: DATA packets
	// received again. Each ACK carries one, and while any is left
	// another ACK follows, so each duplicate is reported once, as TCP
	// acknowledges each duplicate segment with its DSACK block.
	dups  [dupQueue]uint32
	ndups int
}

// dupQueue bounds the duplicate reports waiting for an ACK: beyond it,
// the latest duplicate replaces the newest report waiting. The sender
// resends at most a window's packets at a time, and an endpoint's ACKs
// go out after every batch of datagrams it reads, so a handful waits at
// most.
const dupQueue = 16

// busyNakInterval is the least time between two BUSY NAKs (but for the
// sender's probes, which are always answered): a burst of packets the
// sink's gate turns away is not answered by a burst of NAKs. Well below
// the sender's first backoff (busyBackoffMin).
const busyNakInterval = int64(10 * time.Microsecond)

func (r *receiver) init(cfg *Config) {
	r.cfg = cfg
	r.nxt, r.base = cfg.RecvPSN, cfg.RecvPSN // the peer's stream starts there
}

func (r *receiver) has(psn uint32) bool {
	if wire.SeqLess(psn, r.nxt) {
		return true
	}
	d := psn - r.nxt
	return d < maxWindow && r.seen[d/64]&(1<<(d%64)) != 0
}

// mark records psn as received and advances nxt over what is contiguous.
func (r *receiver) mark(psn uint32) {
	d := psn - r.nxt
	r.seen[d/64] |= 1 << (d % 64)
	for r.seen[0]&1 != 0 {
		r.shift()
	}
}

// shift moves the window up by one psn.
func (r *receiver) shift() {
	for i := range len(r.seen) - 1 {
		r.seen[i] = r.seen[i]>>1 | r.seen[i+1]<<63
	}
	r.seen[len(r.seen)-1] >>= 1
	r.nxt++
}

// screen handles a DATA packet that needs nothing but the receiving
// state: a duplicate, acknowledged and reported, or one beyond the
// message or packet window, refused. done is false for a packet still to
// receive.
func (r *receiver) screen(c *Conn, p *wire.Packet) (done bool, err error) {
	d := &p.Data
	switch {
	case wire.SeqLess(d.MSN, r.commit) || r.has(p.PSN) && d.MSN-r.commit < maxMessages:
		// A late duplicate of a message already committed, or a packet
		// we have.
		c.st.Duplicates++
		r.duplicate(p.PSN)
		r.ackNow(p)
		return true, nil
	case d.MSN-r.commit >= maxMessages:
		c.st.Invalid++
		return true, fmt.Errorf("msn %d beyond the window at %d: %w", d.MSN, r.commit, ErrInvalid)
	case p.PSN-r.nxt >= maxWindow:
		c.st.Invalid++
		return true, fmt.Errorf("psn %d beyond the window at %d: %w", p.PSN, r.nxt, ErrInvalid)
	}
	return false, nil
}

func (r *receiver) data(c *Conn, now int64, p *wire.Packet) error {
	if done, err := r.screen(c, p); done {
		return err
	}
	d := &p.Data
	if c.cfg.Recovery == GoBackN && p.PSN != r.nxt {
		// Hardware RNICs drop what is out of order and say where they
		// are: the duplicate acknowledgement makes the sender go back.
		c.st.Duplicates++
		r.ackNow(p)
		return nil
	}
	if d.Op == wire.OpReadResp || d.Op == wire.OpAtomicResp {
		// A response to one of our requests: it must answer a request
		// still waiting, with the shape the request asked for.
		if c.tx.awaiting(uint32(d.RAddr), d.Op, d.MsgLen) == nil {
			c.st.Invalid++
			return fmt.Errorf("%v for msn %d answers no outstanding request: %w", d.Op, d.RAddr, ErrInvalid)
		}
	}
	m := &r.msgs[d.MSN%maxMessages]
	if !m.valid {
		*m = inMsg{valid: true, Inbound: Inbound{MSN: d.MSN, SSN: d.SSN, Op: d.Op, Len: d.MsgLen, RAddr: d.RAddr,
			RKey: d.RKey, Imm: d.Imm, Solicited: p.Flags&wire.FlagSolicited != 0}, respPSN: d.RespPSN}
	} else if m.MSN != d.MSN || m.Op != d.Op || m.Len != d.MsgLen || m.RAddr != d.RAddr || m.RKey != d.RKey || m.Imm != d.Imm || m.SSN != d.SSN || m.respPSN != d.RespPSN {
		c.st.Invalid++
		return fmt.Errorf("msn %d: packet %d disagrees with the message: %w", d.MSN, p.PSN, ErrInvalid)
	}
	if p.Flags&wire.FlagSolicited != 0 {
		m.Solicited = true
	}
	if !m.begun && (d.Op == wire.OpReadResp || d.Op == wire.OpAtomicResp) {
		m.begun = true // ours: the request was checked when we sent it
	}
	// An atomic is one packet whose payload is its operands: the sink
	// sees them in Begin, as it sees every other field of a request.
	switch d.Op {
	case wire.OpCmpSwap:
		m.Compare, m.SwapAdd = binary.BigEndian.Uint64(p.Payload), binary.BigEndian.Uint64(p.Payload[8:])
	case wire.OpFetchAdd:
		m.SwapAdd = binary.BigEndian.Uint64(p.Payload)
	}
	if m.refused == wire.NAKNone && !m.begun {
		nak, timer := c.sink.Begin(&m.Inbound)
		switch nak {
		case wire.NAKNone:
			m.begun = true
		case wire.NAKRNR:
			// Keep nothing: the packet is not received, and the sender
			// comes back after the timer.
			*m = inMsg{}
			if !r.rnrPending || p.TS > r.rnrTS {
				r.rnrTS = p.TS // the newest refused: older ones' waits answered them
			}
			r.rnrMSN, r.rnrTimer, r.rnrPending = d.MSN, timer, true
			r.ackNow(p)
			return nil
		case wire.NAKBusy:
			// Busy for a moment: as if the gate had turned it away.
			*m = inMsg{}
			c.st.Busy++
			r.nakBusy(now, p)
			return nil
		default:
			m.refused = nak
		}
	}
	if m.begun {
		r.place(c, m, p)
		if c.failed {
			return fmt.Errorf("msn %d: our memory for it is gone: %w", d.MSN, ErrClosed)
		}
	}
	c.st.DataReceived++
	r.mark(p.PSN)
	r.commitReady(c, now)
	r.ackNow(p)
	return nil
}

// turnedAway answers DATA packet p, which the sink's gate turned away
// (its device is in a control change): p is not received, and nothing
// of the receiving state changes. A duplicate or a packet outside the
// windows is handled as rx.data handles it (screen: that needs no
// sink); any other is counted (Busy) and answered with a BUSY NAK, so
// that the sender resends it soon without taking it for a loss
// (docs/transport.md, "Busy peer").
func (r *receiver) turnedAway(c *Conn, now int64, p *wire.Packet) error {
	if done, err := r.screen(c, p); done {
		return err
	}
	c.st.Busy++
	r.nakBusy(now, p)
	return nil
}

// nakBusy queues a BUSY NAK about the message of p, a packet not
// received because the sink is busy: at most one per busyNakInterval,
// except for the next packet expected, which is what a busy sender's
// probe carries (so a probe is always answered, and the sender never
// waits for its RTO while the peer is merely busy).
func (r *receiver) nakBusy(now int64, p *wire.Packet) {
	if r.busyNaked && now-r.busyNakAt < busyNakInterval && p.PSN != r.nxt {
		return
	}
	r.busyNaked, r.busyNakAt = true, now
	r.busyMSN, r.busyPending = p.Data.MSN, true
	r.ackNow(p)
}

// nakHeld queues a BUSY NAK about the peer's request msn, committed,
// whose response is held back while the sink is busy. It echoes no
// timestamp: no packet of the peer's triggered it.
func (r *receiver) nakHeld(msn uint32) {
	r.busyMSN, r.busyPending = msn, true
	r.ackPending, r.echoTS = true, 0
}

// place puts a packet's payload where its message goes: the sink for
// requests, the operands for atomics, our READ's destination for a
// response.
func (r *receiver) place(c *Conn, m *inMsg, p *wire.Packet) {
	d := &p.Data
	switch d.Op {
	case wire.OpReadReq:
		m.placed = uint64(m.Len) // no payload: the request is whole
		return
	case wire.OpCmpSwap, wire.OpFetchAdd:
		// Operands, read before Begin.
	case wire.OpAtomicResp:
		m.Result = binary.BigEndian.Uint64(p.Payload)
	case wire.OpReadResp:
		if req := c.tx.msg(uint32(d.RAddr)); len(p.Payload) > 0 && !req.Dst.WriteAt(p.Payload, uint64(d.Offset)) {
			c.fail(StatusLocal)
			return
		}
	default:
		if len(p.Payload) > 0 && !c.sink.Place(&m.Inbound, uint64(d.Offset), p.Payload) {
			m.begun, m.refused = false, wire.NAKRemoteOp
			return
		}
	}
	m.placed += uint64(len(p.Payload))
	c.st.BytesPlaced += uint64(len(p.Payload))
}

// commitReady commits, in message order, every message fully placed.
// A refused message stops the line: it is NAKed in every
// acknowledgement until the sender, failing, stops.
func (r *receiver) commitReady(c *Conn, now int64) {
	for {
		m := &r.msgs[r.commit%maxMessages]
		if !m.valid || m.MSN != r.commit || !m.begun || m.placed < uint64(m.Len) {
			return
		}
		if m.Op == wire.OpReadResp || m.Op == wire.OpAtomicResp {
			c.tx.responseArrived(c, now, uint32(m.RAddr), m.Result)
		} else if nak := c.sink.Commit(&m.Inbound); nak != wire.NAKNone { // performs an atomic: exactly once
			if nak == wire.NAKRNR || nak == wire.NAKBusy {
				nak = wire.NAKRemoteOp // not a retryable answer once accepted
			}
			// Refused after all: the line stops here, as after Begin.
			m.begun, m.refused = false, nak
			return
		}
		if m.Op.AwaitsResponse() {
			c.startForResponse(m.respPSN)
		}
		switch m.Op {
		case wire.OpReadReq:
			if m.Response != nil && m.Len > 0 {
				c.respondFromSink()
			}
			c.tx.respond(wire.OpReadResp, m.MSN, m.Len, m.Response)
		case wire.OpCmpSwap, wire.OpFetchAdd:
			c.tx.respond(wire.OpAtomicResp, m.MSN, 8, resultSource(m.Result))
		}
		*m = inMsg{}
		r.commit++
	}
}

// duplicate queues a report of psn, a DATA packet received again, for
// the next ACK: only if we have it (one of a committed message with a
// psn we never had is not ours to report), with selective repeat (a
// go-back-N sender resends whole windows and has no use for them), and
// not with NoDupReports.
func (r *receiver) duplicate(psn uint32) {
	if r.cfg.NoDupReports || r.cfg.Recovery != Selective || !r.has(psn) {
		return
	}
	if r.ndups == len(r.dups) {
		r.ndups--
	}
	r.dups[r.ndups] = psn
	r.ndups++
}

// ackNow asks for an acknowledgement of p (coalesced: one per Transmit).
func (r *receiver) ackNow(p *wire.Packet) {
	r.ackPending, r.echoTS, r.ackPath = true, p.TS, p.Path
}

// appendAck writes the pending acknowledgement.
func (r *receiver) appendAck(c *Conn, dst []byte) ([]byte, uint16) {
	a := wire.Ack{Cum: r.nxt, EchoTS: r.echoTS, MSN: r.commit}
	// seen bit 0 is nxt itself (never set); SACK bit i is nxt+1+i.
	for i := range uint32(wire.SACKBits - 1) {
		d := i + 1
		if r.seen[d/64]&(1<<(d%64)) != 0 {
			a.SACK[i/64] |= 1 << (i % 64)
		}
	}
	if m := &r.msgs[r.commit%maxMessages]; m.valid && m.MSN == r.commit && m.refused != wire.NAKNone {
		a.NAK, a.NAKMSN = m.refused, r.commit
	} else if r.rnrPending {
		// Echo the refused packet's ts, not the last one's of the batch:
		// the sender tells by it which transmission the NAK is about
		// (docs/wire.md, section 9).
		a.NAK, a.NAKMSN, a.RNRTimer, a.EchoTS = wire.NAKRNR, r.rnrMSN, r.rnrTimer, r.rnrTS
	} else if r.busyPending {
		a.NAK, a.NAKMSN = wire.NAKBusy, r.busyMSN
		c.st.BusyNaksSent++
	}
	r.rnrPending, r.busyPending, r.ackPending = false, false, false
	h := c.hdr
	h.Path, h.PSN, h.TS, h.Flags = r.ackPath, 0, 0, 0
	h.Token = r.cfg.LocalToken // the token of the stream it acknowledges
	if r.ndups > 0 {
		// Still covered: what we have, we keep (cum and seen only grow).
		h.Flags |= wire.FlagDup
		a.DupPSN = r.dups[0]
		r.ndups = copy(r.dups[:], r.dups[1:r.ndups])
		if r.ndups > 0 {
			// Another ACK for the next report, echoing nothing: this one
			// carries the RTT sample.
			r.ackPending, r.echoTS = true, 0
		}
	}
	return wire.AppendAck(dst, &h, &a), r.ackPath
}

// resultSource is an atomic's 8-byte response, big-endian.
type resultSource uint64

func (v resultSource) ReadAt(p []byte, off uint64) bool {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	copy(p, b[off:])
	return true
}
