package remote_test

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/transport/wire"
)

// tap forwards the datagrams sent to it to another address and keeps a
// copy of each: what was on the wire, to replay later.
type tap struct {
	c   *net.UDPConn
	to  *net.UDPAddr
	mu  sync.Mutex
	got [][]byte
}

func newTap(t *testing.T, to netip.AddrPort) *tap {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{c: c, to: net.UDPAddrFromAddrPort(to)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return // closed
			}
			tp.mu.Lock()
			tp.got = append(tp.got, bytes.Clone(buf[:n]))
			tp.mu.Unlock()
			c.WriteToUDP(buf[:n], tp.to)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return tp
}

func (tp *tap) addr() netip.AddrPort { return tp.c.LocalAddr().(*net.UDPAddr).AddrPort() }

// take returns the datagrams recorded so far and forgets them.
func (tp *tap) take() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	got := tp.got
	tp.got = nil
	return got
}

// first returns the first recorded packet of type typ (and, for DATA,
// op).
func first(t *testing.T, pkts [][]byte, typ wire.Type, op wire.Op) []byte {
	t.Helper()
	for _, b := range pkts {
		var p wire.Packet
		if wire.Parse(b, &p) == nil && p.Type == typ && (typ != wire.TypeData || p.Data.Op == op) {
			return b
		}
	}
	t.Fatalf("no %v packet among %d recorded", typ, len(pkts))
	return nil
}

// replay sends b to to from a socket of its own.
func replay(t *testing.T, to netip.AddrPort, b []byte) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestStaleIncarnation: a QP pair reset and connected again with other
// PSNs (IB's cure for stale packets) refuses the packets of its old
// incarnation still in the network: each is dropped and counted as
// foreign (its token is the old stream's), reaches no responder and
// changes nothing, and the new connection carries on. Connected again
// with the same PSNs, the pair has the old tokens and sequence numbers,
// so a stale packet that falls in its window is taken for its own: the
// old WRITE lands again, and the new connection's first WRITE, whose
// packet has the same PSN and MSN, is then taken for a duplicate of it
// and acknowledged without being placed. As on IB hardware; a verbs
// application picks a random sq_psn for every connection.
func TestStaleIncarnation(t *testing.T) {
	a := newHost(t, "fd00:0:0:1::/64", "fd00:0:0:1::10", opts{})
	b := newHost(t, "fd00:0:0:2::/64", "fd00:0:0:2::20", opts{})
	// Every datagram between them passes a tap, which records it.
	ab, ba := newTap(t, b.f.Addr()), newTap(t, a.f.Addr())
	if err := a.f.SetPeers([]remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: ab.addr()}}); err != nil {
		t.Fatal(err)
	}
	if err := b.f.SetPeers([]remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"), Addr: ba.addr()}}); err != nil {
		t.Fatal(err)
	}
	const qa, qb = 1, 2
	// incarnation connects the pair (RTR, then RTS) with sq_psn pa at a
	// and pb at b.
	incarnation := func(pa, pb uint32) {
		t.Helper()
		ca := connection(a, b, qa, qb, false, 7, 7)
		cb := connection(b, a, qb, qa, false, 7, 7)
		ca.RQPSN, cb.RQPSN = pb, pa
		for _, send := range []bool{false, true} {
			ca.Send, cb.Send = send, send
			if send {
				ca.SQPSN, cb.SQPSN = pa, pb
			}
			if err := a.f.Connect(ca); err != nil {
				t.Fatal(err)
			}
			if err := b.f.Connect(cb); err != nil {
				t.Fatal(err)
			}
		}
	}
	reset := func() {
		a.f.Disconnect(fabric.Addr{GID: a.gid, QPN: qa})
		b.f.Disconnect(fabric.Addr{GID: b.gid, QPN: qb})
	}
	w := newWaiter()
	// write WRITEs 1000 bytes of seed at offset off of b's memory from a.
	write := func(off uint64, seed byte) {
		t.Helper()
		v, src := buffer(t, 1000)
		fill(src, seed)
		r := request(a, b, qa, qb, fabric.OpWrite)
		r.Len, r.Local, r.RemoteAddr = 1000, v, off
		a.f.Post(r, w)
		if res := w.next(t, 5*time.Second); res.o != fabric.OutcomeOK {
			t.Fatalf("WRITE: %v", res.o)
		}
	}
	mem := func(off, n uint64) []byte {
		b.dev.mu.Lock()
		defer b.dev.mu.Unlock()
		return bytes.Clone(b.dev.mem[off : off+n])
	}
	want := func(seed byte) []byte {
		p := make([]byte, 1000)
		fill(p, seed)
		return p
	}

	// The old incarnation: one single-packet WRITE, recorded both ways.
	const oldA, oldB = 0x00f00d, 0xfffff0
	incarnation(oldA, oldB)
	write(0, 1) // its DATA went through ab, its ACK through ba
	staleData := first(t, ab.take(), wire.TypeData, wire.OpWrite)
	staleAck := first(t, ba.take(), wire.TypeAck, 0)
	reset()

	// A new incarnation with other PSNs refuses both.
	incarnation(0x000123, 0x654321)
	write(4096, 2)
	b.dev.mu.Lock()
	clear(b.dev.mem[:1000]) // what the stale WRITE would write again
	b.dev.mu.Unlock()
	before := func() (remote.Stats, remote.Stats, int) {
		begins, _, _, _ := b.dev.snapshot()
		return a.f.Stats(), b.f.Stats(), begins
	}
	// A retransmission of the new WRITE (its RTO can fire under load
	// before its ACK is in) may still be on its way to b: let it land
	// before the counts are taken.
	for quiet, last, deadline := 0, uint64(0), time.Now().Add(2*time.Second); quiet < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n := a.f.Stats().Received + b.f.Stats().Received; n == last {
			quiet++
		} else {
			quiet, last = 0, n
		}
	}
	sa0, sb0, begins0 := before()
	replay(t, b.f.Addr(), staleData)
	replay(t, a.f.Addr(), staleAck)
	wait.For(t, "both stale packets refused", func() bool { return a.f.Stats().Foreign == sa0.Foreign+1 && b.f.Stats().Foreign == sb0.Foreign+1 })
	sa1, sb1, begins1 := before()
	if begins1 != begins0 || !bytes.Equal(mem(0, 1000), make([]byte, 1000)) {
		t.Fatalf("the stale WRITE reached the responder: %d Begins, was %d", begins1, begins0)
	}
	for _, c := range []struct {
		who      string
		now, was remote.Stats
	}{{"a", sa1, sa0}, {"b", sb1, sb0}} {
		if c.now.Refused != c.was.Refused+1 || c.now.DataReceived != c.was.DataReceived || c.now.BytesPlaced != c.was.BytesPlaced ||
			c.now.Duplicates != c.was.Duplicates || c.now.Connections != 1 {
			t.Fatalf("%s: stats %+v after the stale packet, were %+v", c.who, c.now, c.was)
		}
	}
	// The connection carries on.
	write(8192, 3)
	if !bytes.Equal(mem(4096, 1000), want(2)) || !bytes.Equal(mem(8192, 1000), want(3)) {
		t.Fatal("the new incarnation's WRITEs did not land")
	}
	reset()

	// The same PSNs again: the stale WRITE is the new connection's first
	// message, and lands again.
	incarnation(oldA, oldB)
	sb0 = b.f.Stats()
	replay(t, b.f.Addr(), staleData)
	wait.For(t, "the stale WRITE taken", func() bool { return bytes.Equal(mem(0, 1000), want(1)) })
	if st := b.f.Stats(); st.Foreign != sb0.Foreign || st.DataReceived != sb0.DataReceived+1 {
		t.Fatalf("stats %+v after the stale packet, were %+v", st, sb0)
	}
	// The new first WRITE has the stale one's PSN and MSN: a duplicate
	// to b, acknowledged and never placed.
	write(12288, 4)
	// b's ACK of the stale packet can reach a after a sent its WRITE and
	// complete it while that WRITE is still on its way to b.
	wait.For(t, "the new first WRITE taken for a duplicate", func() bool { return b.f.Stats().Duplicates > sb0.Duplicates })
	if !bytes.Equal(mem(12288, 1000), make([]byte, 1000)) {
		t.Fatal("the new incarnation's first WRITE was placed")
	}
}
