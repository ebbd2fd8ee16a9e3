package transport_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/udp"
)

// TestOverUDPSockets runs the same core over real UDP sockets (loopback,
// two paths each, batched I/O): every message of both sides completes
// exactly once with the right bytes at the peer. The driver here is the
// simplest one: one goroutine turns both sides' crank.
func TestOverUDPSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var socks [2]*udp.Conn
	for i := range socks {
		c, err := udp.Listen(ctx, udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Paths: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		socks[i] = c
	}
	drive(ctx, t, socks, 200)
}

// TestOverNamespaces runs the core between two network namespaces joined
// by a veth with 2% loss each way (internal/netlab): the RDMA semantics
// hold over a real lossy link.
func TestOverNamespaces(t *testing.T) {
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI runs as root with namespaces: %v", err)
		}
		t.Skipf("network namespaces unavailable: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bed, err := netlab.TwoHost(ctx, netlab.Options{Prefix: "vstr-tp", MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	var socks [2]*udp.Conn
	for i, h := range bed.Hosts() {
		err := h.Do(func() error {
			c, err := udp.Listen(ctx, udp.Config{Addr: netip.AddrPortFrom(h.Addr(), 4791), Paths: 2})
			socks[i] = c
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer socks[i].Close()
	}
	// Loss starts after the hosts have found each other (ARP).
	warm(t, socks)
	for _, h := range bed.Hosts() {
		if err := bed.SetLoss(h, 0.02); err != nil {
			t.Fatal(err)
		}
	}
	drive(ctx, t, socks, 150)
}

// warm exchanges a datagram each way so neighbours are resolved.
func warm(t *testing.T, socks [2]*udp.Conn) {
	t.Helper()
	for i := range socks {
		msg := []udp.Message{{Buf: []byte("hi"), N: 2, Addr: socks[1-i].LocalAddr(0)}}
		if _, err := socks[i].WriteBatch(msg); err != nil {
			t.Fatal(err)
		}
		in := []udp.Message{{Buf: make([]byte, 64)}}
		socks[1-i].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := socks[1-i].ReadBatch(in); err != nil {
			t.Fatal(err)
		}
	}
}

// drive runs two connections over the sockets, each posting n random
// messages, until every message completed, and checks them all.
func drive(ctx context.Context, t *testing.T, socks [2]*udp.Conn, n int) {
	t.Helper()
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1392, RTOMin: time.Millisecond, RTOInit: 2 * time.Millisecond})
	a.posts, b.posts = n, n
	sides := [2]*side{a, b}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	rng := rand.New(rand.NewPCG(9, 9))
	msgs := make([]udp.Message, 32)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 2048)
	}
	out := make([]udp.Message, 0, 32)
	bufs := make([][]byte, 32)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	for !(a.finished() && b.finished()) {
		if ctx.Err() != nil {
			t.Fatalf("hang: a %d/%d, b %d/%d (a %+v)", a.done, a.posts, b.done, b.posts, a.ep.c.Stats())
		}
		for i, s := range sides {
			peer := socks[1-i].LocalAddr(0)
			// Send what the connection has, batched.
			out = out[:0]
			for len(out) < cap(out) {
				pkt, path, ok := s.ep.c.Transmit(now(), bufs[len(out)])
				if !ok {
					break
				}
				out = append(out, udp.Message{Buf: pkt, N: len(pkt), Addr: peer, Path: int(path) % 2})
			}
			for sent := 0; sent < len(out); {
				n, err := socks[i].WriteBatch(out[sent:])
				if err != nil {
					t.Fatal(err)
				}
				sent += n
			}
			// Receive what arrived, briefly.
			socks[i].SetReadDeadline(time.Now().Add(50 * time.Microsecond))
			for k := range msgs {
				msgs[k].N = 0
			}
			n, err := socks[i].ReadBatch(msgs)
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			for _, m := range msgs[:n] {
				s.ep.Receive(now(), m.Buf[:m.N])
			}
			if at, ok := s.ep.c.Timeout(); ok && at <= now() {
				s.ep.c.HandleTimeout(now())
			}
			s.collect(t)
			for s.outstanding() < maxInMsgs && int(s.nextMSN) < s.posts {
				s.post(t, rng, allOps, 30000)
			}
		}
	}
	for i, s := range sides {
		if s.statuses[transport.StatusOK] != s.posts || s.ep.badWire != 0 || s.ep.dropped != 0 || s.sink.failed {
			t.Errorf("side %d: %v, %d unparsable, %d dropped", i, s.statuses, s.ep.badWire, s.ep.dropped)
		}
		if s.peerCounter() != s.adds {
			t.Errorf("side %d: %d FETCH_ADDs, counter %d", i, s.adds, s.peerCounter())
		}
	}
	t.Logf("%v; a %+v", time.Since(start), a.ep.c.Stats())
}
