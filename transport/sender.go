package transport

import (
	"encoding/binary"
	"fmt"

	"github.com/vstellar/vstellar/transport/wire"
	"github.com/vstellar/vstellar/virtio/abi"
)

// maxMessages bounds the messages outstanding on a connection (posted,
// not completed), a power of two.
const maxMessages = 1024

// pktHistory is how many of the latest packets the sender remembers,
// four windows: a duplicate report (undo.go) comes a round trip after
// the retransmission it is about, which may have left a round trip
// after the original, behind a full window's queue each time, and by
// then the window has moved on by as much. A power of two.
const pktHistory = 4 * maxWindow

// Packet states at the sender.
const (
	pktInFlight uint8 = iota + 1 // sent, waiting for its acknowledgement
	pktAcked                     // cumulatively or selectively acknowledged
	pktLost                      // declared lost, queued for retransmission
	pktRNRWait                   // its message was refused as not ready: wait
	pktBusyWait                  // the peer is busy: wait for a probe to get through
)

// txPkt is one packet of the send window.
type txPkt struct {
	sentAt  int64
	firstTS int64 // the timestamp its first transmission carried
	ackedAt int64 // when it was first acknowledged
	msn     uint32
	off     uint32
	ahead   uint32 // later packets acknowledged before it (then)
	ep      uint32 // the loss episode that declared it lost (undo.go)
	n       uint16
	path    uint16
	first   bool
	last    bool
	state   uint8
	tx      uint8 // transmissions so far
	lostBy  uint8 // the rule that last declared it lost (lostByCount, ...)
	spur    uint8 // its retransmissions counted spurious
	dups    uint8 // duplicate reports of it (the receiver got a copy again)
	// arrived: its first transmission is known to have been delivered.
	arrived bool
	// epPending: declared lost in episode ep, not (yet) proved spurious.
	epPending bool
}

// outMsg is one posted message.
type outMsg struct {
	Message
	msn, ssn uint32
	sent     uint32 // bytes packetized so far
	allSent  bool
	rnrs     int   // RNR retries left (7: for ever)
	rnrUntil int64 // while > 0, its packets wait for this time
	status   Status
	refused  bool // a NAK ended it; it completes with status
	// internal: a READ or atomic response we send; it completes silently.
	internal bool
	// respDone: the response to this READ or atomic has arrived (value:
	// an atomic's result).
	respDone bool
	value    uint64
}

// response is a READ or atomic response waiting for room in the
// message window.
type response struct {
	op     wire.Op
	reqMSN uint32
	len    uint32
	src    Source
}

// sender is the sending half: messages, their packets and sequencing;
// what becomes of the packets is recovery's.
type sender struct {
	cfg *Config

	// Messages: msgs[msn%maxMessages] for msn in [msnUna, msnNxt).
	msgs           [maxMessages]outMsg
	msnUna, msnNxt uint32
	ssnNxt         uint32
	cur            uint32     // msn of the message being packetized
	pending        []response // responses waiting for room
	// peerCommitted: the receiver committed every msn below it.
	peerCommitted uint32

	sendWindow
	lastTS int64 // the last timestamp sent: each packet's is unique

	// Timers (ns; 0: not armed) of messages; recovery has those of
	// packets.
	rnrAt  int64 // the end of the earliest RNR wait
	respAt int64 // when to give up waiting for a response
	recovery

	pace   pacing
	ackRun ackRun
}

// ackRun gathers, within one acknowledgement, consecutive newly
// acknowledged packets sent on one path, so the CC hears of them per
// path without a per-path table.
type ackRun struct {
	path     uint16
	n        int
	rttPath  uint16 // the path the RTT sample was taken on
	rtt      int64  // the sample, until a run of rttPath carries it
	progress bool   // any packet newly acknowledged
}

func (s *sender) init(cfg *Config) {
	s.cfg = cfg
	s.recovery.init(cfg)
	s.pace.pacer, _ = cfg.CC.(Pacer)
}

func (s *sender) msg(msn uint32) *outMsg { return &s.msgs[msn%maxMessages] }

func (s *sender) post(m Message) (uint32, error) {
	if s.msnNxt-s.msnUna >= maxMessages {
		return 0, fmt.Errorf("%d messages outstanding: %w", maxMessages, ErrFull)
	}
	o := s.msg(s.msnNxt)
	*o = outMsg{Message: m, msn: s.msnNxt, ssn: s.ssnNxt, rnrs: s.cfg.RNRRetry}
	switch m.Op {
	case wire.OpCmpSwap:
		o.Len = 16
	case wire.OpFetchAdd:
		o.Len = 8
	}
	if m.Op.ConsumesRecv() {
		s.ssnNxt++
	}
	s.msnNxt++
	return o.msn, nil
}

// respond queues the response to the peer's request reqMSN.
func (s *sender) respond(op wire.Op, reqMSN, n uint32, src Source) {
	if src == nil {
		src = zeroSource{} // a Sink that gave nothing answers zeros
	}
	s.pending = append(s.pending, response{op: op, reqMSN: reqMSN, len: n, src: src})
	s.postPending()
}

// postPending moves queued responses into the message window.
func (s *sender) postPending() {
	for len(s.pending) > 0 && s.msnNxt-s.msnUna < maxMessages {
		r := s.pending[0]
		s.pending = s.pending[1:]
		o := s.msg(s.msnNxt)
		*o = outMsg{Message: Message{Op: r.op, Len: r.len, Src: r.src, RAddr: uint64(r.reqMSN)}, msn: s.msnNxt, internal: true}
		s.msnNxt++
	}
	if len(s.pending) == 0 {
		s.pending = s.pending[:0:cap(s.pending)]
	}
}

// responseArrived records the peer's response to our request reqMSN
// (validated by the receiver).
func (s *sender) responseArrived(c *Conn, now int64, reqMSN uint32, value uint64) {
	m := s.msg(reqMSN)
	m.respDone, m.value = true, value
	s.peerFree(&s.sendWindow, s.lastTS)
	s.completeCommitted(c, now, s.peerCommitted)
}

// awaiting returns our outstanding request reqMSN if it is a READ or
// atomic still waiting for a response of op with n bytes.
func (s *sender) awaiting(reqMSN uint32, op wire.Op, n uint32) *outMsg {
	if !inRange(reqMSN, s.msnUna, s.msnNxt) {
		return nil
	}
	m := s.msg(reqMSN)
	switch {
	case m.internal || m.respDone || !m.Op.AwaitsResponse():
		return nil
	case op == wire.OpReadResp && (m.Op != wire.OpReadReq || n != m.Len):
		return nil
	case op == wire.OpAtomicResp && (!m.Op.IsAtomic() || n != 8):
		return nil
	}
	return m
}

// window is how many packets may be in flight now.
func (s *sender) window() int {
	return min(s.cfg.Window, max(s.cfg.CC.Window(), 1))
}

func (s *sender) transmit(c *Conn, now int64, buf []byte) ([]byte, uint16, bool) {
	s.pace.at = 0
	if s.inFlight >= s.window() {
		return nil, 0, false
	}
	if s.lost == 0 && !s.haveNew() {
		return nil, 0, false
	}
	if s.pace.hold(now) {
		// Something waits for the pacer only: Timeout wakes the driver
		// then.
		return nil, 0, false
	}
	pkt, path, ok := s.transmitData(c, now, buf)
	if ok {
		s.pace.sent(now, s.srtt, len(pkt))
	}
	return pkt, path, ok
}

// haveNew reports whether a new packet may be sent (window room and a
// message not fully sent), moving cur to that message.
func (s *sender) haveNew() bool {
	if s.busy || s.nxt-s.una >= uint32(s.cfg.Window) {
		return false
	}
	for s.cur != s.msnNxt && s.msg(s.cur).allSent {
		s.cur++
	}
	return s.cur != s.msnNxt
}

// transmitData sends a retransmission or, if none waits, a new packet;
// the window and the pacer allow one.
func (s *sender) transmitData(c *Conn, now int64, buf []byte) ([]byte, uint16, bool) {
	// Retransmissions first, oldest first: the lost packets of the
	// window (at most maxWindow to look at).
	if s.lost > 0 {
		for psn := s.una; psn != s.nxt; psn++ {
			if s.pkt(psn).state == pktLost {
				c.st.Retransmits++
				return s.send(c, now, psn, buf, true)
			}
		}
	}
	// New data: the next packet of the first message not fully sent.
	if !s.haveNew() {
		return nil, 0, false
	}
	m := s.msg(s.cur)
	n := min(m.Len-m.sent, uint32(s.cfg.MaxPayload))
	if m.Op == wire.OpReadReq {
		n = m.Len // one packet without payload: n is the read length
	}
	psn := s.nxt
	*s.pkt(psn) = txPkt{msn: m.msn, off: m.sent, n: uint16(min(n, 0xffff)), first: m.sent == 0, last: m.sent+n == m.Len}
	if m.Op == wire.OpReadReq {
		s.pkt(psn).n = 0
	}
	m.sent += n
	m.allSent = m.sent == m.Len
	s.nxt++
	c.st.DataSent++
	return s.send(c, now, psn, buf, false)
}

// send (re)transmits packet psn. A source that can no longer be read
// (its memory went away) fails the connection instead: nothing is sent.
func (s *sender) send(c *Conn, now int64, psn uint32, buf []byte, retx bool) ([]byte, uint16, bool) {
	p := s.pkt(psn)
	m := s.msg(p.msn)
	p.path = s.cfg.Path.SelectPath(now, psn, retx)
	p.sentAt = now
	s.set(p, pktInFlight)
	p.tx++
	// A timestamp unique within the connection (packets sent at the
	// same time take the next nanoseconds), so that an ACK's echo names
	// the one transmission that triggered it; never 0, the wire's "no
	// timestamp".
	ts := max(now, s.lastTS+1)
	s.lastTS = ts
	if p.tx == 1 {
		p.firstTS = ts
	}
	if s.rtoAt == 0 {
		s.rtoAt = now + s.rto
	}
	h := &c.hdr
	h.Path, h.PSN, h.TS, h.Flags = p.path, psn, ts, 0
	if p.first {
		h.Flags |= wire.FlagFirst
	}
	if p.last {
		h.Flags |= wire.FlagLast
		if m.Solicited {
			h.Flags |= wire.FlagSolicited
		}
	}
	if retx {
		h.Flags |= wire.FlagRetx
	}
	d := wire.Data{Op: m.Op, MSN: m.msn, Offset: p.off, MsgLen: m.Len}
	switch m.Op {
	case wire.OpWrite:
		d.RKey, d.RAddr = m.RKey, m.RAddr
	case wire.OpReadReq, wire.OpCmpSwap, wire.OpFetchAdd:
		// Where the response's stream starts if it is the peer's first
		// packet (Config.StreamToken).
		d.RKey, d.RAddr, d.RespPSN = m.RKey, m.RAddr, s.cfg.RecvPSN
	case wire.OpReadResp, wire.OpAtomicResp:
		d.RAddr = m.RAddr // the request's msn
	case wire.OpWriteImm:
		d.RKey, d.RAddr, d.Imm, d.SSN = m.RKey, m.RAddr, m.Imm, m.ssn
	case wire.OpSend:
		d.SSN = m.ssn
	case wire.OpSendImm:
		d.Imm, d.SSN = m.Imm, m.ssn
	}
	hl := wire.HeaderLen + wire.DataLen
	payload := buf[hl : hl+int(p.n)]
	switch {
	case m.Op == wire.OpCmpSwap:
		binary.BigEndian.PutUint64(payload[0:], m.Compare)
		binary.BigEndian.PutUint64(payload[8:], m.SwapAdd)
	case m.Op == wire.OpFetchAdd:
		binary.BigEndian.PutUint64(payload[0:], m.SwapAdd)
	case p.n > 0:
		if !m.Src.ReadAt(payload, uint64(p.off)) {
			c.fail(StatusLocal)
			return nil, 0, false
		}
	}
	return wire.AppendData(buf[:0], h, &d, payload), p.path, true
}

// ack processes an acknowledgement.
func (s *sender) ack(c *Conn, now int64, p *wire.Packet) error {
	a := &p.Ack
	if wire.SeqLess(s.nxt, a.Cum) || s.una-a.Cum > maxWindow+maxMessages && wire.SeqLess(a.Cum, s.una) {
		// Acknowledging what was never sent (an old ACK, reordered or
		// duplicated, has Cum below una and is still useful for its
		// SACK bits; one from beyond any window is not).
		c.st.Invalid++
		return fmt.Errorf("ack %d outside [%d, %d]: %w", a.Cum, s.una, s.nxt, ErrInvalid)
	}
	c.st.AcksReceived++
	rtt := s.sample(c, now, p.Path, a.EchoTS, s.lastTS)
	s.ackRun = ackRun{rttPath: p.Path, rtt: rtt}
	for psn := s.una; wire.SeqLess(psn, a.Cum); psn++ {
		s.markAcked(c, now, psn)
	}
	for i := uint32(0); i < wire.SACKBits; i++ {
		psn := a.Cum + 1 + i
		if !wire.SeqLess(psn, s.nxt) {
			break
		}
		if a.SACK[i/64]&(1<<(i%64)) != 0 {
			s.markAcked(c, now, psn)
		}
	}
	progress := s.ackRun.progress
	for s.una != s.nxt && s.pkt(s.una).state == pktAcked {
		s.una++
	}
	if p.Flags&wire.FlagDup != 0 && c.cfg.Recovery == Selective && !c.cfg.NoDupReports {
		s.dupReported(c, &s.sendWindow, now, a.DupPSN, rtt > 0)
	}
	if progress {
		s.peerFree(&s.sendWindow, s.lastTS)
		s.flushAckRun(c, now)
		if r := &s.ackRun; r.rtt > 0 {
			// No packet it acknowledged went on the sample's path.
			c.cfg.CC.OnAck(now, r.rttPath, 0, r.rtt)
		}
		s.progressed(now, s.inFlight)
	}
	// Completions: the receiver committed every message below a.MSN.
	s.completeCommitted(c, now, a.MSN)
	if a.NAK == wire.NAKBusy {
		c.st.BusyNaksReceived++
	}
	if a.NAK != wire.NAKNone {
		s.nak(c, now, a)
	}
	if c.failed {
		return nil
	}
	switch {
	case s.busy:
		// What is not acknowledged waits for the busy peer (busy.go),
		// not for loss detection.
	case c.cfg.Recovery == GoBackN:
		if a.NAK != wire.NAKBusy {
			// (A BUSY NAK repeats the cumulative ACK because a packet was
			// turned away or a response is held, not because one is
			// missing.)
			s.goBack(c, &s.sendWindow, now, a, progress)
		}
	default:
		s.detectLosses(c, &s.sendWindow, now)
	}
	return nil
}

// completeCommitted completes, in order, the messages the receiver
// committed (every msn below committed): a READ or atomic also waits for
// its response, a response we sent completes silently.
func (s *sender) completeCommitted(c *Conn, now int64, committed uint32) {
	if wire.SeqLess(s.msnNxt, committed) {
		return // beyond anything posted: not ours to believe
	}
	if wire.SeqLess(s.peerCommitted, committed) {
		s.peerCommitted = committed
	}
	committed = s.peerCommitted
	s.respAt = 0
	for s.msnUna != s.msnNxt && wire.SeqLess(s.msnUna, committed) {
		m := s.msg(s.msnUna)
		if m.refused {
			break // the NAK decides
		}
		if m.Op.AwaitsResponse() && !m.respDone {
			// The peer has the request; its response travels in its
			// own reliable stream. Only a dead peer leaves us waiting.
			s.respAt = now + s.rto
			break
		}
		if m.internal {
			finish(m.Src)
		} else {
			c.complete(m, StatusOK)
		}
		s.msnUna++
	}
	s.postPending()
}

// finish tells a response's source that it is needed no more.
func finish(src Source) {
	if f, ok := src.(Finisher); ok {
		f.Finish()
	}
}

// markAcked marks psn acknowledged, if it was not, and adds it to the
// acknowledgement's runs.
func (s *sender) markAcked(c *Conn, now int64, psn uint32) {
	if !inRange(psn, s.una, s.nxt) {
		return
	}
	p := s.pkt(psn)
	if p.state == pktAcked {
		return
	}
	r := &s.ackRun
	if r.n > 0 && r.path != p.path {
		s.flushAckRun(c, now)
	}
	r.path, r.progress = p.path, true
	r.n++
	s.acked(c, now, psn, p)
	s.set(p, pktAcked)
	p.ackedAt = now
}

// flushAckRun tells the CC of the current run, with the RTT sample if
// the run is on its path and no earlier run took it.
func (s *sender) flushAckRun(c *Conn, now int64) {
	r := &s.ackRun
	if r.n == 0 {
		return
	}
	rtt := int64(0)
	if r.rtt > 0 && r.path == r.rttPath {
		rtt, r.rtt = r.rtt, 0
	}
	c.cfg.CC.OnAck(now, r.path, r.n, rtt)
	r.n = 0
}

// nak handles a receiver's refusal of message a.NAKMSN.
func (s *sender) nak(c *Conn, now int64, a *wire.Ack) {
	if !inRange(a.NAKMSN, s.msnUna, s.msnNxt) {
		return // about a message already completed: stale
	}
	m := s.msg(a.NAKMSN)
	if a.NAK == wire.NAKBusy {
		s.busyNak(c, &s.sendWindow, now, a, wire.SeqLess(m.msn, s.peerCommitted))
		return
	}
	if a.NAK != wire.NAKRNR {
		if a.NAKMSN != s.msnUna {
			return // earlier messages complete first; it comes again
		}
		m.refused = true
		switch a.NAK {
		case wire.NAKAccess:
			m.status = StatusRemoteAccess
		case wire.NAKInvalid:
			m.status = StatusRemoteInvalid
		default:
			m.status = StatusRemoteOp
		}
		c.fail(m.status)
		return
	}
	if m.rnrUntil > now || a.EchoTS < m.rnrUntil {
		// Waiting already, or about a transmission sent before the last
		// wait ended, which that wait answered: the NAK that began it,
		// replayed, or another of the same attempt (docs/wire.md,
		// section 9).
		return
	}
	c.st.RNRNaks++
	if m.rnrs == 0 {
		c.fail(StatusRNRRetryExceeded)
		return
	}
	if m.rnrs != 7 {
		m.rnrs--
	}
	m.rnrUntil = now + int64(rnrDelay(a.RNRTimer))
	// Its packets not acknowledged wait, then go again.
	for psn := s.una; psn != s.nxt; psn++ {
		switch p := s.pkt(psn); {
		case p.msn != m.msn:
		case p.state == pktInFlight, p.state == pktLost, p.state == pktBusyWait:
			s.set(p, pktRNRWait)
		}
	}
	if s.rnrAt == 0 || m.rnrUntil < s.rnrAt {
		s.rnrAt = m.rnrUntil
	}
}

func (s *sender) timeout() (int64, bool) {
	at := int64(0)
	for _, t := range [...]int64{s.rtoAt, s.rackAt, s.rnrAt, s.respAt, s.pace.at, s.probeAt} {
		if t != 0 && (at == 0 || t < at) {
			at = t
		}
	}
	return at, at != 0
}

func (s *sender) handleTimeout(c *Conn, now int64) {
	if s.pace.at != 0 && now >= s.pace.at {
		// The driver transmits next; Transmit sets it again if it must.
		s.pace.at = 0
	}
	if s.rnrAt != 0 && now >= s.rnrAt {
		s.rnrAt = 0
		for psn := s.una; psn != s.nxt; psn++ {
			p := s.pkt(psn)
			if p.state != pktRNRWait {
				continue
			}
			if m := s.msg(p.msn); m.rnrUntil <= now && s.busy {
				p.state = pktBusyWait // the probe goes first...
				if s.probeAt == 0 {
					// ...and goes now: the RNR NAK answered the last
					// one, so no probe timer is armed.
					s.probeAt = now
				}
			} else if m.rnrUntil <= now {
				s.set(p, pktLost)
			} else if s.rnrAt == 0 || m.rnrUntil < s.rnrAt {
				s.rnrAt = m.rnrUntil
			}
		}
	}
	if s.probeAt != 0 && now >= s.probeAt {
		s.probeAt = 0
		s.probe(&s.sendWindow)
	}
	if s.rackAt != 0 && now >= s.rackAt {
		s.detectLosses(c, &s.sendWindow, now)
	}
	if s.respAt != 0 && now >= s.respAt && s.heldResponse(now) {
		// The peer holds the response back while busy (busy.go): that
		// is no timeout.
		s.respAt = s.busyLast + busyHoldWait
	}
	if s.respAt != 0 && now >= s.respAt {
		// Waiting for a response with nothing of ours in flight: count
		// it as a timeout, so a dead peer fails the connection within
		// the retry limit.
		if !s.timedOut(c) {
			return
		}
		s.respAt = now + s.rto
	}
	if s.rtoAt != 0 && now >= s.rtoAt {
		s.expired(c, &s.sendWindow, now)
	}
}

// flush completes every outstanding message: the first with st, the
// rest flushed.
func (s *sender) flush(c *Conn, st Status) {
	for s.msnUna != s.msnNxt {
		if m := s.msg(s.msnUna); m.internal {
			finish(m.Src)
		} else {
			c.complete(m, st)
			st = StatusFlushed
		}
		s.msnUna++
	}
	for _, r := range s.pending {
		finish(r.src)
	}
	s.pending = nil
	s.rtoAt, s.rackAt, s.rnrAt, s.respAt, s.pace.at = 0, 0, 0, 0, 0
	s.busyState = busyState{}
	s.lost = 0
}

// inRange reports lo <= x < hi in serial arithmetic.
func inRange(x, lo, hi uint32) bool { return x-lo < hi-lo }

// rnrDelay is the wait the IB min_rnr_timer encoding t asks for.
func rnrDelay(t uint8) int64 { return int64(abi.RNRTimerMicros[t&31]) * 1000 }

// zeroSource reads as zeros.
type zeroSource struct{}

func (zeroSource) ReadAt(p []byte, _ uint64) bool { clear(p); return true }
