package transport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// gatedSink is the test sink behind a Gate that is taken while busy()
// says so (a device in a control change); it checks that the connection
// calls the sink only from inside the gate.
type gatedSink struct {
	*sink
	busy   func() bool
	inside bool
	// afterCommit, if set, runs at the end of every Commit.
	afterCommit func(m *transport.Inbound)
}

func (g *gatedSink) TryEnter() bool {
	if g.inside {
		g.errorf("gate entered twice")
	}
	if g.busy() {
		return false
	}
	g.inside = true
	return true
}

func (g *gatedSink) Exit() {
	if !g.inside {
		g.errorf("gate left without being entered")
	}
	g.inside = false
}

func (g *gatedSink) check(what string) {
	if !g.inside {
		g.errorf("%s outside the gate", what)
	}
}

func (g *gatedSink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	g.check("Begin")
	return g.sink.Begin(m)
}

func (g *gatedSink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	g.check("Place")
	return g.sink.Place(m, off, b)
}

func (g *gatedSink) Commit(m *transport.Inbound) wire.NAK {
	g.check("Commit")
	nak := g.sink.Commit(m)
	if m.Response != nil {
		m.Response = gatedSource{g, m.Response}
	}
	if g.afterCommit != nil {
		g.afterCommit(m)
	}
	return nak
}

// gatedSource is a READ response read from the sink: inside the gate only.
type gatedSource struct {
	g   *gatedSink
	src transport.Source
}

func (s gatedSource) Finish() {
	if f, ok := s.src.(transport.Finisher); ok {
		f.Finish()
	}
}

func (s gatedSource) ReadAt(p []byte, off uint64) bool {
	s.g.check("a response's ReadAt")
	return s.src.ReadAt(p, off)
}

// gate puts s's sink behind a Gate: s's connection is made again with
// cfg and the identity newPair gave it (the other side is b if second).
func gate(t *testing.T, s *side, cfg transport.Config, second bool, busy func() bool) *gatedSink {
	t.Helper()
	g := &gatedSink{sink: s.sink, busy: busy}
	remake(t, s, cfg, second, g)
	return g
}

// TestBusySink: both sinks are busy for a while, at different times,
// under loss and reordering, with every verb in both directions: the
// packets that find a sink busy are dropped and counted, its READ
// responses wait, and every message still completes exactly once, in
// order, OK, with its bytes committed exactly once.
func TestBusySink(t *testing.T) {
	for seed := range uint64(4) {
		cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
		a, b := newPair(t, cfg)
		link := func() *netsim.Link {
			return &netsim.Link{Delay: 5 * time.Microsecond, Jitter: 3 * time.Microsecond, Rate: 10e9, Loss: 0.01, Reorder: 0.1}
		}
		sim := netsim.New(seed, a.ep, b.ep, link(), link())
		ms := int64(time.Millisecond)
		between := func(from, to int64) func() bool {
			return func() bool { now := sim.Now(); return now >= from && now < to }
		}
		ga := gate(t, a, cfg, false, between(ms/2, 3*ms/2))
		gb := gate(t, b, cfg, true, func() bool { return between(ms, 5*ms/2)() || between(3*ms, 7*ms/2)() })
		a.posts, b.posts = 150, 150
		run(t, sim, a, b, allOps, 20000, 5*time.Second, nil)
		t.Logf("seed %d: %v, busy drops a %d, b %d", seed, time.Duration(sim.Now()), a.ep.c.Stats().Busy, b.ep.c.Stats().Busy)
		for _, s := range []*side{a, b} {
			if s.statuses[transport.StatusOK] != s.posts {
				t.Fatalf("seed %d: statuses %v", seed, s.statuses)
			}
		}
		if a.ep.c.Stats().Busy == 0 || b.ep.c.Stats().Busy == 0 {
			t.Fatalf("seed %d: busy drops a %d, b %d", seed, a.ep.c.Stats().Busy, b.ep.c.Stats().Busy)
		}
		if ga.inside || gb.inside {
			t.Fatal("a gate left entered")
		}
	}
}

// pump moves packets both ways at now until neither side has anything
// to send, showing each to seen (with its sender) before it is received.
func pump(t *testing.T, now int64, a, b *side, seen func(from *side, pkt []byte)) {
	t.Helper()
	buf := make([]byte, 1<<16)
	for moved := true; moved; {
		moved = false
		for _, pr := range [][2]*side{{a, b}, {b, a}} {
			for {
				pkt, _, ok := pr[0].ep.c.Transmit(now, buf)
				if !ok {
					break
				}
				moved = true
				seen(pr[0], pkt)
				pr[1].ep.Receive(now, pkt)
			}
		}
	}
}

// countData is a pump observer that counts each side's DATA packets.
func countData(data map[*side]int) func(*side, []byte) {
	return func(from *side, pkt []byte) {
		if len(pkt) > 3 && wire.Type(pkt[3]) == wire.TypeData {
			data[from]++
		}
	}
}

// TestBusySinkResponse: a control change that begins right after a READ
// was committed holds its response back: the responder acknowledges the
// request but sends no response packet while its sink is busy, asks to
// be called back soon, and sends it once the sink is free.
func TestBusySinkResponse(t *testing.T) {
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
	a, b := newPair(t, cfg)
	busy := false
	gb := gate(t, b, cfg, true, func() bool { return busy })
	gb.afterCommit = func(m *transport.Inbound) {
		if m.Op == wire.OpReadReq {
			busy = true
		}
	}
	dst := make([]byte, 5000)
	m := transport.Message{Op: wire.OpReadReq, Len: 5000, RAddr: roBase + 100, RKey: 0x1234, Dst: bytesDst(dst), Token: 1000}
	msn, err := a.ep.c.Post(m)
	if err != nil {
		t.Fatal(err)
	}
	a.sent[msn] = posted{op: m.Op, data: dst, raddr: m.RAddr, token: m.Token}
	a.nextMSN++
	data := map[*side]int{}
	now := int64(1000)
	pump(t, now, a, b, countData(data))
	if data[a] != 1 || data[b] != 0 || b.sink.commits != 1 {
		t.Fatalf("DATA packets a %d, b %d, commits %d: want the request only, committed", data[a], data[b], b.sink.commits)
	}
	if at, ok := b.ep.c.Timeout(); !ok || at <= now || at > now+int64(time.Millisecond) {
		t.Fatalf("waiting for the gate, Timeout %d, %v at %d", at, ok, now)
	}
	if a.collect(t); a.done != 0 {
		t.Fatal("READ completed while its response was held")
	}
	now += int64(time.Millisecond)
	b.ep.c.HandleTimeout(now)
	pump(t, now, a, b, countData(data)) // still busy
	if data[b] != 0 {
		t.Fatalf("%d response packets sent while busy", data[b])
	}
	busy = false
	now += int64(time.Millisecond)
	b.ep.c.HandleTimeout(now)
	pump(t, now, a, b, countData(data))
	a.collect(t) // checks the bytes
	if a.done != 1 || a.statuses[transport.StatusOK] != 1 || data[b] != 5 {
		t.Fatalf("statuses %v after %d response packets", a.statuses, data[b])
	}
}

// TestStreamsStartAtPSNs: each stream starts at the PSN its ends were
// given, across the 2^32 wrap; a SendLater connection takes the peer's
// requests and acknowledges them, but posts nothing and holds its READ
// responses until StartSend, from whose PSN its stream then starts.
func TestStreamsStartAtPSNs(t *testing.T) {
	const psnA, psnB = 0xfffffff0, 0x00123456
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
	a, b := newPair(t, cfg)
	ca, cb := cfg, cfg
	ca.SendPSN, ca.RecvPSN = psnA, psnB
	cb.SendPSN, cb.RecvPSN, cb.SendLater = 0x777, psnA, true // SendPSN is not used
	gate(t, a, ca, false, func() bool { return false })
	gate(t, b, cb, true, func() bool { return false })

	if _, err := b.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 8, Src: bytesSrc(make([]byte, 8)), RKey: 0x1234}); !errors.Is(err, transport.ErrNotStarted) {
		t.Fatalf("Post before StartSend: %v", err)
	}
	post := func(m transport.Message, data []byte) {
		t.Helper()
		m.Token, m.RKey = uint64(a.nextMSN)+1000, 0x1234
		msn, err := a.ep.c.Post(m)
		if err != nil {
			t.Fatal(err)
		}
		a.sent[msn] = posted{op: m.Op, data: data, raddr: m.RAddr, token: m.Token}
		a.nextMSN++
	}
	for i := range 4 {
		data := make([]byte, 10*1024)
		for j := range data {
			data[j] = byte(i*7 + j)
		}
		post(transport.Message{Op: wire.OpWrite, Len: uint32(len(data)), Src: bytesSrc(data), RAddr: uint64(i) * slotSize}, data)
	}
	dst := make([]byte, 3000)
	post(transport.Message{Op: wire.OpReadReq, Len: 3000, RAddr: roBase + 7, Dst: bytesDst(dst)}, dst)

	// Move packets both ways until quiet, noting each side's DATA psns.
	var p wire.Packet
	psns := map[*side][]uint32{}
	exchange := func(now int64) {
		pump(t, now, a, b, func(from *side, pkt []byte) {
			if err := wire.Parse(pkt, &p); err != nil {
				t.Fatal(err)
			}
			if p.Type == wire.TypeData {
				psns[from] = append(psns[from], p.PSN)
			}
		})
		a.collect(t)
	}
	exchange(1000)
	if len(psns[a]) != 41 || len(psns[b]) != 0 {
		t.Fatalf("%d DATA packets from a, %d from b; want 41 and none", len(psns[a]), len(psns[b]))
	}
	for i, psn := range psns[a] {
		if psn != psnA+uint32(i) {
			t.Fatalf("a's DATA packet %d has psn %#x, want %#x", i, psn, psnA+uint32(i))
		}
	}
	if a.done != 4 || a.statuses[transport.StatusOK] != 4 || b.sink.commits != 5 {
		t.Fatalf("before StartSend: %d completed (%v), %d committed; want the 4 WRITEs done and the READ committed", a.done, a.statuses, b.sink.commits)
	}
	if err := b.ep.c.StartSend(psnB, 0xaaaa); err != nil {
		t.Fatal(err)
	}
	if err := b.ep.c.StartSend(psnB, 0xaaaa); err == nil {
		t.Fatal("a second StartSend succeeded")
	}
	exchange(2000)
	if len(psns[b]) != 3 || psns[b][0] != psnB || psns[b][2] != psnB+2 {
		t.Fatalf("b's response packets have psns %#x, want 3 from %#x", psns[b], psnB)
	}
	if a.done != 5 || a.statuses[transport.StatusOK] != 5 {
		t.Fatalf("after StartSend: %d completed (%v)", a.done, a.statuses)
	}
	if st := a.ep.c.Stats(); st.Foreign != 0 || st.Invalid != 0 {
		t.Fatalf("a refused packets: %+v", st)
	}
	if st := b.ep.c.Stats(); st.Foreign != 0 || st.Invalid != 0 {
		t.Fatalf("b refused packets: %+v", st)
	}
}
