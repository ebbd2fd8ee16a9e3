package transport_test

import (
	"errors"
	"testing"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// TestEarlyResponseStream: a SendLater connection with a StreamToken (an
// RC QP in RTR, which never gets a sq_psn of its own if it stays there,
// as perftest's ib_read_bw server does) answers the peer's READ and
// atomic at once: the response starts its stream at the psn the request
// names, the requester's RecvPSN, with StreamToken of it. Post still
// waits for StartSend, which then succeeds once with that psn and token
// and lets the connection's own messages follow on the same stream.
func TestEarlyResponseStream(t *testing.T) {
	const psnA, psnB = 0xfffffff0, 0x00fffffe
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
	a, b := newPair(t, cfg)
	ca, cb := cfg, cfg
	ca.SendPSN, ca.RecvPSN = psnA, psnB
	var asked []uint32
	cb.RecvPSN, cb.SendLater = psnA, true
	cb.StreamToken = func(psn uint32) uint64 {
		asked = append(asked, psn)
		return 0xaaaa // a's LocalToken: b's stream's
	}
	gate(t, a, ca, false, func() bool { return false })
	gate(t, b, cb, true, func() bool { return false })

	post := func(s *side, m transport.Message, data []byte) {
		t.Helper()
		m.Token, m.RKey = uint64(s.nextMSN)+1000, 0x1234
		msn, err := s.ep.c.Post(m)
		if err != nil {
			t.Fatal(err)
		}
		s.sent[msn] = posted{op: m.Op, data: data, raddr: m.RAddr, token: m.Token}
		s.nextMSN++
	}
	dst := make([]byte, 3000)
	post(a, transport.Message{Op: wire.OpReadReq, Len: 3000, RAddr: roBase + 7, Dst: bytesDst(dst)}, dst)
	post(a, transport.Message{Op: wire.OpFetchAdd, RAddr: ctrAddr, SwapAdd: 1}, nil)

	var p wire.Packet
	psns := map[*side][]uint32{}
	exchange := func(now int64) {
		pump(t, now, a, b, func(from *side, pkt []byte) {
			if err := wire.Parse(pkt, &p); err != nil {
				t.Fatal(err)
			}
			if p.Type != wire.TypeData {
				return
			}
			psns[from] = append(psns[from], p.PSN)
			if (p.Data.Op == wire.OpReadReq || p.Data.Op == wire.OpFetchAdd) && p.Data.RespPSN != psnB {
				t.Errorf("%v carries resp_psn %#x, want a's RecvPSN %#x", p.Data.Op, p.Data.RespPSN, psnB)
			}
		})
		a.collect(t)
		b.collect(t)
	}
	exchange(1000)
	if a.done != 2 || a.statuses[transport.StatusOK] != 2 {
		t.Fatalf("a's READ and FETCH_ADD to a connection not started: %d completed (%v)", a.done, a.statuses)
	}
	if len(asked) != 1 || asked[0] != psnB {
		t.Fatalf("StreamToken asked for %#x, want once for %#x", asked, psnB)
	}
	// 3 READ_RESP packets and the ATOMIC_RESP, from psnB on, across 2^24.
	if len(psns[b]) != 4 || psns[b][0] != psnB || psns[b][3] != psnB+3 {
		t.Fatalf("b's response packets have psns %#x, want 4 from %#x", psns[b], psnB)
	}

	// Still in RTR: b posts nothing of its own.
	wdata := make([]byte, 2000)
	for i := range wdata {
		wdata[i] = byte(i * 3)
	}
	write := transport.Message{Op: wire.OpWrite, Len: uint32(len(wdata)), Src: bytesSrc(wdata), RKey: 0x1234, Token: 1000}
	if _, err := b.ep.c.Post(write); !errors.Is(err, transport.ErrNotStarted) {
		t.Fatalf("Post before StartSend: %v", err)
	}
	// RTS with the sq_psn a was given: accepted, once.
	if err := b.ep.c.StartSend(psnB, 0xaaaa); err != nil {
		t.Fatalf("StartSend after the early start: %v", err)
	}
	if err := b.ep.c.StartSend(psnB, 0xaaaa); err == nil {
		t.Fatal("a second StartSend succeeded")
	}
	post(b, write, wdata)
	post(a, transport.Message{Op: wire.OpFetchAdd, RAddr: ctrAddr, SwapAdd: 1}, nil)
	exchange(2000)
	if b.done != 1 || b.statuses[transport.StatusOK] != 1 || a.done != 3 || a.statuses[transport.StatusOK] != 3 {
		t.Fatalf("after StartSend: b %d completed (%v), a %d (%v)", b.done, b.statuses, a.done, a.statuses)
	}
	if n := len(psns[b]); n != 7 || psns[b][n-1] != psnB+6 {
		t.Fatalf("b's packets have psns %#x, want 7 from %#x", psns[b], psnB)
	}
	for _, s := range []*side{a, b} {
		if st := s.ep.c.Stats(); st.Foreign != 0 || st.Invalid != 0 {
			t.Fatalf("refused packets: %+v", st)
		}
	}
}

// TestEarlyStreamOtherPSN: StartSend with a psn other than the one a
// response started the stream at fails, and the stream keeps its start
// (the peer expects it there), so the connection's messages still go.
func TestEarlyStreamOtherPSN(t *testing.T) {
	const psnA, psnB = 0x100, 0x200
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
	a, b := newPair(t, cfg)
	ca, cb := cfg, cfg
	ca.SendPSN, ca.RecvPSN = psnA, psnB
	cb.RecvPSN, cb.SendLater = psnA, true
	cb.StreamToken = func(uint32) uint64 { return 0xaaaa }
	gate(t, a, ca, false, func() bool { return false })
	gate(t, b, cb, true, func() bool { return false })
	dst := make([]byte, 100)
	m := transport.Message{Op: wire.OpReadReq, Len: 100, RAddr: roBase, RKey: 0x1234, Dst: bytesDst(dst), Token: 1000}
	msn, err := a.ep.c.Post(m)
	if err != nil {
		t.Fatal(err)
	}
	a.sent[msn] = posted{op: m.Op, data: dst, raddr: m.RAddr, token: m.Token}
	a.nextMSN++
	pump(t, 1000, a, b, func(*side, []byte) {})
	a.collect(t)
	if err := b.ep.c.StartSend(psnB+5, 0xaaaa); err == nil {
		t.Fatal("StartSend at another psn succeeded")
	}
	wdata := make([]byte, 100)
	w := transport.Message{Op: wire.OpWrite, Len: 100, Src: bytesSrc(wdata), RKey: 0x1234, Token: 1000}
	if msn, err = b.ep.c.Post(w); err != nil {
		t.Fatal(err)
	}
	b.sent[msn] = posted{op: w.Op, data: wdata, token: w.Token}
	b.nextMSN++
	pump(t, 2000, a, b, func(*side, []byte) {})
	b.collect(t)
	if a.statuses[transport.StatusOK] != 1 || b.statuses[transport.StatusOK] != 1 {
		t.Fatalf("a %v, b %v", a.statuses, b.statuses)
	}
}
