package transport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

func quietLinks() (*netsim.Link, *netsim.Link) {
	return &netsim.Link{Delay: 5 * time.Microsecond}, &netsim.Link{Delay: 5 * time.Microsecond}
}

// TestCommitRefused: a sink that refuses a message at its commit (the
// target went away after Begin) fails it with that NAK; it never counts
// as committed, and the messages after it are flushed.
func TestCommitRefused(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	b.sink.refuse = func(m *transport.Inbound) wire.NAK {
		if m.MSN == 3 {
			return wire.NAKRemoteOp
		}
		return wire.NAKNone
	}
	l1, l2 := quietLinks()
	sim := netsim.New(8, a.ep, b.ep, l1, l2)
	a.posts = 8
	run(t, sim, a, b, []wire.Op{wire.OpWrite, wire.OpSend}, 3000, time.Second, nil)
	if a.statuses[transport.StatusOK] != 3 || a.statuses[transport.StatusRemoteOp] != 1 || a.statuses[transport.StatusFlushed] != int(a.nextMSN)-4 {
		t.Fatalf("statuses %v", a.statuses)
	}
	if b.sink.commits != 3 {
		t.Fatalf("%d commits, want the 3 before the refused one", b.sink.commits)
	}
}

// failingSource is a payload whose memory goes away after a few reads.
type failingSource struct {
	reads, ok int
}

func (f *failingSource) ReadAt(p []byte, _ uint64) bool {
	f.reads++
	clear(p)
	return f.reads <= f.ok
}

// TestSourceGone: when the sender's memory cannot be read any more, the
// connection fails StatusLocal instead of sending anything else, and
// the responder never commits the message.
func TestSourceGone(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	src := &failingSource{ok: 2}
	if _, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 5000, Src: src, RKey: 0x1234, Token: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 10, Src: bytesSrc(make([]byte, 10)), RKey: 0x1234, Token: 1001}); err != nil {
		t.Fatal(err)
	}
	a.sent[0], a.sent[1] = posted{op: wire.OpWrite, token: 1000}, posted{op: wire.OpWrite, token: 1001}
	a.nextMSN, a.posts = 2, 2
	l1, l2 := quietLinks()
	run(t, netsim.New(9, a.ep, b.ep, l1, l2), a, b, nil, 0, time.Second, nil)
	if a.statuses[transport.StatusLocal] != 1 || a.statuses[transport.StatusFlushed] != 1 || !a.ep.c.Failed() {
		t.Fatalf("statuses %v", a.statuses)
	}
	if b.sink.commits != 0 {
		t.Fatalf("%d commits of a message whose source went away", b.sink.commits)
	}
}

// TestClose: closing a connection completes everything outstanding as
// flushed at once; afterwards packets are dropped without reaching the
// sink, and nothing is sent.
func TestClose(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	for i := range 3 {
		if _, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 3000, Src: bytesSrc(make([]byte, 3000)), RKey: 0x1234, Token: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	pkt, _, ok := a.ep.c.Transmit(0, buf)
	if !ok {
		t.Fatal("nothing to send")
	}
	a.ep.c.Close()
	comps := a.ep.c.Completions(nil)
	if len(comps) != 3 {
		t.Fatalf("%d completions after Close, want 3", len(comps))
	}
	for _, c := range comps {
		if c.Status != transport.StatusFlushed {
			t.Fatalf("completion %+v, want FLUSHED", c)
		}
	}
	if _, _, ok := a.ep.c.Transmit(1, buf); ok {
		t.Fatal("a closed connection sends")
	}
	if _, err := a.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: 1, Src: bytesSrc{1}, Token: 9}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("post after close: %v", err)
	}
	// The peer closes too: what arrives afterwards is not delivered.
	b.ep.c.Close()
	var p wire.Packet
	if err := wire.Parse(pkt, &p); err != nil {
		t.Fatal(err)
	}
	if err := b.ep.c.Handle(2, &p); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("closed connection handled a packet: %v", err)
	}
	if st := b.ep.c.Stats(); st.DataReceived != 0 || st.BytesPlaced != 0 {
		t.Fatalf("closed connection received: %+v", st)
	}
}

// TestSetLimits: limits learnt at RTS take effect; bad ones are refused
// and change nothing.
func TestSetLimits(t *testing.T) {
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	for _, lim := range [][2]int{{0, 1}, {1, 0}, {8, 1}, {1, 8}, {-1, 3}} {
		if err := a.ep.c.SetLimits(lim[0], lim[1]); !errors.Is(err, transport.ErrConfig) {
			t.Fatalf("SetLimits(%d, %d): %v", lim[0], lim[1], err)
		}
	}
	if err := a.ep.c.SetLimits(7, 1); err != nil {
		t.Fatal(err)
	}
	a.posts = 4
	b.sink.posted = 0 // never ready: one RNR retry, then the message fails
	l1, l2 := quietLinks()
	run(t, netsim.New(10, a.ep, b.ep, l1, l2), a, b, []wire.Op{wire.OpSend}, 100, 10*time.Second, nil)
	if a.statuses[transport.StatusRNRRetryExceeded] != 1 || a.ep.c.Stats().RNRNaks > 2 {
		t.Fatalf("statuses %v, stats %+v", a.statuses, a.ep.c.Stats())
	}
}
