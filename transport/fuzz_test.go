package transport_test

import (
	"testing"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// FuzzConnHandle feeds a connection arbitrary packets that pass the wire
// parser, addressed to it (right tenant, connection and token: the
// peer's stream's for DATA, its own stream's for an ACK), between
// real traffic, and again after it: it must never panic, never complete
// a message twice or out of order, and never commit bytes of a message it
// did not accept.
func FuzzConnHandle(f *testing.F) {
	buf := make([]byte, 4096)
	a, _ := newPair(&testing.T{}, transport.Config{Tenant: 7, MaxPayload: 256})
	a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 600, Src: bytesSrc(make([]byte, 600)), RKey: 0x1234, Token: 1000})
	for {
		pkt, _, ok := a.ep.c.Transmit(1, buf)
		if !ok {
			break
		}
		f.Add(append([]byte(nil), pkt...), uint32(0))
	}
	ack := wire.AppendAck(nil, &wire.Header{Tenant: 7, Conn: 2, Token: 0xbbbb}, &wire.Ack{Cum: 2, MSN: 1, NAK: wire.NAKRNR, RNRTimer: 3, NAKMSN: 0})
	f.Add(ack, uint32(1))
	busy := wire.AppendAck(nil, &wire.Header{Tenant: 7, Conn: 2, Token: 0xbbbb}, &wire.Ack{Cum: 1, EchoTS: 1, NAK: wire.NAKBusy, NAKMSN: 0})
	f.Add(busy, uint32(1))
	dup := wire.AppendAck(nil, &wire.Header{Tenant: 7, Conn: 2, Token: 0xbbbb, Flags: wire.FlagDup}, &wire.Ack{Cum: 2, EchoTS: 1, MSN: 1, DupPSN: 1})
	f.Add(dup, uint32(1))
	// An ACK 500 ms late echoing a timestamp: the harness handles it
	// before any traffic, so it echoes one never sent and is no RTT
	// sample (a replay after traffic is TestReplayedAckInflatesNoRTT's).
	late := wire.AppendAck(nil, &wire.Header{Tenant: 7, Conn: 2, Token: 0xbbbb, Path: 3}, &wire.Ack{EchoTS: 1})
	f.Add(late, uint32(500e6))
	// A forged empty SEND at the stream's next position: a peer holding
	// the token may send it, so it commits (found by a 600 s run).
	forged := wire.AppendData(nil, &wire.Header{Tenant: 7, Conn: 1, Token: 0xaaaa}, &wire.Data{Op: wire.OpSend, SSN: 0x30303030}, nil)
	f.Add(forged, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, when uint32) {
		a, peer := newPair(t, transport.Config{Tenant: 7, MaxPayload: 256})
		peer.posts, a.posts = 0, 3
		a.sink.forged, peer.sink.forged = true, true
		for i := range 3 {
			if _, err := a.ep.c.Post(transport.Message{Op: wire.OpSend, Len: 300, Src: bytesSrc(make([]byte, 300)), Token: 1000 + uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		a.nextMSN = 3
		for i := range 3 {
			a.sent[uint32(i)] = posted{op: wire.OpSend, data: make([]byte, 300), token: 1000 + uint64(i)}
		}
		var p wire.Packet
		if wire.Parse(b, &p) != nil {
			return
		}
		// Address it to each end in turn, as a forged or broken peer
		// that knows the connection's token would.
		for _, dst := range []*side{a, peer} {
			q := p
			id, tok := uint32(1), uint64(0xaaaa)
			if dst == peer {
				id, tok = 2, 0xbbbb
			}
			if q.Type == wire.TypeAck {
				tok ^= 0xaaaa ^ 0xbbbb // the other stream's
			}
			q.Tenant, q.Conn, q.Token = 7, id, tok
			now := int64(when)
			rounds := func(n int) {
				for range n {
					if pkt, _, ok := a.ep.c.Transmit(now, buf); ok {
						peer.ep.Receive(now, pkt)
					}
					if pkt, _, ok := peer.ep.c.Transmit(now, buf); ok {
						a.ep.Receive(now, pkt)
					}
					now += 1000
					a.ep.c.HandleTimeout(now)
				}
			}
			dst.ep.c.Handle(now, &q)
			rounds(64)
			// The same packet again, after the state it found has moved
			// on: a replay.
			dst.ep.c.Handle(now, &q)
			rounds(16)
			a.collect(t)
		}
	})
}
