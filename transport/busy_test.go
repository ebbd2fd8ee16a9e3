package transport_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// countingCC is a FixedWindow that counts the congestion signals it
// hears: a busy peer must give none.
type countingCC struct {
	*transport.FixedWindow
	losses, timeouts int
}

func (c *countingCC) OnLoss(int64, uint16, int64) { c.losses++ }
func (c *countingCC) OnTimeout(int64)             { c.timeouts++ }

// remake makes s's connection again with cfg and sink, keeping the
// identity newPair gave it (the other side is b if second).
func remake(t *testing.T, s *side, cfg transport.Config, second bool, sink transport.Sink) {
	t.Helper()
	cfg.LocalConn, cfg.LocalToken, cfg.RemoteConn, cfg.RemoteToken = 1, 0xaaaa, 2, 0xbbbb
	if second {
		cfg.LocalConn, cfg.LocalToken, cfg.RemoteConn, cfg.RemoteToken = 2, 0xbbbb, 1, 0xaaaa
	}
	c, err := transport.NewConn(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	s.ep.c = c
}

// cleanLink is 10 Gb/s, 5 µs, nothing lost or reordered.
func cleanLink() *netsim.Link { return &netsim.Link{Delay: 5 * time.Microsecond, Rate: 10e9} }

// busyPair is a and b, b's sink behind a gate taken while busy says so,
// a with a countingCC, over links made by link.
func busyPair(t *testing.T, cfg transport.Config, link func() *netsim.Link, busy func(now int64) bool) (a, b *side, sim *netsim.Sim, cc *countingCC, gb *gatedSink) {
	t.Helper()
	a, b = newPair(t, cfg)
	sim = netsim.New(1, a.ep, b.ep, link(), link())
	cc = &countingCC{FixedWindow: transport.NewFixedWindow(256)}
	ca := cfg
	ca.CC = cc
	remake(t, a, ca, false, a.sink)
	gb = gate(t, b, cfg, true, func() bool { return busy(sim.Now()) })
	return a, b, sim, cc, gb
}

// TestBusyHoldOutlastsRetries: b's device is held in a control change
// for 300 ms, 300 times a's RTO with a retry limit of 1, every packet of
// a's messages (every verb) turned away meanwhile. Nothing counts as a
// loss or a timeout: each message completes once, OK, with its bytes,
// right after the hold; a probes at most about once a millisecond, and
// b's BUSY NAKs are about as many as a's probes.
func TestBusyHoldOutlastsRetries(t *testing.T) {
	for _, mode := range []transport.Recovery{transport.Selective, transport.GoBackN} {
		t.Run(mode.String(), func(t *testing.T) { testBusyHold(t, mode) })
	}
}

func testBusyHold(t *testing.T, mode transport.Recovery) {
	const hold = 300 * time.Millisecond
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024, RetryLimit: 1, Recovery: mode}
	a, b, sim, cc, gb := busyPair(t, cfg, cleanLink, func(now int64) bool { return now < int64(hold) })
	a.posts, b.posts = 40, 0
	run(t, sim, a, b, allOps, 20000, 10*time.Second, nil)
	sa, sb := a.ep.c.Stats(), b.ep.c.Stats()
	t.Logf("done at %v; a %+v", time.Duration(sim.Now()), sa)
	t.Logf("b %+v", sb)
	if a.statuses[transport.StatusOK] != a.posts || gb.failed || a.peerCounter() != a.adds {
		t.Fatalf("statuses %v; %d FETCH_ADDs, counter %d", a.statuses, a.adds, a.peerCounter())
	}
	if end := time.Duration(sim.Now()); end < hold || end > hold+5*time.Millisecond {
		t.Errorf("completed at %v, want right after the %v hold", end, hold)
	}
	if sa.Timeouts != 0 || sa.FastRetransmits != 0 || sa.SpuriousRetransmits != 0 || cc.losses != 0 || cc.timeouts != 0 {
		t.Errorf("the busy peer counted as loss: %d timeouts, %d fast retransmits, %d spurious, CC heard %d losses, %d timeouts",
			sa.Timeouts, sa.FastRetransmits, sa.SpuriousRetransmits, cc.losses, cc.timeouts)
	}
	if sb.Busy == 0 || sb.BusyNaksSent == 0 || sa.BusyNaksReceived != sb.BusyNaksSent || sb.Duplicates != 0 {
		t.Errorf("b turned away %d packets, sent %d BUSY NAKs (a got %d), %d duplicates", sb.Busy, sb.BusyNaksSent, sa.BusyNaksReceived, sb.Duplicates)
	}
	// Backoff 20 µs doubling to 1 ms: about 300 probes in 300 ms, each
	// answered once, plus the first burst's NAK.
	if sb.BusyNaksSent > 330 || sa.Retransmits > sb.BusyNaksSent+sa.DataSent {
		t.Errorf("%d BUSY NAKs, %d retransmissions of %d packets in a %v hold", sb.BusyNaksSent, sa.Retransmits, sa.DataSent, hold)
	}
}

// TestBusyForeverFailsAfterBound: a peer whose device never leaves its
// control change fails the connection RETRY_EXCEEDED (the rest
// FLUSHED) after (RetryLimit+1) x BusyTimeout, within a millisecond per
// retry (the longest backoff), and without any timeout or loss.
func TestBusyForeverFailsAfterBound(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   transport.Config
		bound time.Duration
	}{
		{"retry 2, busy timeout 50 ms", transport.Config{RetryLimit: 2, BusyTimeout: 50 * time.Millisecond}, 150 * time.Millisecond},
		{"defaults", transport.Config{}, 8 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Tenant, cfg.MaxPayload = 7, 1024
			a, b, sim, cc, _ := busyPair(t, cfg, cleanLink, func(int64) bool { return true })
			a.posts, b.posts = 5, 0
			run(t, sim, a, b, []wire.Op{wire.OpWrite}, 5000, time.Minute, nil)
			end, retries := time.Duration(sim.Now()), max(cfg.RetryLimit, 7)
			if cfg.RetryLimit != 0 {
				retries = cfg.RetryLimit
			}
			t.Logf("failed at %v: %v; a %+v", end, a.statuses, a.ep.c.Stats())
			if a.statuses[transport.StatusRetryExceeded] != 1 || a.statuses[transport.StatusFlushed] != 4 {
				t.Fatalf("statuses %v", a.statuses)
			}
			if end < c.bound || end > c.bound+time.Duration(retries+1)*1100*time.Microsecond {
				t.Errorf("failed after %v, want %v (+%d ms)", end, c.bound, retries+1)
			}
			if st := a.ep.c.Stats(); st.Timeouts != 0 || cc.losses != 0 || cc.timeouts != 0 {
				t.Errorf("%d timeouts, CC heard %d losses, %d timeouts", st.Timeouts, cc.losses, cc.timeouts)
			}
		})
	}
}

// busyBegin is a sink whose Begin answers NAKBusy (a device briefly in a
// control change, as fabric/remote's sink answers fabric.OutcomeBusy)
// its first n times.
type busyBegin struct {
	*sink
	n, calls int
}

func (s *busyBegin) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	if s.calls++; s.calls <= s.n {
		return wire.NAKBusy, 0
	}
	return s.sink.Begin(m)
}

// TestBusyBeginKeepsRNRRetry: Begin answering busy 200 times, with
// rnr_retry 1 (which a second RNR NAK would exhaust) and a retry limit
// of 1: the messages complete OK, no RNR NAK is counted and no retry
// is used.
func TestBusyBeginKeepsRNRRetry(t *testing.T) {
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024, RetryLimit: 1, RNRRetry: 1}
	a, b := newPair(t, cfg)
	sim := netsim.New(1, a.ep, b.ep, cleanLink(), cleanLink())
	bb := &busyBegin{sink: b.sink, n: 200}
	remake(t, b, cfg, true, bb)
	a.posts, b.posts = 20, 0
	run(t, sim, a, b, []wire.Op{wire.OpWrite, wire.OpSend, wire.OpWriteImm, wire.OpReadReq}, 5000, 10*time.Second, nil)
	sa, sb := a.ep.c.Stats(), b.ep.c.Stats()
	t.Logf("done at %v; a %+v; b busy %d, BUSY NAKs %d", time.Duration(sim.Now()), sa, sb.Busy, sb.BusyNaksSent)
	if a.statuses[transport.StatusOK] != a.posts {
		t.Fatalf("statuses %v", a.statuses)
	}
	if bb.calls <= bb.n || sa.RNRNaks != 0 || sa.Timeouts != 0 || sa.BusyNaksReceived == 0 || sb.Busy < uint64(bb.n) {
		t.Errorf("%d Begins, %d RNR NAKs, %d timeouts, %d BUSY NAKs received, %d turned away", bb.calls, sa.RNRNaks, sa.Timeouts, sa.BusyNaksReceived, sb.Busy)
	}
}

// TestBusyHeldResponse: b's device enters a 300 ms control change right
// after it committed a READ, so the READ's response waits for it. b
// tells a so (a BUSY NAK about the READ about once a millisecond), and
// a, with a retry limit of 1, keeps waiting without counting timeouts;
// the READ completes with the right bytes after the change.
func TestBusyHeldResponse(t *testing.T) {
	const hold = 300 * time.Millisecond
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024, RetryLimit: 1}
	from := int64(-1)
	a, b, sim, cc, gb := busyPair(t, cfg, cleanLink, func(now int64) bool { return from >= 0 && now >= from && now < from+int64(hold) })
	gb.afterCommit = func(m *transport.Inbound) {
		if m.Op == wire.OpReadReq && from < 0 {
			from = sim.Now()
		}
	}
	a.posts, b.posts = 1, 0
	run(t, sim, a, b, []wire.Op{wire.OpReadReq}, 20000, 10*time.Second, nil)
	sa, sb := a.ep.c.Stats(), b.ep.c.Stats()
	t.Logf("held from %v, done at %v; a %+v; b %d BUSY NAKs", time.Duration(from), time.Duration(sim.Now()), sa, sb.BusyNaksSent)
	if a.statuses[transport.StatusOK] != 1 {
		t.Fatalf("statuses %v", a.statuses)
	}
	if sa.Timeouts != 0 || cc.timeouts != 0 || sa.BusyNaksReceived != sb.BusyNaksSent || sb.BusyNaksSent < 250 || sb.BusyNaksSent > 310 {
		t.Errorf("%d timeouts (CC %d); b sent %d BUSY NAKs, a got %d; want about one a millisecond", sa.Timeouts, cc.timeouts, sb.BusyNaksSent, sa.BusyNaksReceived)
	}
}

// TestBusyProbe steps the state machine by hand: b's gate is taken; of
// a burst of packets turned away only the first and the next expected
// one (a probe) are answered with BUSY NAKs, within 10 µs; nothing of
// b's receiving state changes. a, told, sends nothing until its probe
// 20 µs later, one packet, the oldest, then 40 µs after the next NAK;
// when b is free the probe gets through and a sends the rest at once.
func TestBusyProbe(t *testing.T) {
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
	a, b := newPair(t, cfg)
	busy := true
	gate(t, b, cfg, true, func() bool { return busy })
	data := make([]byte, 16*1024)
	for i := range data {
		data[i] = byte(i * 7)
	}
	msn, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: uint32(len(data)), Src: bytesSrc(data), RKey: 0x1234, Token: 1000})
	if err != nil {
		t.Fatal(err)
	}
	a.sent[msn] = posted{op: wire.OpWrite, data: data, token: 1000}
	a.nextMSN++

	us := int64(time.Microsecond)
	now := int64(time.Millisecond)
	buf := make([]byte, 1<<16)
	var pkts [][]byte
	for {
		pkt, _, ok := a.ep.c.Transmit(now, buf)
		if !ok {
			break
		}
		pkts = append(pkts, append([]byte(nil), pkt...))
	}
	if len(pkts) != 16 {
		t.Fatalf("%d packets", len(pkts))
	}
	var p wire.Packet
	// deliver gives b packet i at t and returns b's answers' NAKs.
	deliver := func(t0 int64, pkt []byte) (naks []wire.Packet) {
		b.ep.Receive(t0, pkt)
		for {
			out, _, ok := b.ep.c.Transmit(t0, buf)
			if !ok {
				return naks
			}
			if err := wire.Parse(out, &p); err != nil || p.Type != wire.TypeAck {
				t.Fatalf("b sent %v (%v)", p.Type, err)
			}
			naks = append(naks, p)
		}
	}
	busyNaks := func(naks []wire.Packet) int {
		n := 0
		for _, q := range naks {
			if q.Ack.NAK == wire.NAKBusy && q.Ack.NAKMSN == msn && q.Ack.Cum == 0 && q.Ack.SACK == [4]uint64{} && q.Ack.MSN == 0 {
				n++
			} else {
				t.Errorf("b answered %+v", q.Ack)
			}
		}
		return n
	}
	var first wire.Packet
	n := 0
	for i := 1; i < 16; i++ { // the burst, but the first packet
		naks := deliver(now+int64(i)*100, pkts[i])
		if i == 1 && len(naks) == 1 {
			first = naks[0]
		}
		n += busyNaks(naks)
	}
	if n != 1 {
		t.Fatalf("%d BUSY NAKs for a burst of 15 packets in 1.5 µs, want 1", n)
	}
	if got := busyNaks(deliver(now+2*us, pkts[0])); got != 1 { // the next expected: answered
		t.Fatalf("packet 0, 2 µs after the last NAK: %d BUSY NAKs, want 1", got)
	}
	if got := busyNaks(deliver(now+3*us, pkts[5])); got != 0 {
		t.Fatalf("packet 5, 1 µs after the last NAK: %d BUSY NAKs, want 0", got)
	}
	if got := busyNaks(deliver(now+20*us, pkts[5])); got != 1 {
		t.Fatalf("packet 5, 18 µs after the last NAK: %d BUSY NAKs, want 1", got)
	}
	if st := b.ep.c.Stats(); st.Busy != 18 || st.DataReceived != 0 || st.BytesPlaced != 0 || st.BusyNaksSent != 3 || b.sink.commits != 0 {
		t.Fatalf("b: %+v", st)
	}

	// a hears the first NAK: nothing goes until the probe.
	now += 30 * us
	if err := a.ep.c.Handle(now, &first); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.ep.c.Transmit(now, buf); ok {
		t.Fatal("a sent while its peer is busy")
	}
	at, ok := a.ep.c.Timeout()
	if !ok || at != now+20*us {
		t.Fatalf("next deadline %d, %v: want the probe in 20 µs", at-now, ok)
	}
	probe := func(at int64) []byte {
		t.Helper()
		a.ep.c.HandleTimeout(at)
		pkt, _, ok := a.ep.c.Transmit(at, buf)
		if !ok {
			t.Fatal("no probe")
		}
		if err := wire.Parse(pkt, &p); err != nil || p.Type != wire.TypeData || p.PSN != 0 || p.Flags&wire.FlagRetx == 0 {
			t.Fatalf("probe %+v (%v)", p.Header, err)
		}
		pkt = append([]byte(nil), pkt...)
		if _, _, ok := a.ep.c.Transmit(at, buf); ok {
			t.Fatal("a sent more than the probe")
		}
		return pkt
	}
	pkt := probe(at)
	now = at + 10*us
	naks := deliver(now, pkt)
	if busyNaks(naks) != 1 {
		t.Fatal("the probe was not answered")
	}
	now += 10 * us
	if err := a.ep.c.Handle(now, &naks[0]); err != nil {
		t.Fatal(err)
	}
	if at, _ := a.ep.c.Timeout(); at != now+40*us {
		t.Fatalf("second probe in %v, want 40 µs", time.Duration(at-now))
	}
	pkt = probe(now + 40*us)

	// b is free: the probe is taken, and a sends the rest at once.
	if st := a.ep.c.Stats(); st.Timeouts != 0 || st.BusyNaksReceived != 2 || st.Retransmits != 2 {
		t.Fatalf("a: %+v", st)
	}
	busy = false
	now += 50 * us
	b.ep.Receive(now, pkt)
	pump(t, now, a, b, func(*side, []byte) {})
	a.collect(t)
	if a.done != 1 || a.statuses[transport.StatusOK] != 1 {
		t.Fatalf("statuses %v", a.statuses)
	}
	// Two probes, then the 15 packets that waited, each once.
	if st, sb := a.ep.c.Stats(), b.ep.c.Stats(); st.Retransmits != 2+15 || st.Timeouts != 0 || sb.DataReceived != 16 || sb.Duplicates != 0 {
		t.Fatalf("a: %+v; b: %+v", st, sb)
	}
}

// TestBusyHoldLossy: the hold of TestBusyHoldOutlastsRetries, both ways
// (each side's device held in turn, 100 ms each, overlapping), on links
// that lose, duplicate and reorder packets (BUSY NAKs and probes too):
// a lost probe or NAK costs an ordinary timeout, nothing more; every
// message of every verb still completes exactly once, in order, OK.
func TestBusyHoldLossy(t *testing.T) {
	for seed := range uint64(4) {
		cfg := transport.Config{Tenant: 7, MaxPayload: 1024}
		a, b := newPair(t, cfg)
		link := func() *netsim.Link {
			return &netsim.Link{Delay: 5 * time.Microsecond, Jitter: 3 * time.Microsecond, Rate: 10e9, Loss: 0.02, Dup: 0.01, Reorder: 0.1}
		}
		sim := netsim.New(seed, a.ep, b.ep, link(), link())
		ms := int64(time.Millisecond)
		ga := gate(t, a, cfg, false, func() bool { now := sim.Now(); return now >= 50*ms && now < 150*ms })
		gb := gate(t, b, cfg, true, func() bool { now := sim.Now(); return now >= ms && now < 101*ms })
		a.posts, b.posts = 200, 200
		run(t, sim, a, b, allOps, 20000, 10*time.Second, nil)
		turnedAway := uint64(0)
		for i, s := range []*side{a, b} {
			st := s.ep.c.Stats()
			t.Logf("seed %d side %d at %v: busy %d, BUSY NAKs sent %d received %d, timeouts %d", seed, i, time.Duration(sim.Now()), st.Busy, st.BusyNaksSent, st.BusyNaksReceived, st.Timeouts)
			if s.statuses[transport.StatusOK] != s.posts || s.peerCounter() != s.adds || s.sink.failed || st.Invalid != 0 {
				t.Fatalf("seed %d side %d: statuses %v; %d FETCH_ADDs, counter %d; %+v", seed, i, s.statuses, s.adds, s.peerCounter(), st)
			}
			// Each hold was told (packets turned away, or READ responses
			// held back). Whether a side's packets arrive during its
			// peer's hold depends on the run: the peer may have sent all
			// it has outstanding and wait for a response held back.
			if st.BusyNaksSent == 0 {
				t.Fatalf("seed %d side %d: %+v", seed, i, st)
			}
			turnedAway += st.Busy
		}
		if turnedAway == 0 {
			t.Fatalf("seed %d: no packet turned away", seed)
		}
		if ga.inside || gb.inside {
			t.Fatal("a gate left entered")
		}
	}
}

// busyThenRNR answers Begin busy n times, then RNR once, then as its
// sink does: a probe of a busy spell answered with an RNR NAK.
type busyThenRNR struct {
	*sink
	n, calls int
}

func (s *busyThenRNR) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	switch s.calls++; {
	case s.calls <= s.n:
		return wire.NAKBusy, 0
	case s.calls == s.n+1:
		return wire.NAKRNR, 1
	}
	return s.sink.Begin(m)
}

// TestBusyProbeAnsweredRNR: the probe of a busy spell is answered with
// an RNR NAK, so when the RNR timer fires the packets go back to waiting
// for a probe with nothing in flight and no timer of the spell's own
// armed. The probe must still go: the messages complete instead of the
// connection stalling for good (seen between two real VMs under -race:
// a WRITE stream across a QMP stop/cont never finished).
func TestBusyProbeAnsweredRNR(t *testing.T) {
	cfg := transport.Config{Tenant: 7, MaxPayload: 1024, RetryLimit: 1, RNRRetry: 7}
	a, b := newPair(t, cfg)
	sim := netsim.New(1, a.ep, b.ep, cleanLink(), cleanLink())
	bb := &busyThenRNR{sink: b.sink, n: 3}
	remake(t, b, cfg, true, bb)
	a.posts, b.posts = 1, 0
	run(t, sim, a, b, []wire.Op{wire.OpWrite}, 512, 10*time.Second, nil)
	sa := a.ep.c.Stats()
	if a.statuses[transport.StatusOK] != a.posts || sa.RNRNaks == 0 || sa.BusyNaksReceived == 0 {
		t.Fatalf("statuses %v after %v; %d RNR NAKs, %d BUSY NAKs", a.statuses, time.Duration(sim.Now()), sa.RNRNaks, sa.BusyNaksReceived)
	}
}
