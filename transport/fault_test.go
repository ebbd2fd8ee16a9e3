package transport_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

var allOps = []wire.Op{wire.OpWrite, wire.OpWriteImm, wire.OpSend, wire.OpSendImm, wire.OpReadReq, wire.OpFetchAdd}

// run drives a and b through sim: each posts messages (up to maxInMsgs
// outstanding) until it has posted its share, and the run ends when
// every message has completed. extra, if set, runs at every step (a
// receiver posting receive WQEs). It fails the test on a hang.
func run(t *testing.T, sim *netsim.Sim, a, b *side, ops []wire.Op, maxLen int, limit time.Duration, extra func(now int64)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(len(a.sent)), 7))
	finished := sim.Run(limit, func() bool {
		if extra != nil {
			extra(sim.Now())
		}
		for _, s := range []*side{a, b} {
			s.collect(t)
			for s.outstanding() < maxInMsgs && int(s.nextMSN) < s.posts && !s.ep.c.Failed() {
				s.post(t, rng, ops, maxLen)
			}
		}
		return a.finished() && b.finished()
	})
	if !finished {
		t.Fatalf("hang at %v: a %d/%d completed, b %d/%d (a %+v, b %+v)", time.Duration(sim.Now()),
			a.done, a.posts, b.done, b.posts, a.ep.c.Stats(), b.ep.c.Stats())
	}
}

// TestFaultInjection drives connections through lossy, duplicating,
// reordering, delay-spiking, briefly partitioned links over many seeds,
// in selective-repeat and go-back-N modes: every message completes
// exactly once, in order, with its bytes committed exactly once at the
// peer; nothing fails (the partitions are shorter than the retry budget).
func TestFaultInjection(t *testing.T) {
	for _, mode := range []transport.Recovery{transport.Selective, transport.GoBackN} {
		// Go-back-N resends a whole window for every reordered packet:
		// fewer seeds keep its share of the run sensible.
		seeds := map[transport.Recovery]int{transport.Selective: 32, transport.GoBackN: 10}[mode]
		if testing.Short() {
			seeds = 6
		}
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%v/seed%d", mode, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1))
				link := func() *netsim.Link {
					return &netsim.Link{
						Delay: 5 * time.Microsecond, Jitter: time.Duration(rng.IntN(5000)),
						Rate: 10e9, Loss: rng.Float64() * 0.08, Dup: rng.Float64() * 0.05,
						Reorder: rng.Float64() * 0.3, ReorderDelay: time.Duration(rng.IntN(30000)),
						Spikes:     []netsim.Window{{From: 2 * time.Millisecond, To: 3 * time.Millisecond}},
						SpikeDelay: 300 * time.Microsecond,
						Partitions: []netsim.Window{{From: 5 * time.Millisecond, To: 5*time.Millisecond + time.Duration(rng.IntN(2e6))}},
					}
				}
				a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, Recovery: mode, RTOMax: 20 * time.Millisecond})
				a.posts, b.posts = 150, 150
				sim := netsim.New(seed, a.ep, b.ep, link(), link())
				run(t, sim, a, b, allOps, 20000, 10*time.Second, nil)
				for i, s := range []*side{a, b} {
					if s.peerCounter() != s.adds {
						t.Errorf("side %d: %d FETCH_ADDs completed but the peer's counter is %d", i, s.adds, s.peerCounter())
					}
					if s.failedAt >= 0 || s.statuses[transport.StatusOK] != s.posts {
						t.Errorf("side %d: %v (failed at %d)", i, s.statuses, s.failedAt)
					}
					if s.ep.badWire != 0 || s.ep.dropped != 0 || s.ep.c.Stats().Invalid != 0 || s.sink.failed {
						t.Errorf("side %d: %d unparsable, %d dropped (first: %v)", i, s.ep.badWire, s.ep.dropped, s.ep.firstDrop)
					}
				}
				// Every READ response's source hears it is done: once
				// the requester committed it, or at the close.
				for i, s := range []*side{a, b} {
					s.ep.c.Close()
					if s.sink.finishes != s.sink.responses {
						t.Errorf("side %d: %d READ responses, %d finished", i, s.sink.responses, s.sink.finishes)
					}
				}
				st := a.ep.c.Stats()
				t.Logf("a: %+v; link a→b %+v; first drop %v", st, sim.Stats(0), a.ep.firstDrop)
			})
		}
	}
}

// TestPartitionExhaustsRetries: a peer that goes away for good (its
// daemon killed) leaves the connection failed within the retry limit:
// the first outstanding message RETRY_EXCEEDED, the rest FLUSHED, no
// hang, no message completed twice.
func TestPartitionExhaustsRetries(t *testing.T) {
	for _, mode := range []transport.Recovery{transport.Selective, transport.GoBackN} {
		t.Run(mode.String(), func(t *testing.T) {
			a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, Recovery: mode, RTOMax: 10 * time.Millisecond, RetryLimit: 3})
			a.posts, b.posts = 100, 0
			// 1 Gb/s: the 100 messages take milliseconds, and the cut at
			// 500 µs catches them in flight.
			cut := []netsim.Window{{From: 500 * time.Microsecond, To: time.Hour}}
			sim := netsim.New(1, a.ep, b.ep, &netsim.Link{Delay: 5 * time.Microsecond, Rate: 1e9, Partitions: cut},
				&netsim.Link{Delay: 5 * time.Microsecond, Rate: 1e9, Partitions: cut})
			run(t, sim, a, b, allOps, 8000, time.Minute, nil)
			if a.failedAt < 0 || a.statuses[transport.StatusRetryExceeded] != 1 || a.statuses[transport.StatusOK]+a.statuses[transport.StatusFlushed]+1 != int(a.nextMSN) {
				t.Fatalf("statuses %v, failed at %d", a.statuses, a.failedAt)
			}
			// RTO 1 ms doubling to 10 ms, 3 retries: well under a second.
			if d := time.Duration(sim.Now()); d > 200*time.Millisecond {
				t.Fatalf("failure took %v", d)
			}
			if _, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite}); err == nil {
				t.Fatal("post on a failed connection succeeded")
			}
		})
	}
}

// TestReceiverNotReady: SENDs find no receive WQE and are NAKed; with
// rnr_retry 7 (for ever) they complete once receives are posted, in
// order and exactly once; with rnr_retry 1 and no receives the first
// fails RNR_RETRY_EXCEEDED and the rest flush.
func TestReceiverNotReady(t *testing.T) {
	t.Run("retry for ever", func(t *testing.T) {
		a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
		a.posts = 60
		b.sink.posted = 0
		sim := netsim.New(3, a.ep, b.ep, &netsim.Link{Delay: 5 * time.Microsecond, Loss: 0.02}, &netsim.Link{Delay: 5 * time.Microsecond, Loss: 0.02})
		next := int64(0)
		run(t, sim, a, b, []wire.Op{wire.OpSend, wire.OpWriteImm, wire.OpWrite}, 5000, 10*time.Second, func(now int64) {
			if now >= next { // the guest posts 4 receives every 200 µs
				b.sink.posted += 4
				next = now + 200e3
			}
		})
		if a.statuses[transport.StatusOK] != a.posts || a.ep.c.Stats().RNRNaks == 0 {
			t.Fatalf("statuses %v, stats %+v", a.statuses, a.ep.c.Stats())
		}
	})
	t.Run("retries exhausted", func(t *testing.T) {
		a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, RNRRetry: 1})
		a.posts = 10
		b.sink.posted = 0
		sim := netsim.New(4, a.ep, b.ep, &netsim.Link{Delay: 5 * time.Microsecond}, &netsim.Link{Delay: 5 * time.Microsecond})
		run(t, sim, a, b, []wire.Op{wire.OpSend}, 3000, 10*time.Second, nil)
		if a.statuses[transport.StatusRNRRetryExceeded] != 1 || a.statuses[transport.StatusFlushed] != int(a.nextMSN)-1 {
			t.Fatalf("statuses %v", a.statuses)
		}
		if b.sink.commits != 0 {
			t.Fatalf("%d messages committed without a receive", b.sink.commits)
		}
	})
}

// TestReplayedRNRNakUsesNoRetry: a SEND finds no receive WQE, and its
// RNR NAK uses up the one RNR retry; a receive is posted and the SEND
// goes again. The same NAK delivered again meanwhile (an on-path
// attacker, a duplicating network) is about the transmission the wait
// answered: it neither uses a retry (none is left: the connection would
// fail RNR_RETRY_EXCEEDED) nor holds the new transmission back.
// With rnr_retry 7 (for ever) it is not counted either.
func TestReplayedRNRNakUsesNoRetry(t *testing.T) {
	for _, retries := range []int{1, 7} {
		t.Run(fmt.Sprintf("rnr_retry %d", retries), func(t *testing.T) { replayRNRNak(t, retries) })
	}
}

// sendUnready posts a 1000-byte SEND on a pair whose receiver has no
// receive WQE: its first transmission is refused with an RNR NAK.
func sendUnready(t *testing.T, rnrRetry int) (a, b *side) {
	a, b = newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, RNRRetry: rnrRetry})
	data := make([]byte, 1000)
	msn, err := a.ep.c.Post(transport.Message{Op: wire.OpSend, Len: uint32(len(data)), Src: bytesSrc(data), Token: 1000})
	if err != nil {
		t.Fatal(err)
	}
	a.sent[msn] = posted{op: wire.OpSend, data: data, token: 1000}
	a.nextMSN, a.posts = 1, 1
	b.sink.posted = 0
	return a, b
}

func replayRNRNak(t *testing.T, retries int) {
	a, b := sendUnready(t, retries)
	deliver(b, 10*us, drain(a, 0)...)
	nak := drain(b, 10*us)
	deliver(a, 20*us, nak...)
	if st := a.ep.c.Stats(); st.RNRNaks != 1 {
		t.Fatalf("%d RNR NAKs taken, want 1", st.RNRNaks)
	}
	b.sink.posted = 1
	at, ok := a.ep.c.Timeout()
	if !ok {
		t.Fatal("no RNR wait armed")
	}
	a.ep.c.HandleTimeout(at)
	again := drain(a, at)
	if len(again) != 1 {
		t.Fatalf("%d packets after the RNR wait, want 1", len(again))
	}

	deliver(a, at+5*us, nak...)
	if st := a.ep.c.Stats(); st.RNRNaks != 1 || a.ep.c.Failed() {
		t.Fatalf("after the replay: %d RNR NAKs taken (want 1), failed %v", st.RNRNaks, a.ep.c.Failed())
	}
	if resent := drain(a, at+5*us); len(resent) != 0 {
		t.Errorf("the replay rewound the SEND: %d packets sent again", len(resent))
	}
	deliver(b, at+10*us, again...)
	deliver(a, at+20*us, drain(b, at+10*us)...)
	a.collect(t)
	if a.statuses[transport.StatusOK] != 1 || b.sink.commits != 1 || a.ep.dropped != 0 {
		t.Errorf("statuses %v, %d commits, %d dropped (%v)", a.statuses, b.sink.commits, a.ep.dropped, a.ep.firstDrop)
	}
}

// TestRNRNakEchoesTheRefusedPacket: a receiver still not ready refuses
// the SEND's retransmission after the RNR wait, in a batch where an old
// copy of its first transmission (duplicated by the network) comes after
// it. The NAK must echo the retransmission's ts, or the sender takes it
// for one its wait already answered, ignores it and, its SEND never
// acknowledged, spends transport retries instead of an RNR retry.
func TestRNRNakEchoesTheRefusedPacket(t *testing.T) {
	a, b := sendUnready(t, 7)
	first := drain(a, 0)
	deliver(b, 10*us, first...)
	deliver(a, 20*us, drain(b, 10*us)...)
	at, ok := a.ep.c.Timeout()
	if !ok {
		t.Fatal("no RNR wait armed")
	}
	a.ep.c.HandleTimeout(at)
	again := drain(a, at)
	deliver(b, at+10*us, append(again, first...)...)
	deliver(a, at+20*us, drain(b, at+10*us)...)
	if st := a.ep.c.Stats(); st.RNRNaks != 2 {
		t.Fatalf("%d RNR NAKs taken, want 2: the retransmission's NAK was ignored", st.RNRNaks)
	}
}

// TestRefusedMessageFailsOnlyTheRequester: a WRITE outside the target's
// memory is refused (REMOTE_ACCESS); the requester's connection fails
// with the rest flushed, and nothing is placed at the responder.
func TestRefusedMessageFailsOnlyTheRequester(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	sim := netsim.New(5, a.ep, b.ep, &netsim.Link{Delay: 5 * time.Microsecond}, &netsim.Link{Delay: 5 * time.Microsecond})
	data := bytesSrc(make([]byte, 4000))
	for i := range data {
		data[i] = 0xee
	}
	for i, m := range []transport.Message{
		{Op: wire.OpWrite, Len: 4000, Src: data, RAddr: 0, RKey: 0x1234, Token: 1000},
		{Op: wire.OpWrite, Len: 4000, Src: data, RAddr: uint64(len(b.sink.mem)), RKey: 0x1234, Token: 1001},
		{Op: wire.OpWrite, Len: 10, Src: data, RAddr: 0, RKey: 0x1234, Token: 1002},
	} {
		msn, err := a.ep.c.Post(m)
		if err != nil {
			t.Fatal(err)
		}
		a.sent[msn] = posted{op: wire.OpWrite, data: data[:m.Len], token: 1000 + uint64(i)}
	}
	a.nextMSN, a.posts = 3, 3
	run(t, sim, a, b, allOps, 0, time.Second, nil)
	if a.statuses[transport.StatusOK] != 1 || a.statuses[transport.StatusRemoteAccess] != 1 || a.statuses[transport.StatusFlushed] != 1 {
		t.Fatalf("statuses %v", a.statuses)
	}
	if b.sink.commits != 1 {
		t.Fatalf("responder committed %d messages, want 1", b.sink.commits)
	}
}

// TestForeignPacketsAreDropped: packets of another tenant, connection or
// token change nothing and are counted.
func TestForeignPacketsAreDropped(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7})
	if _, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 8, Src: bytesSrc(make([]byte, 8)), RKey: 0x1234, Token: 1}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	pkt, _, ok := a.ep.c.Transmit(0, buf)
	if !ok {
		t.Fatal("nothing to send")
	}
	var p wire.Packet
	for _, mutate := range []func(*wire.Packet){
		func(p *wire.Packet) { p.Tenant++ },
		func(p *wire.Packet) { p.Conn++ },
		func(p *wire.Packet) { p.Token ^= 1 },
	} {
		if err := wire.Parse(pkt, &p); err != nil {
			t.Fatal(err)
		}
		mutate(&p)
		if err := b.ep.c.Handle(1, &p); err == nil {
			t.Fatal("foreign packet accepted")
		}
	}
	if st := b.ep.c.Stats(); st.Foreign != 3 || st.DataReceived != 0 || b.sink.commits != 0 {
		t.Fatalf("stats %+v, commits %d", st, b.sink.commits)
	}
}

// TestPlacementRevoked: a sink whose target goes away mid-message (its
// memory removed) refuses the rest: the requester's message fails
// REMOTE_OP, later ones flush, and it is never committed (only the
// messages before it are).
func TestPlacementRevoked(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	placed := 0
	b.sink.revoke = func(m *transport.Inbound) bool {
		placed++
		return placed > 3 // the fourth packet finds the memory gone
	}
	sim := netsim.New(6, a.ep, b.ep, &netsim.Link{Delay: 5 * time.Microsecond}, &netsim.Link{Delay: 5 * time.Microsecond})
	a.posts = 5
	run(t, sim, a, b, []wire.Op{wire.OpWrite}, 8000, time.Second, func(int64) {})
	if a.statuses[transport.StatusRemoteOp] != 1 || int(b.sink.commits) != a.statuses[transport.StatusOK] || a.statuses[transport.StatusFlushed] == 0 {
		t.Fatalf("statuses %v, commits %d", a.statuses, b.sink.commits)
	}
}
