package endpoint

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// nopSink takes every message.
type nopSink struct{}

func (nopSink) Begin(*transport.Inbound) (wire.NAK, uint8)    { return wire.NAKNone, 0 }
func (nopSink) Place(*transport.Inbound, uint64, []byte) bool { return true }
func (nopSink) Commit(*transport.Inbound) wire.NAK            { return wire.NAKNone }

type bytesSrc []byte

func (s bytesSrc) ReadAt(p []byte, off uint64) bool { copy(p, s[off:]); return true }

func listenLo(t *testing.T) *udp.Conn {
	t.Helper()
	s, err := udp.Listen(context.Background(), udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// runIdle starts e's loop and waits until it sleeps on a deadline of its
// own (armed), returning a stop function.
func runIdle(t *testing.T, e *Endpoint) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	stop := func() { cancel(); <-done }
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.smu.Lock()
		armed := e.armed
		e.smu.Unlock()
		if armed > 0 {
			return stop
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatal("the loop never armed its deadline")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInlineSendBringsTimerForward: the loop sleeps up to maxIdle when
// no timer is due; a message sent inline starts its connection's RTO, so
// the inline send moves the loop's deadline to it (else a lost packet
// would wait for the idle deadline, not the RTO).
func TestInlineSendBringsTimerForward(t *testing.T) {
	sock, peer := listenLo(t), listenLo(t) // nobody answers at peer
	e := New(sock, nil)
	c, err := transport.NewConn(transport.Config{Tenant: 1, LocalConn: 1, LocalToken: 11, RemoteConn: 2, RemoteToken: 22,
		MaxPayload: 1024, RTOInit: 300 * time.Microsecond, RTOMin: 300 * time.Microsecond}, nopSink{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Add(1, c, peer.LocalAddr(0), 1, nil); err != nil {
		t.Fatal(err)
	}
	stop := runIdle(t, e)
	defer stop()
	time.Sleep(2 * time.Millisecond) // the loop is asleep on its idle deadline
	before := e.Now()
	if err := e.Submit(1, transport.Message{Op: wire.OpWrite, Len: 8, Src: bytesSrc(make([]byte, 8))}); err != nil {
		t.Fatal(err)
	}
	// Counted apart from the loop's sends: by the time we look, a loaded
	// machine may have let the 300 µs RTO fire and the loop resend.
	if n := e.xsent.Load(); n != 1 {
		t.Fatalf("%d datagrams sent inline, want 1", n)
	}
	e.smu.Lock()
	armed := e.armed
	e.smu.Unlock()
	// Unless the RTO has already fired and the loop re-armed for the
	// backed-off one (a loaded machine, as above): then the loop did wake
	// for the send, which is the point.
	if st, _ := e.ConnStats(1); st.Timeouts == 0 {
		if limit := before + int64(time.Millisecond); armed > limit {
			t.Fatalf("loop deadline %v after the send, want within 1 ms (the RTO is 300 µs)", time.Duration(armed-before))
		}
	}
	// And the loop does wake for it: the RTO fires, long before maxIdle.
	deadline := time.Now().Add(maxIdle / 2)
	for {
		if st, _ := e.ConnStats(1); st.Timeouts > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no timeout within %v of an inline send with a 300 µs RTO", maxIdle/2)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestLoopSendsInlineLeftovers: datagrams an inline send could not write
// at once (the socket would have made it wait) are the loop's: it sends
// them, and inline sending resumes after.
func TestLoopSendsInlineLeftovers(t *testing.T) {
	sock, peer := listenLo(t), listenLo(t)
	e := New(sock, nil)
	// Two datagrams left by an inline send that wrote one of three.
	e.xmu.Lock()
	for i := range 3 {
		copy(e.xbuf[i], "leftover")
		e.xout = append(e.xout, udp.Message{Buf: e.xbuf[i], N: 8, Addr: peer.LocalAddr(0)})
	}
	e.xleft = 1
	e.xmu.Unlock()
	stop := runIdle(t, e)
	defer stop()
	msgs := []udp.Message{{Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}}
	got := 0
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	for got < 2 {
		n, err := peer.ReadBatch(msgs[got:])
		if err != nil {
			t.Fatalf("the peer got %d of the 2 leftover datagrams: %v", got, err)
		}
		got += n
	}
	if st := e.Stats(); st.Sent != 2 {
		t.Fatalf("Sent %d, want the 2 leftovers", st.Sent)
	}
	e.xmu.Lock()
	left := len(e.xout)
	e.xmu.Unlock()
	if left != 0 {
		t.Fatalf("%d datagrams still held after the loop's send", left)
	}
}
