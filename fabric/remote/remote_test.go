package remote_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>9)
	}
}

// TestCrossHostOps: WRITE, WRITE_IMM, SEND (several, begun out of order
// ahead of their commits, one after an RNR), READ and both atomics from
// host a to host b land exactly and complete OK.
func TestCrossHostOps(t *testing.T) {
	a, b := pair(t, opts{})
	connect(t, a, b, 100, 200, 7, 7)
	w := newWaiter()

	// WRITE of 100 000 bytes: about a hundred packets at MTU 1024.
	const n = 100000
	views, src := buffer(t, n)
	fill(src, 1)
	req := request(a, b, 100, 200, fabric.OpWrite)
	req.RemoteAddr, req.Len, req.Local = 4096, n, views
	a.f.Post(req, w)
	if r := w.next(t, 10*time.Second); r.o != fabric.OutcomeOK || r.req != req {
		t.Fatalf("WRITE: %v", r.o)
	}
	b.dev.mu.Lock()
	if !bytes.Equal(b.dev.mem[4096:4096+n], src) {
		t.Fatal("WRITE: wrong bytes at the responder")
	}
	b.dev.mu.Unlock()

	// SENDs with no receive posted: RNR, retried until receives come.
	var sends []*fabric.Request
	var payloads [][]byte
	for i := range 3 {
		v, p := buffer(t, 3000+i*1000)
		fill(p, byte(10+i))
		r := request(a, b, 100, 200, fabric.OpSend)
		if i == 1 {
			r.Op, r.Imm = fabric.OpSendImm, 0xabcd
		}
		r.Len, r.Local = uint64(len(p)), v
		sends = append(sends, r)
		payloads = append(payloads, p)
		a.f.Post(r, w)
	}
	// WRITE_IMM takes a receive too, after the SENDs.
	wv, wp := buffer(t, 2000)
	fill(wp, 40)
	wimm := request(a, b, 100, 200, fabric.OpWriteImm)
	wimm.RemoteAddr, wimm.Len, wimm.Local, wimm.Imm = 200000, 2000, wv, 77
	a.f.Post(wimm, w)
	w.none(t, 30*time.Millisecond)
	for range 4 {
		b.dev.postRecv(8000)
	}
	for i := range 4 {
		r := w.next(t, 10*time.Second)
		want := wimm
		if i < 3 {
			want = sends[i]
		}
		if r.o != fabric.OutcomeOK || r.req != want {
			t.Fatalf("receive-consuming request %d: %v (req %v)", i, r.o, r.req.Op)
		}
	}
	b.dev.mu.Lock()
	for i, p := range payloads {
		if c := b.dev.cqes[i]; c.wqe != i || c.len != uint64(len(p)) || !bytes.Equal(b.dev.recvs[i][:len(p)], p) {
			t.Fatalf("SEND %d: cqe %+v, bytes equal %v", i, c, bytes.Equal(b.dev.recvs[i][:len(p)], p))
		}
	}
	if b.dev.maxAhead == 0 {
		t.Error("no SEND was begun ahead of an earlier one's commit (RecvAhead always 0)")
	}
	if c := b.dev.cqes[1]; c.op != fabric.OpSendImm || c.imm != 0xabcd {
		t.Fatalf("SEND_IMM cqe %+v", c)
	}
	if c := b.dev.cqes[3]; c.wqe != 3 || c.op != fabric.OpWriteImm || c.imm != 77 || !bytes.Equal(b.dev.mem[200000:202000], wp) {
		t.Fatalf("WRITE_IMM cqe %+v", c)
	}
	fill(b.dev.mem[300000:340000], 99)
	want := append([]byte(nil), b.dev.mem[300000:340000]...)
	binary.LittleEndian.PutUint64(b.dev.mem[512:], 1000)
	b.dev.mu.Unlock()

	// READ of 40 000 bytes into two views.
	rv, rp := buffer(t, 40000)
	read := request(a, b, 100, 200, fabric.OpRead)
	read.RemoteAddr, read.Len, read.Local = 300000, 40000, rv
	a.f.Post(read, w)
	if r := w.next(t, 10*time.Second); r.o != fabric.OutcomeOK || !bytes.Equal(rp, want) {
		t.Fatalf("READ: %v, bytes equal %v", r.o, bytes.Equal(rp, want))
	}
	// The responder hears that the response is done once the requester
	// has committed it (its next ACK).
	wait.For(t, "the READ's Finish", func() bool {
		b.dev.mu.Lock()
		defer b.dev.mu.Unlock()
		return b.dev.finished == 1
	})

	// Atomics on the word at 512 (1000): FETCH_ADD 5, CMP_SWAP 1005->7,
	// CMP_SWAP 1->9 (fails).
	atomic := func(op fabric.Op, cmp, swap uint64) uint64 {
		t.Helper()
		v, p := buffer(t, 8)
		r := request(a, b, 100, 200, op)
		r.RemoteAddr, r.Len, r.Local, r.Compare, r.SwapAdd = 512, 8, v, cmp, swap
		a.f.Post(r, w)
		if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
			t.Fatalf("%v: %v", op, res.o)
		}
		return binary.LittleEndian.Uint64(p)
	}
	if old := atomic(fabric.OpFetchAdd, 0, 5); old != 1000 {
		t.Fatalf("FETCH_ADD returned %d", old)
	}
	if old := atomic(fabric.OpCmpSwap, 1005, 7); old != 1005 {
		t.Fatalf("CMP_SWAP returned %d", old)
	}
	if old := atomic(fabric.OpCmpSwap, 1, 9); old != 7 {
		t.Fatalf("failing CMP_SWAP returned %d", old)
	}
	b.dev.mu.Lock()
	word := binary.LittleEndian.Uint64(b.dev.mem[512:])
	b.dev.mu.Unlock()
	if word != 7 {
		t.Fatalf("word is %d, want 7", word)
	}

	// A bad rkey: REMOTE_ACCESS, nothing written; the QP pair's
	// connection has failed after it, so later requests are flushed.
	bad := request(a, b, 100, 200, fabric.OpWrite)
	bv, _ := buffer(t, 100)
	bad.RKey, bad.Len, bad.Local = 1, 100, bv
	a.f.Post(bad, w)
	if r := w.next(t, 10*time.Second); r.o != fabric.OutcomeRemoteAccess {
		t.Fatalf("bad rkey: %v", r.o)
	}
	_, open, _, badRel := b.dev.snapshot()
	if open != 0 || badRel != 0 {
		t.Fatalf("responder: %d Incomings open, %d released twice", open, badRel)
	}
}

// TestManyInFlight: many WRITEs posted at once on two QP pairs, more
// than a connection takes at a time, all complete OK in posting order
// per QP.
func TestManyInFlight(t *testing.T) {
	a, b := pair(t, opts{})
	connect(t, a, b, 1, 2, 7, 7)
	connect(t, a, b, 3, 4, 7, 7)
	const msgs, size = 1500, 300
	ws := []waiter{newWaiter(), newWaiter()}
	var reqs [2][]*fabric.Request
	var payloads [2][][]byte
	for i := range msgs {
		for q := range 2 {
			v, p := buffer(t, size)
			fill(p, byte(i+q))
			r := request(a, b, uint32(1+2*q), uint32(2+2*q), fabric.OpWrite)
			r.RemoteAddr, r.Len, r.Local = uint64(q*msgs+i)*size, size, v
			reqs[q] = append(reqs[q], r)
			payloads[q] = append(payloads[q], p)
			a.f.Post(r, ws[q])
		}
	}
	for q := range 2 {
		for i := range msgs {
			r := ws[q].next(t, 10*time.Second)
			if r.o != fabric.OutcomeOK || r.req != reqs[q][i] {
				t.Fatalf("QP %d request %d: %v, in order %v", q, i, r.o, r.req == reqs[q][i])
			}
		}
	}
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	for q := range 2 {
		for i, r := range reqs[q] {
			if !bytes.Equal(b.dev.mem[r.RemoteAddr:r.RemoteAddr+size], payloads[q][i]) {
				t.Fatalf("QP %d WRITE %d: wrong bytes", q, i)
			}
		}
	}
}

// TestPostUnreachable: a request with no connection for its source QP,
// or whose destination is not the connected peer, completes
// UNREACHABLE inside Post.
func TestPostUnreachable(t *testing.T) {
	a, b := pair(t, opts{})
	w := newWaiter()
	r := request(a, b, 100, 200, fabric.OpWrite)
	a.f.Post(r, w)
	select {
	case res := <-w:
		if res.o != fabric.OutcomeUnreachable {
			t.Fatalf("before Connect: %v", res.o)
		}
	default:
		t.Fatal("Post before Connect did not complete at once")
	}
	connect(t, a, b, 100, 200, 7, 7)
	r = request(a, b, 100, 201, fabric.OpWrite) // another QP of b
	a.f.Post(r, w)
	if res := w.next(t, time.Second); res.o != fabric.OutcomeUnreachable {
		t.Fatalf("wrong destination: %v", res.o)
	}
	// Refused before they are queued: too long, too short a buffer, an
	// unaligned atomic.
	v, _ := buffer(t, 10)
	for _, c := range []struct {
		r    *fabric.Request
		want fabric.Outcome
	}{
		{&fabric.Request{Op: fabric.OpWrite, Len: wire.MaxMsgLen + 1}, fabric.OutcomeLocalError},
		{&fabric.Request{Op: fabric.OpWrite, Len: 11, Local: v}, fabric.OutcomeLocalError},
		{&fabric.Request{Op: fabric.OpRead, Len: 11, Local: v}, fabric.OutcomeLocalError},
		{&fabric.Request{Op: fabric.OpFetchAdd, Len: 8, RemoteAddr: 4, Local: v}, fabric.OutcomeInvalidRequest},
		{&fabric.Request{Op: 99}, fabric.OutcomeLocalError},
	} {
		c.r.Src, c.r.Dst = r.Src, fabric.Addr{GID: b.gid, QPN: 200}
		a.f.Post(c.r, w)
		if res := w.next(t, time.Second); res.o != c.want {
			t.Fatalf("%v of %d: %v, want %v", c.r.Op, c.r.Len, res.o, c.want)
		}
	}
}

// TestLocalPath: a destination on this host goes through fabric.Local:
// the responder's Respond, completed inside Post.
func TestLocalPath(t *testing.T) {
	a, _ := pair(t, opts{})
	d2 := newDev(t, 4096)
	g2 := gidOf("fd00:0:0:1::11")
	unreg, err := a.f.Register(g2, d2)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.f.Connect(fabric.Connection{Local: fabric.Addr{GID: a.gid, QPN: 1}, Remote: fabric.Addr{GID: g2, QPN: 2}, Tenant: tenant}); err != nil {
		t.Fatalf("Connect to a local peer: %v", err)
	}
	v, p := buffer(t, 100)
	fill(p, 3)
	w := newWaiter()
	a.f.Post(&fabric.Request{Op: fabric.OpWrite, Src: fabric.Addr{GID: a.gid, QPN: 1}, Dst: fabric.Addr{GID: g2, QPN: 2}, RKey: memKey, RemoteAddr: 10, Len: 100, Local: v}, w)
	select {
	case r := <-w:
		if r.o != fabric.OutcomeOK || !bytes.Equal(d2.mem[10:110], p) || d2.responds != 1 {
			t.Fatalf("local WRITE: %v", r.o)
		}
	default:
		t.Fatal("local Post did not complete at once")
	}
	if a.f.Stats().Connections != 0 {
		t.Fatal("a connection for a local peer")
	}
	unreg()
	// In the local prefix but registered by no one: unreachable, locally.
	a.f.Post(&fabric.Request{Op: fabric.OpWrite, Src: fabric.Addr{GID: a.gid, QPN: 1}, Dst: fabric.Addr{GID: g2, QPN: 2}}, w)
	if r := w.next(t, time.Second); r.o != fabric.OutcomeUnreachable {
		t.Fatalf("after unregister: %v", r.o)
	}
}

// plainResponder is a Responder that cannot stream.
type plainResponder struct{}

func (plainResponder) Respond(*fabric.Request) fabric.Outcome { return fabric.OutcomeOK }

// TestConnectErrors: every refusal of Connect, each changing nothing.
func TestConnectErrors(t *testing.T) {
	a, b := pair(t, opts{})
	plain := gidOf("fd00:0:0:1::12")
	if _, err := a.f.Register(plain, plainResponder{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.f.Register(a.gid, a.dev); !errors.Is(err, fabric.ErrGIDInUse) {
		t.Fatalf("second Register: %v", err)
	}
	base := connection(a, b, 1, 2, false, 7, 7)
	for _, c := range []struct {
		name string
		mod  func(*fabric.Connection)
		want error
	}{
		{"unregistered local GID", func(c *fabric.Connection) { c.Local.GID = gidOf("fd00:0:0:1::99") }, remote.ErrNotRegistered},
		{"no route", func(c *fabric.Connection) { c.Remote.GID = gidOf("fd00:0:0:3::1") }, remote.ErrNoRoute},
		{"not a stream responder", func(c *fabric.Connection) { c.Local.GID = plain }, remote.ErrNotStreaming},
	} {
		cc := base
		c.mod(&cc)
		if err := a.f.Connect(cc); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := a.f.Stats().Connections; n != 0 {
		t.Fatalf("%d connections after refusals", n)
	}
	if err := a.f.Connect(base); err != nil {
		t.Fatal(err)
	}
	if err := a.f.Connect(base); err != nil {
		t.Fatalf("Connect again: %v", err)
	}
	other := base
	other.Remote.QPN = 3
	if err := a.f.Connect(other); !errors.Is(err, remote.ErrConnected) {
		t.Fatalf("Connect to another peer: %v", err)
	}
	other = base
	other.Remote.GID = gidOf("fd00:0:0:1::12")
	if err := a.f.Connect(other); !errors.Is(err, remote.ErrConnected) {
		t.Fatalf("Connect to a local peer while connected: %v", err)
	}
	if n := a.f.Stats().Connections; n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestDisconnectFlushesDeadPeer: with the peer gone, posted requests
// wait for retransmissions; Disconnect completes them all FLUSHED, in
// order, before it returns, and at once.
func TestDisconnectFlushesDeadPeer(t *testing.T) {
	a, b := pair(t, opts{})
	connect(t, a, b, 100, 200, 7, 7)
	if err := b.f.Close(); err != nil {
		t.Fatal(err)
	}
	w := newWaiter()
	var reqs []*fabric.Request
	for range 20 {
		v, _ := buffer(t, 5000)
		r := request(a, b, 100, 200, fabric.OpWrite)
		r.Len, r.Local = 5000, v
		reqs = append(reqs, r)
		a.f.Post(r, w)
	}
	w.none(t, 20*time.Millisecond)
	start := time.Now()
	a.f.Disconnect(fabric.Addr{GID: a.gid, QPN: 100})
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Disconnect took %v", d)
	}
	for i, want := range reqs {
		select {
		case r := <-w:
			if r.o != fabric.OutcomeFlushed || r.req != want {
				t.Fatalf("request %d: %v (in order %v)", i, r.o, r.req == want)
			}
		default:
			t.Fatalf("request %d not completed when Disconnect returned", i)
		}
	}
	// Disconnected: later requests are unreachable.
	a.f.Post(request(a, b, 100, 200, fabric.OpWrite), w)
	if r := w.next(t, time.Second); r.o != fabric.OutcomeUnreachable {
		t.Fatalf("after Disconnect: %v", r.o)
	}
}

// TestPeerNeverConnects: b's QP never connects, so b drops a's packets;
// after the retry limit (retry_cnt 2) the request fails
// RETRY_EXCEEDED.
func TestPeerNeverConnects(t *testing.T) {
	a, b := pair(t, opts{})
	for _, send := range []bool{false, true} {
		if err := a.f.Connect(connection(a, b, 100, 200, send, 2, 7)); err != nil {
			t.Fatal(err)
		}
	}
	w := newWaiter()
	v, _ := buffer(t, 100)
	r := request(a, b, 100, 200, fabric.OpWrite)
	r.Len, r.Local = 100, v
	a.f.Post(r, w)
	if res := w.next(t, 5*time.Second); res.o != fabric.OutcomeRetryExceeded {
		t.Fatalf("outcome %v", res.o)
	}
	wait.For(t, "b to count packets for an unknown connection", func() bool { return b.f.Stats().UnknownConn > 0 })
}

// TestRNRExceeded: a SEND with no receive and rnr_retry 1 fails
// RNR_EXCEEDED.
func TestRNRExceeded(t *testing.T) {
	a, b := pair(t, opts{})
	connect(t, a, b, 100, 200, 7, 1)
	w := newWaiter()
	v, _ := buffer(t, 100)
	r := request(a, b, 100, 200, fabric.OpSend)
	r.Len, r.Local = 100, v
	a.f.Post(r, w)
	if res := w.next(t, 5*time.Second); res.o != fabric.OutcomeRNRExceeded {
		t.Fatalf("outcome %v", res.o)
	}
}

// forge sends one DATA packet to f from a socket of its own.
func forge(t *testing.T, to netip.AddrPort, h wire.Header, d wire.Data, payload []byte) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(wire.AppendData(nil, &h, &d, payload)); err != nil {
		t.Fatal(err)
	}
}

// TestForgedPackets: packets with the right connection id but the wrong
// token or tenant are dropped and counted, and reach no responder; one
// with the right identity is taken (its Incoming begun), and Disconnect
// releases it uncommitted.
func TestForgedPackets(t *testing.T) {
	a, b := pair(t, opts{})
	// Only b's side: a's packets would interfere with the forged MSN 0.
	if err := b.f.Connect(connection(b, a, 200, 100, false, 7, 7)); err != nil {
		t.Fatal(err)
	}
	src, dst := fabric.Addr{GID: a.gid, QPN: 100}, fabric.Addr{GID: b.gid, QPN: 200}
	id, token := remote.ConnIdentity(secret, tenant, src, dst, sqPSN(a, 100))
	d := wire.Data{Op: wire.OpWrite, MSN: 0, Offset: 0, MsgLen: 2000, RKey: memKey, RAddr: 0}
	payload := bytes.Repeat([]byte{0xee}, 1000)
	first := wire.Header{Flags: wire.FlagFirst, Tenant: tenant, Conn: id, Token: token, PSN: sqPSN(a, 100)}
	badToken, otherTenant := first, first
	badToken.Token ^= 1
	otherTenant.Tenant++
	forge(t, b.f.Addr(), badToken, d, payload)
	forge(t, b.f.Addr(), otherTenant, d, payload)
	wait.For(t, "two foreign packets", func() bool { return b.f.Stats().Foreign == 2 })
	if begins, _, _, _ := b.dev.snapshot(); begins != 0 {
		t.Fatalf("%d Begins for forged packets", begins)
	}
	// The right identity: half of a WRITE arrives and is begun.
	forge(t, b.f.Addr(), first, d, payload)
	wait.For(t, "the first half placed", func() bool {
		b.dev.mu.Lock()
		defer b.dev.mu.Unlock()
		return b.dev.open == 1 && bytes.Equal(b.dev.mem[:1000], payload)
	})
	b.f.Disconnect(dst)
	if _, open, released, bad := b.dev.snapshot(); open != 0 || released != 1 || bad != 0 {
		t.Fatalf("after Disconnect: %d open, %d released, %d twice", open, released, bad)
	}
	if st := b.f.Stats(); st.Foreign != 2 || st.Connections != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestUnregisterDisconnects: unregistering a GID ends the connections
// of QPs sending from it (their requests flushed); the responder is not
// called again.
func TestUnregisterDisconnects(t *testing.T) {
	a, b := pair(t, opts{})
	g := gidOf("fd00:0:0:2::21")
	d := newDev(t, 1<<16)
	unreg, err := b.f.Register(g, d)
	if err != nil {
		t.Fatal(err)
	}
	h := &host{f: b.f, dev: d, gid: g}
	connect(t, a, h, 1, 2, 7, 7)
	connect(t, h, a, 2, 1, 7, 7) // the same pair: nothing new
	w := newWaiter()
	v, _ := buffer(t, 100)
	r := request(a, h, 1, 2, fabric.OpWrite)
	r.Len, r.Local = 100, v
	a.f.Post(r, w)
	if res := w.next(t, 5*time.Second); res.o != fabric.OutcomeOK {
		t.Fatal(res.o)
	}
	// b's QP has a request waiting for a receive at a when unregistered.
	rs := request(h, a, 2, 1, fabric.OpSend)
	rs.Len, rs.Local = 100, v
	wb := newWaiter()
	b.f.Post(rs, wb)
	wb.none(t, 20*time.Millisecond)
	unreg()
	if res := wb.next(t, time.Second); res.o != fabric.OutcomeFlushed {
		t.Fatalf("b's SEND: %v", res.o)
	}
	if n := b.f.Stats().Connections; n != 0 {
		t.Fatalf("%d connections left", n)
	}
	begins, _, _, _ := d.snapshot()
	a.f.Post(request(a, h, 1, 2, fabric.OpWrite), w)
	a.f.Post(r, w)
	time.Sleep(20 * time.Millisecond)
	if n, _, _, _ := d.snapshot(); n != begins {
		t.Fatal("responder called after unregister")
	}
	if _, err := b.f.Register(g, d); err != nil {
		t.Fatalf("register again: %v", err)
	}
}

// TestPostNeverBlocks: with b's loop stuck inside its responder (as it
// is while a control change holds the device's gate), b's requesters,
// from many goroutines, still post without waiting; everything
// completes once the responder goes on.
func TestPostNeverBlocks(t *testing.T) {
	a, b := pair(t, opts{})
	connect(t, a, b, 100, 200, 7, 7)
	const qps, per = 8, 100
	for q := range uint32(qps) {
		connect(t, b, a, 10+q, 20+q, 7, 7)
	}
	b.dev.mu.Lock()
	b.dev.hold, b.dev.held = make(chan struct{}), make(chan struct{}, 1)
	b.dev.mu.Unlock()
	w := newWaiter()
	v, _ := buffer(t, 64)
	r := request(a, b, 100, 200, fabric.OpWrite)
	r.Len, r.Local = 64, v
	a.f.Post(r, w)
	select {
	case <-b.dev.held:
	case <-time.After(5 * time.Second):
		t.Fatal("b's responder never called")
	}
	wb := newWaiter()
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for q := range uint32(qps) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				v, _ := buffer(t, 64)
				r := request(b, a, 10+q, 20+q, fabric.OpWrite)
				r.RemoteAddr, r.Len, r.Local = uint64(q*per+uint32(i))*64, 64, v
				start := time.Now()
				b.f.Post(r, wb)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Post blocked while the loop was in the responder")
	}
	if d := time.Duration(slowest.Load()); d > 200*time.Millisecond {
		t.Fatalf("slowest Post took %v", d)
	}
	close(b.dev.hold)
	if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
		t.Fatal(res.o)
	}
	for range qps * per {
		if res := wb.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
			t.Fatal(res.o)
		}
	}
}

// TestRunAndClose: of two Runs one refuses at once and the other runs
// until Close, then returns nil; Close flushes what is in flight, is
// idempotent, and Run, Connect and Register after it fail.
func TestRunAndClose(t *testing.T) {
	_, b := pair(t, opts{})
	f, err := remote.New(t.Context(), remote.Config{
		Listen:    netip.MustParseAddrPort("127.0.0.1:0"),
		GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"),
		Peers:     []remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: b.f.Addr()}},
		Secret:    secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &host{f: f, dev: newDev(t, 1<<16), gid: gidOf("fd00:0:0:1::10")}
	if _, err := f.Register(a.gid, a.dev); err != nil {
		t.Fatal(err)
	}
	runs := make(chan error, 2)
	for range 2 {
		go func() { runs <- f.Run(t.Context()) }()
	}
	select {
	case err := <-runs:
		if err == nil {
			t.Fatal("second Run returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second Run did not refuse")
	}
	connect(t, a, b, 1, 2, 7, 7)
	b.f.Close()
	w := newWaiter()
	v, _ := buffer(t, 10)
	r := request(a, b, 1, 2, fabric.OpWrite)
	r.Len, r.Local = 10, v
	f.Post(r, w)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-w:
		if res.o != fabric.OutcomeFlushed {
			t.Fatal(res.o)
		}
	default:
		t.Fatal("request not flushed by Close")
	}
	if err := <-runs; err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := f.Run(t.Context()); !errors.Is(err, remote.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if err := f.Connect(connection(a, b, 1, 2, false, 7, 7)); !errors.Is(err, remote.ErrClosed) {
		t.Fatalf("Connect after Close: %v", err)
	}
	if _, err := f.Register(gidOf("fd00:0:0:1::55"), a.dev); !errors.Is(err, remote.ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
}

// TestGoBackN: the template reaches the connections (go-back-N
// recovery, small window) and traffic still flows.
func TestGoBackN(t *testing.T) {
	a, b := pair(t, opts{transport: transport.Config{Recovery: transport.GoBackN, Window: 8}})
	connect(t, a, b, 1, 2, 7, 7)
	w := newWaiter()
	v, p := buffer(t, 50000)
	fill(p, 9)
	r := request(a, b, 1, 2, fabric.OpWrite)
	r.Len, r.Local = 50000, v
	a.f.Post(r, w)
	if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
		t.Fatal(res.o)
	}
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	if !bytes.Equal(b.dev.mem[:50000], p) {
		t.Fatal("wrong bytes")
	}
}

// TestResponderRefusals: how the responder's answers reach the
// requester. Busy at Begin is a BUSY NAK, Retry a receiver-not-ready
// NAK (the request goes through once the responder takes it); a refusal at
// Begin, at Place or at Commit fails the request with the matching
// outcome; every Incoming begun is released once.
func TestResponderRefusals(t *testing.T) {
	for _, c := range []struct {
		name   string
		script func(d *dev)
		want   fabric.Outcome
	}{
		{"busy then ok", func(d *dev) { d.refuse, d.refuseN = fabric.OutcomeBusy, 3 }, fabric.OutcomeOK},
		{"retry then ok", func(d *dev) { d.refuse, d.refuseN = fabric.OutcomeRetry, 1 }, fabric.OutcomeOK},
		{"invalid at begin", func(d *dev) { d.refuse, d.refuseN = fabric.OutcomeInvalidRequest, 1 }, fabric.OutcomeInvalidRequest},
		{"unreachable at begin", func(d *dev) { d.refuse, d.refuseN = fabric.OutcomeUnreachable, 1 }, fabric.OutcomeInvalidRequest},
		{"remote op at begin", func(d *dev) { d.refuse, d.refuseN = fabric.OutcomeRemoteOp, 1 }, fabric.OutcomeRemoteOp},
		{"place fails", func(d *dev) { d.failPlace = true }, fabric.OutcomeRemoteOp},
		{"commit refuses access", func(d *dev) { d.commitOutcome = fabric.OutcomeRemoteAccess }, fabric.OutcomeRemoteAccess},
		{"commit busy", func(d *dev) { d.commitOutcome = fabric.OutcomeBusy }, fabric.OutcomeRemoteOp},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, opts{})
			connect(t, a, b, 1, 2, 7, 7)
			b.dev.mu.Lock()
			c.script(b.dev)
			b.dev.mu.Unlock()
			w := newWaiter()
			v, _ := buffer(t, 3000)
			r := request(a, b, 1, 2, fabric.OpWrite)
			r.Len, r.Local = 3000, v
			a.f.Post(r, w)
			if res := w.next(t, 5*time.Second); res.o != c.want {
				t.Fatalf("outcome %v, want %v", res.o, c.want)
			}
			b.f.Disconnect(fabric.Addr{GID: b.gid, QPN: 2})
			if _, open, _, bad := b.dev.snapshot(); open != 0 || bad != 0 {
				t.Fatalf("%d Incomings open, %d released twice", open, bad)
			}
		})
	}
}

// TestPacketsFitMTU: every datagram fits the host network's MTU with its
// IP and UDP headers, and fills it: the QP's path MTU (an RDMA attribute
// the guest sets) does not shrink the fabric's packets.
func TestPacketsFitMTU(t *testing.T) {
	for _, c := range []struct{ host, want int }{{1500, 1500}, {600, 600}, {9000, 9000}, {0, 1500}} {
		peer, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Fatal(err)
		}
		f, err := remote.New(t.Context(), remote.Config{
			Listen:    netip.MustParseAddrPort("127.0.0.1:0"),
			GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"),
			Peers:     []remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: peer.LocalAddr().(*net.UDPAddr).AddrPort()}},
			Secret:    secret,
			MTU:       c.host,
		})
		if err != nil {
			t.Fatal(err)
		}
		go f.Run(t.Context())
		d := newDev(t, 1)
		g := gidOf("fd00:0:0:1::1")
		if _, err := f.Register(g, d); err != nil {
			t.Fatal(err)
		}
		conn := fabric.Connection{Local: fabric.Addr{GID: g, QPN: 1}, Remote: fabric.Addr{GID: gidOf("fd00:0:0:2::1"), QPN: 1}, Tenant: 1, Send: true, RetryCnt: 7, RNRRetry: 7}
		if err := f.Connect(conn); err != nil {
			t.Fatal(err)
		}
		v, _ := buffer(t, 20000)
		f.Post(&fabric.Request{Op: fabric.OpWrite, Src: conn.Local, Dst: conn.Remote, Len: 20000, Local: v}, newWaiter())
		buf := make([]byte, 70000)
		largest := 0
		peer.SetReadDeadline(time.Now().Add(2 * time.Second))
		for range 10 {
			n, err := peer.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, n)
		}
		if largest+28 != c.want {
			t.Errorf("MTU %d: largest datagram %d bytes, %d with headers, want %d", c.host, largest, largest+28, c.want)
		}
		f.Close()
		peer.Close()
	}
}

// TestSendBegunAhead: the first SEND's first packet is turned away
// (busy) while the rest of both SENDs wait in b's socket (b's loop is
// held in that Begin): the second is begun ahead of the first, on the
// receive after the next (RecvAhead 1), and each lands in its own
// receive, committed in order.
func TestSendBegunAhead(t *testing.T) {
	a, b := pair(t, opts{})
	connect(t, a, b, 1, 2, 7, 7)
	b.dev.postRecv(5000)
	b.dev.postRecv(5000)
	hold := make(chan struct{})
	b.dev.mu.Lock()
	b.dev.refuse, b.dev.refuseN = fabric.OutcomeBusy, 1
	b.dev.hold, b.dev.held = hold, make(chan struct{}, 1)
	b.dev.mu.Unlock()
	w := newWaiter()
	var ps [][]byte
	for i := range 2 {
		v, p := buffer(t, 4000)
		fill(p, byte(20+i))
		r := request(a, b, 1, 2, fabric.OpSend)
		r.Len, r.Local = 4000, v
		ps = append(ps, p)
		a.f.Post(r, w)
	}
	select {
	case <-b.dev.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no Begin")
	}
	time.Sleep(20 * time.Millisecond) // both SENDs reach b's socket
	close(hold)
	for range 2 {
		if r := w.next(t, 5*time.Second); r.o != fabric.OutcomeOK {
			t.Fatal(r.o)
		}
	}
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	if b.dev.acceptedAhead == 0 {
		t.Fatalf("the second SEND was not begun ahead of the first: %d begins, max ahead %d", b.dev.begins, b.dev.maxAhead)
	}
	for i, p := range ps {
		if c := b.dev.cqes[i]; c.wqe != i || !bytes.Equal(b.dev.recvs[i][:4000], p) {
			t.Fatalf("SEND %d: cqe %+v, bytes equal %v", i, c, bytes.Equal(b.dev.recvs[i][:4000], p))
		}
	}
}
