package endpoint_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// host is one endpoint on loopback with its loop stoppable.
type host struct {
	sock   *udp.Conn
	ep     *endpoint.Endpoint
	cancel context.CancelFunc
	done   chan struct{}
}

func newHost(t *testing.T) *host {
	t.Helper()
	s, err := udp.Listen(context.Background(), udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), RecvBuffer: 4 << 20, SendBuffer: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{sock: s, ep: endpoint.New(s, nil)}
	t.Cleanup(func() { h.stop(); s.Close() })
	return h
}

func (h *host) run() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() { defer close(h.done); h.ep.Run(ctx) }()
}

func (h *host) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

// collector records completions in delivery order.
type collector struct {
	mu    sync.Mutex
	comps []transport.Completion
	ch    chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1)} }

func (c *collector) done(x transport.Completion) {
	c.mu.Lock()
	c.comps = append(c.comps, x)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *collector) snapshot() []transport.Completion {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]transport.Completion(nil), c.comps...)
}

// wait waits for n completions.
func (c *collector) wait(t *testing.T, n int, d time.Duration) []transport.Completion {
	t.Helper()
	deadline := time.After(d)
	for {
		if got := c.snapshot(); len(got) >= n {
			return got
		}
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("%d of %d completions after %v", len(c.snapshot()), n, d)
		}
	}
}

// connect adds a connection a->b (ids 1 on a, 2 on b) with the sinks.
func connect(t *testing.T, a, b *host, sa, sb transport.Sink, da, db func(transport.Completion)) {
	t.Helper()
	for i, side := range []struct {
		h      *host
		peer   *host
		local  uint32
		remote uint32
		sink   transport.Sink
		done   func(transport.Completion)
	}{{a, b, 1, 2, sa, da}, {b, a, 2, 1, sb, db}} {
		cfg := transport.Config{Tenant: 9, LocalConn: side.local, LocalToken: uint64(side.local) * 1001,
			RemoteConn: side.remote, RemoteToken: uint64(side.remote) * 1001, MaxPayload: 4096}
		c, err := transport.NewConn(cfg, side.sink)
		if err != nil {
			t.Fatal(err)
		}
		if err := side.h.ep.Add(side.local, c, side.peer.sock.LocalAddr(0), 1, side.done); err != nil {
			t.Fatalf("side %d: %v", i, err)
		}
	}
}

func checkInOrder(t *testing.T, comps []transport.Completion, n int, want transport.Status) {
	t.Helper()
	if len(comps) != n {
		t.Fatalf("%d completions, want %d", len(comps), n)
	}
	for i, c := range comps {
		if c.Token != uint64(i) || c.Status != want {
			t.Fatalf("completion %d: %+v (want token %d, %v)", i, c, i, want)
		}
	}
}

// TestSubmitQueuesWhenFull: more messages than a connection takes are
// submitted while the peer is not running; they wait in the queue, in
// order, and all complete OK in order once the peer runs, each landing
// at its place.
func TestSubmitQueuesWhenFull(t *testing.T) {
	a, b := newHost(t), newHost(t)
	const msgs, size = 3000, 1000 // well over the 1024 a Conn holds
	sink := &memSink{mem: make([]byte, msgs*size)}
	col := newCollector()
	connect(t, a, b, &memSink{}, sink, col.done, nil)
	a.run()
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, size/2) }
	for i := range msgs {
		if err := a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: size, Src: src(payload(i)), RAddr: uint64(i) * size, Token: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(col.snapshot()); n != 0 {
		t.Fatalf("%d completions with the peer not running", n)
	}
	b.run()
	checkInOrder(t, col.wait(t, msgs, 20*time.Second), msgs, transport.StatusOK)
	b.stop() // its loop wrote sink.mem
	for i := range msgs {
		if !bytes.Equal(sink.mem[i*size:(i+1)*size], payload(i)) {
			t.Fatalf("message %d: wrong bytes", i)
		}
	}
}

// TestRemoveFlushes: Remove completes every message, posted or still
// queued, StatusFlushed and in order before it returns; later Submits
// fail with ErrNoConn.
func TestRemoveFlushes(t *testing.T) {
	a, b := newHost(t), newHost(t)
	col := newCollector()
	connect(t, a, b, &memSink{}, &memSink{mem: make([]byte, 1<<20)}, col.done, nil)
	a.run() // b never runs: nothing is acknowledged
	const msgs = 1500
	for i := range msgs {
		if err := a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 100, Src: src(make([]byte, 100)), Token: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // let the loop post some
	if !a.ep.Remove(1) {
		t.Fatal("Remove found no connection")
	}
	checkInOrder(t, col.snapshot(), msgs, transport.StatusFlushed)
	if err := a.ep.Submit(1, transport.Message{Op: wire.OpWrite}); !errors.Is(err, endpoint.ErrNoConn) {
		t.Fatalf("Submit after Remove: %v", err)
	}
	if a.ep.Remove(1) {
		t.Fatal("second Remove found the connection")
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(col.snapshot()); n != msgs {
		t.Fatalf("%d completions after Remove returned, want %d", n, msgs)
	}
}

// blockSink counts its calls; Begin can be made to block, and any call
// after gone is set is an error.
type blockSink struct {
	memSink
	calls atomic.Int64
	gone  atomic.Bool
	late  atomic.Int64
	hold  chan struct{} // if not nil, Begin blocks on it
	in    chan struct{}
}

func (s *blockSink) note() {
	s.calls.Add(1)
	if s.gone.Load() {
		s.late.Add(1)
	}
}

func (s *blockSink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	s.note()
	if s.hold != nil {
		select {
		case s.in <- struct{}{}:
		default:
		}
		<-s.hold
	}
	return s.memSink.Begin(m)
}
func (s *blockSink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	s.note()
	return s.memSink.Place(m, off, b)
}
func (s *blockSink) Commit(m *transport.Inbound) wire.NAK { s.note(); return s.memSink.Commit(m) }

// TestRemoveWaitsForSink: Remove waits for a Sink call in progress, and
// after it returns the Sink is never called again though the peer keeps
// sending.
func TestRemoveWaitsForSink(t *testing.T) {
	a, b := newHost(t), newHost(t)
	sink := &blockSink{memSink: memSink{mem: make([]byte, 1<<20)}, hold: make(chan struct{}), in: make(chan struct{}, 1)}
	col := newCollector()
	connect(t, a, b, &memSink{}, sink, col.done, nil)
	a.run()
	b.run()
	for i := range 50 {
		if err := a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 3000, Src: src(make([]byte, 3000)), RAddr: uint64(i) * 3000, Token: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-sink.in:
	case <-time.After(5 * time.Second):
		t.Fatal("Begin never called")
	}
	removed := make(chan struct{})
	go func() {
		b.ep.Remove(2)
		sink.gone.Store(true)
		close(removed)
	}()
	select {
	case <-removed:
		t.Fatal("Remove returned while the Sink was in Begin")
	case <-time.After(50 * time.Millisecond):
	}
	close(sink.hold)
	<-removed
	// More traffic for the removed connection: it must reach b and be
	// dropped there, not in the sink.
	for i := range 5 {
		a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 100, Src: src(make([]byte, 100)), Token: uint64(50 + i)})
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.ep.Stats().UnknownConn == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no packet for the removed connection counted: %+v", b.ep.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if late := sink.late.Load(); late != 0 {
		t.Fatalf("%d Sink calls after Remove returned", late)
	}
	a.ep.Remove(1)
	if n := len(col.snapshot()); n != 55 {
		t.Fatalf("%d completions, want 55", n)
	}
}

// TestSubmitConcurrent: several goroutines submit on several
// connections while the loops run; every message completes once, OK,
// and each goroutine's messages complete in its order.
func TestSubmitConcurrent(t *testing.T) {
	a, b := newHost(t), newHost(t)
	const conns, workers, msgs, size = 3, 4, 400, 512
	type key struct{ conn, worker int }
	var mu sync.Mutex
	last := map[key]int{}
	seen := map[uint64]int{}
	var total atomic.Int64
	all := make(chan struct{})
	for k := range conns {
		la, lb := uint32(10+2*k), uint32(11+2*k)
		sinkA, sinkB := &memSink{}, &memSink{mem: make([]byte, workers*msgs*size)}
		done := func(c transport.Completion) {
			w, i := int(c.Token>>32)&0xff, int(uint32(c.Token))
			mu.Lock()
			defer mu.Unlock()
			if c.Status != transport.StatusOK {
				t.Errorf("conn %d: %+v", k, c)
			}
			seen[c.Token]++
			kk := key{k, w}
			if prev, ok := last[kk]; ok && i <= prev {
				t.Errorf("conn %d worker %d: message %d completed after %d", k, w, i, prev)
			}
			last[kk] = i
			if total.Add(1) == conns*workers*msgs {
				close(all)
			}
		}
		for _, s := range []struct {
			h, p       *host
			local, rem uint32
			sink       transport.Sink
			d          func(transport.Completion)
		}{{a, b, la, lb, sinkA, done}, {b, a, lb, la, sinkB, nil}} {
			c, err := transport.NewConn(transport.Config{Tenant: 1, LocalConn: s.local, LocalToken: uint64(s.local), RemoteConn: s.rem, RemoteToken: uint64(s.rem)}, s.sink)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.h.ep.Add(s.local, c, s.p.sock.LocalAddr(0), 1, s.d); err != nil {
				t.Fatal(err)
			}
		}
	}
	a.run()
	b.run()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, size)
			for i := range msgs {
				for k := range conns {
					tok := uint64(k)<<40 | uint64(w)<<32 | uint64(i)
					m := transport.Message{Op: wire.OpWrite, Len: size, Src: src(p), RAddr: uint64(w*msgs+i) * size, Token: tok}
					if err := a.ep.Submit(uint32(10+2*k), m); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d of %d completions", total.Load(), conns*workers*msgs)
	}
	mu.Lock()
	defer mu.Unlock()
	for tok, n := range seen {
		if n != 1 {
			t.Fatalf("token %#x completed %d times", tok, n)
		}
	}
}

// badSrc cannot be read: its memory is gone.
type badSrc struct{}

func (badSrc) ReadAt([]byte, uint64) bool { return false }

// TestFailedSourceAndBadMessage: a source that cannot be read fails the
// connection (StatusLocal) and the completion is reported at once; a
// malformed message completes StatusLocal after what came before it;
// messages after either are flushed.
func TestFailedSourceAndBadMessage(t *testing.T) {
	a, b := newHost(t), newHost(t)
	col := newCollector()
	connect(t, a, b, &memSink{}, &memSink{mem: make([]byte, 1<<16)}, col.done, nil)
	a.run()
	b.run()
	start := time.Now()
	a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 100, Src: badSrc{}, Token: 0})
	a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 100, Src: src(make([]byte, 100)), Token: 1})
	got := col.wait(t, 2, 5*time.Second)
	if got[0].Status != transport.StatusLocal || got[1].Status != transport.StatusFlushed {
		t.Fatalf("completions %+v", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("failure reported after %v", d)
	}
	a.ep.Remove(1)
	b.ep.Remove(2)

	col = newCollector()
	connect(t, a, b, &memSink{}, &memSink{mem: make([]byte, 1<<16)}, col.done, nil)
	a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 10, Src: src(make([]byte, 10)), Token: 0})
	a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 10, Token: 1}) // no source
	a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 10, Src: src(make([]byte, 10)), Token: 2})
	got = col.wait(t, 3, 5*time.Second)
	for i, c := range got {
		if c.Token != uint64(i) {
			t.Fatalf("out of order: %+v", got)
		}
	}
	if got[1].Status != transport.StatusLocal || got[2].Status != transport.StatusFlushed {
		t.Fatalf("completions %+v", got)
	}
}

// TestSetLimits: limits are checked, queued in order and applied: with
// a retry limit of 1 and a silent peer the message fails quickly with
// RETRY_EXCEEDED.
func TestSetLimits(t *testing.T) {
	a, b := newHost(t), newHost(t)
	if err := a.ep.SetLimits(1, 1, 1); !errors.Is(err, endpoint.ErrNoConn) {
		t.Fatalf("SetLimits on no connection: %v", err)
	}
	col := newCollector()
	connect(t, a, b, &memSink{}, &memSink{}, col.done, nil)
	if err := a.ep.SetLimits(1, 0, 1); !errors.Is(err, transport.ErrConfig) {
		t.Fatalf("SetLimits 0: %v", err)
	}
	if err := a.ep.SetLimits(1, 1, 1); err != nil {
		t.Fatal(err)
	}
	a.run() // b never runs
	start := time.Now()
	a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 10, Src: src(make([]byte, 10))})
	got := col.wait(t, 1, 5*time.Second)
	if got[0].Status != transport.StatusRetryExceeded {
		t.Fatalf("completion %+v", got[0])
	}
	// Limit 1 at RTO 1 ms gives up within a few ms; the default 7
	// doubles up to ~127 ms.
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("gave up after %v: limit not applied", d)
	}
}

// TestSendErrorIsolated: datagrams the kernel refuses for one peer (the
// broadcast address, without SO_BROADCAST) are counted and dropped; that
// connection fails after its retries, and another connection's traffic
// goes on.
func TestSendErrorIsolated(t *testing.T) {
	a, b := newHost(t), newHost(t)
	good := newCollector()
	connect(t, a, b, &memSink{}, &memSink{mem: make([]byte, 1<<16)}, good.done, nil)
	bad := newCollector()
	c, err := transport.NewConn(transport.Config{LocalConn: 7, RemoteConn: 7, RetryLimit: 2}, &memSink{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ep.Add(7, c, netip.MustParseAddrPort("255.255.255.255:9"), 1, bad.done); err != nil {
		t.Fatal(err)
	}
	a.run()
	b.run()
	for i := range 20 {
		a.ep.Submit(7, transport.Message{Op: wire.OpWrite, Len: 10, Src: src(make([]byte, 10)), Token: uint64(i)})
		a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: 10, Src: src(make([]byte, 10)), Token: uint64(i)})
	}
	checkInOrder(t, good.wait(t, 20, 5*time.Second), 20, transport.StatusOK)
	got := bad.wait(t, 20, 5*time.Second)
	if got[0].Status != transport.StatusRetryExceeded {
		t.Fatalf("bad peer: %+v", got[0])
	}
	if st := a.ep.Stats(); st.SendErrors == 0 {
		t.Fatalf("no send errors counted: %+v", st)
	}
}
