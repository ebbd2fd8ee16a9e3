package engine_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// streamFabric is a fabric the way the cross-host transport drives the
// engine: Post only queues; one loop goroutine delivers each request
// through the destination's StreamResponder (Begin, then the payload in
// 1 KiB pieces in shuffled order, Commit, ReadAt for a READ, Release)
// and completes the requester. It is a fabric.Connector and records the
// calls.
type streamFabric struct {
	t     testing.TB
	piece int

	mu      sync.Mutex
	peers   map[abi.GID]fabric.StreamResponder
	queue   []streamJob
	live    map[fabric.Addr]bool // connected local QPs
	conns   []fabric.Connection  // every Connect that succeeded, in order
	discs   []fabric.Addr        // every Disconnect, in order
	connErr error                // the next Connect fails with it
	paused  bool                 // the loop delivers nothing
	// lag is how long Disconnect takes after it has completed the
	// flushed requests: time for the requester's engine to see them.
	lag time.Duration

	force     atomic.Int32 // >= 0: complete every Post with this outcome at once
	delivered atomic.Int64 // requests that went through Begin

	// deliver is held by the loop while it handles a request, so that
	// Disconnect and unregister can wait out a call in progress.
	deliver sync.Mutex
	rng     *rand.Rand // loop goroutine only
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type streamJob struct {
	req *fabric.Request
	c   fabric.Completer
}

var (
	_ fabric.Fabric    = (*streamFabric)(nil)
	_ fabric.Connector = (*streamFabric)(nil)
)

// newStreamFabric starts the fabric's loop; it stops when the test ends,
// after the guests created later (cleanups run last in, first out).
func newStreamFabric(t testing.TB) *streamFabric {
	f := &streamFabric{t: t, piece: 1024, peers: map[abi.GID]fabric.StreamResponder{}, live: map[fabric.Addr]bool{},
		rng: rand.New(rand.NewPCG(1, 2)), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	f.force.Store(-1)
	go f.loop()
	t.Cleanup(func() {
		close(f.stop)
		<-f.done
	})
	return f
}

func (f *streamFabric) Register(gid abi.GID, r fabric.Responder) (func(), error) {
	sr, ok := r.(fabric.StreamResponder)
	if !ok {
		return nil, fmt.Errorf("%T is not a StreamResponder", r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers[gid] != nil {
		return nil, fabric.ErrGIDInUse
	}
	f.peers[gid] = sr
	return func() {
		f.deliver.Lock()
		defer f.deliver.Unlock()
		f.mu.Lock()
		delete(f.peers, gid)
		f.mu.Unlock()
	}, nil
}

func (f *streamFabric) Post(req *fabric.Request, c fabric.Completer) {
	if o := f.force.Load(); o >= 0 {
		c.Complete(req, fabric.Outcome(o))
		return
	}
	f.mu.Lock()
	if !f.live[req.Src] {
		f.mu.Unlock()
		f.t.Errorf("post from %v, which is not connected", req.Src)
		c.Complete(req, fabric.OutcomeUnreachable)
		return
	}
	f.queue = append(f.queue, streamJob{req, c})
	f.mu.Unlock()
	f.kick()
}

func (f *streamFabric) kick() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *streamFabric) Connect(c fabric.Connection) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.connErr; err != nil {
		f.connErr = nil
		return err
	}
	f.conns = append(f.conns, c)
	f.live[c.Local] = true
	return nil
}

// Disconnect waits for a delivery in progress, then completes every
// queued request of local with OutcomeFlushed.
func (f *streamFabric) Disconnect(local fabric.Addr) {
	f.deliver.Lock()
	defer f.deliver.Unlock()
	f.mu.Lock()
	f.discs = append(f.discs, local)
	delete(f.live, local)
	var flushed []streamJob
	keep := f.queue[:0]
	for _, j := range f.queue {
		if j.req.Src == local {
			flushed = append(flushed, j)
		} else {
			keep = append(keep, j)
		}
	}
	f.queue = keep
	f.mu.Unlock()
	for _, j := range flushed {
		j.c.Complete(j.req, fabric.OutcomeFlushed)
	}
	f.mu.Lock()
	lag := f.lag
	f.mu.Unlock()
	time.Sleep(lag)
}

func (f *streamFabric) setPaused(p bool) {
	f.mu.Lock()
	f.paused = p
	f.mu.Unlock()
	f.kick()
}

func (f *streamFabric) queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

func (f *streamFabric) calls() ([]fabric.Connection, []fabric.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fabric.Connection(nil), f.conns...), append([]fabric.Addr(nil), f.discs...)
}

func (f *streamFabric) loop() {
	defer close(f.done)
	for {
		select {
		case <-f.stop:
			return
		case <-f.wake:
		}
		for f.next() {
		}
	}
}

// next delivers one queued request, if any.
func (f *streamFabric) next() bool {
	f.deliver.Lock()
	defer f.deliver.Unlock()
	f.mu.Lock()
	if f.paused || len(f.queue) == 0 {
		f.mu.Unlock()
		return false
	}
	j := f.queue[0]
	f.queue = f.queue[1:]
	r := f.peers[j.req.Dst.GID]
	f.mu.Unlock()
	o := fabric.OutcomeUnreachable
	if r != nil {
		o = f.handle(r, j.req)
	}
	j.c.Complete(j.req, o)
	return true
}

// pieces returns the [off, end) pieces of an n-byte message in shuffled
// order.
func (f *streamFabric) pieces(n uint64) [][2]uint64 {
	var ps [][2]uint64
	for off := uint64(0); off < n; off += uint64(f.piece) {
		ps = append(ps, [2]uint64{off, min(off+uint64(f.piece), n)})
	}
	f.rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

// handle carries req through r as the transport would, each step inside
// the data path on its own (Enter, which waits for a control change, as
// the loop that drives one device only may), so control changes can
// come between the steps.
func (f *streamFabric) handle(r fabric.StreamResponder, req *fabric.Request) fabric.Outcome {
	f.delivered.Add(1)
	wire := *req // what reaches the other host: no local memory
	wire.Local, wire.RecvAhead = nil, 0
	var in fabric.Incoming
	var o fabric.Outcome
	inside(r, func() { in, o = r.Begin(&wire) })
	if o != fabric.OutcomeOK {
		if in != nil {
			f.t.Errorf("Begin refused with %v but returned an Incoming", o)
		}
		req.RNRTimer, req.HasRNRTimer = wire.RNRTimer, wire.HasRNRTimer
		return o
	}
	switch req.Op {
	case fabric.OpWrite, fabric.OpWriteImm, fabric.OpSend, fabric.OpSendImm:
		payload := gatherViews(req.Local)
		for _, p := range f.pieces(req.Len) {
			var ok bool
			inside(r, func() { ok = in.Place(p[0], payload[p[0]:p[1]]) })
			if !ok {
				inside(r, in.Release)
				return fabric.OutcomeRemoteOp
			}
		}
	}
	inside(r, func() { o = in.Commit() })
	if o != fabric.OutcomeOK {
		inside(r, in.Release)
		return o
	}
	value := in.Value()
	// Release before the response is read: a READ's ReadAt must stay
	// valid after it.
	inside(r, in.Release)
	switch req.Op {
	case fabric.OpRead:
		buf := make([]byte, req.Len)
		for _, p := range f.pieces(req.Len) {
			var ok bool
			inside(r, func() { ok = in.ReadAt(buf[p[0]:p[1]], p[0]) })
			if !ok {
				return fabric.OutcomeRemoteOp
			}
		}
		scatterViews(req.Local, buf)
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], value)
		scatterViews(req.Local, b[:])
	}
	return fabric.OutcomeOK
}

// entered is r with every call of Begin and of its Incomings made
// inside r's data path on its own, as a loop that drives one device
// would: control changes may come between the calls.
func entered(r fabric.StreamResponder) enteredResponder { return enteredResponder{r} }

type enteredResponder struct{ r fabric.StreamResponder }

func (g enteredResponder) Begin(req *fabric.Request) (fabric.Incoming, fabric.Outcome) {
	var in fabric.Incoming
	var o fabric.Outcome
	inside(g.r, func() { in, o = g.r.Begin(req) })
	if in == nil {
		return nil, o
	}
	return enteredIncoming{in, g.r}, o
}

type enteredIncoming struct {
	in fabric.Incoming
	r  fabric.StreamResponder
}

func (x enteredIncoming) Place(off uint64, b []byte) (ok bool) {
	inside(x.r, func() { ok = x.in.Place(off, b) })
	return ok
}

func (x enteredIncoming) Commit() (o fabric.Outcome) {
	inside(x.r, func() { o = x.in.Commit() })
	return o
}

func (x enteredIncoming) Value() uint64 { return x.in.Value() }

func (x enteredIncoming) ReadAt(p []byte, off uint64) (ok bool) {
	inside(x.r, func() { ok = x.in.ReadAt(p, off) })
	return ok
}

func (x enteredIncoming) Release() { inside(x.r, x.in.Release) }

// Finish is called by the transport outside the data path.
func (x enteredIncoming) Finish() { x.in.Finish() }

// inside runs fn in r's data path.
func inside(r fabric.StreamResponder, fn func()) {
	r.Enter()
	defer r.Exit()
	fn()
}

func gatherViews(vs []guestmem.View) []byte {
	var b []byte
	for _, v := range vs {
		b = append(b, v.Bytes()...)
	}
	return b
}

func scatterViews(vs []guestmem.View, b []byte) {
	for _, v := range vs {
		b = b[v.CopyIn(0, b):]
	}
}

// streamPair is two guests on a streamFabric with one connected QP each.
type streamPair struct {
	f              *streamFabric
	a, b           *enginetest.Guest
	ca, cb         *enginetest.CQ
	qa, qb         *enginetest.QP
	ringsA, ringsB int // chunks the queues' rings pin
}

func newStreamPair(t *testing.T, conn enginetest.ConnOpts) *streamPair {
	t.Helper()
	p := &streamPair{f: newStreamFabric(t)}
	p.a = enginetest.NewGuest(t, p.f, "a", enginetest.Options{RAM: 32 << 20, Tenant: 7})
	p.b = enginetest.NewGuest(t, p.f, "b", enginetest.Options{RAM: 32 << 20, Tenant: 7})
	p.ca, p.cb = p.a.CreateCQ(64), p.b.CreateCQ(64)
	p.qa, p.qb = p.a.CreateQP(pd, p.ca, p.ca, enginetest.QPOpts{}), p.b.CreateQP(pd, p.cb, p.cb, enginetest.QPOpts{})
	enginetest.Connect(p.qa, p.qb, conn)
	p.ringsA, p.ringsB = p.a.Pins.Held(), p.b.Pins.Held()
	// Buffers from here on start in chunks of their own, so that their
	// pins show apart from the rings'.
	p.a.Alloc(pvdma.ChunkSize, pvdma.ChunkSize)
	p.b.Alloc(pvdma.ChunkSize, pvdma.ChunkSize)
	return p
}

// checkPins fails unless only the rings' chunks are held.
func (p *streamPair) checkPins(t *testing.T, when string) {
	t.Helper()
	if ha, hb := p.a.Pins.Held(), p.b.Pins.Held(); ha != p.ringsA || hb != p.ringsB {
		t.Fatalf("%s: %d/%d chunks held, want the rings' %d/%d", when, ha, hb, p.ringsA, p.ringsB)
	}
}

// req is a request from qa to qb, as Begin sees it.
func (p *streamPair) req(op fabric.Op, n uint64) *fabric.Request {
	return &fabric.Request{Op: op, Len: n, Src: fabric.Addr{GID: p.a.GID, QPN: p.qa.QPN}, Dst: fabric.Addr{GID: p.b.GID, QPN: p.qb.QPN}}
}

// TestStreamedOpsLand: every operation carried by a streaming fabric
// (payload in shuffled 1 KiB pieces from the fabric's goroutine) lands
// exactly as over the local fabric, and every pin is let go afterwards.
func TestStreamedOpsLand(t *testing.T) {
	p := newStreamPair(t, enginetest.DefaultConn)
	src := p.a.NewBuf(pd, abi.AccessLocalWrite, 16384)
	dst := p.b.NewBuf(pd, abi.AccessAll, 16384)
	fill(src.Bytes(), 5)

	// WRITE, gathered from two SGEs, at an offset.
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA + 100, RKey: dst.Key},
		[]abi.SGE{src.SGE(0, 3000), src.SGE(4000, 7000)}, nil)
	c := p.ca.Wait()
	expect(t, c, 1, abi.WCSuccess, abi.WCRDMAWrite)
	if c.ByteLen != 10000 {
		t.Fatalf("byte_len %d", c.ByteLen)
	}
	want := append(append([]byte{}, src.Bytes()[:3000]...), src.Bytes()[4000:11000]...)
	if !bytes.Equal(dst.Bytes()[100:10100], want) || dst.Bytes()[99] != 0 || dst.Bytes()[10100] != 0 {
		t.Fatal("WRITE: bytes differ")
	}
	if _, ok := p.cb.Poll(); ok {
		t.Fatal("a plain WRITE completed at the responder")
	}
	if s := p.b.Eng.Stats(); s.BytesReceived != 10000 {
		t.Fatalf("responder stats %+v", s)
	}
	p.checkPins(t, "after WRITE")

	// WRITE_IMM consumes a receive without using its buffers.
	clear(dst.Bytes())
	p.qb.PostRecv(900)
	p.qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMAWriteWithImm, Flags: abi.SendSignaled, Imm: 0xabcd, RemoteAddr: dst.GPA, RKey: dst.Key},
		[]abi.SGE{src.SGE(0, 5000)}, nil)
	expect(t, p.ca.Wait(), 2, abi.WCSuccess, abi.WCRDMAWrite)
	r := p.cb.Wait()
	expect(t, r, 900, abi.WCSuccess, abi.WCRecvRDMAWithImm)
	if r.Imm != 0xabcd || r.Flags&abi.WCWithImm == 0 || r.ByteLen != 5000 || r.SrcQP != p.qa.QPN || r.QPN != p.qb.QPN {
		t.Fatalf("recv cqe %+v", r)
	}
	if !bytes.Equal(dst.Bytes()[:5000], src.Bytes()[:5000]) {
		t.Fatal("WRITE_IMM: bytes differ")
	}

	// SEND scattered over two receive SGEs; SEND_IMM.
	clear(dst.Bytes())
	p.qb.PostRecv(901, dst.SGE(0, 2500), dst.SGE(8000, 4000))
	p.qa.PostSend(abi.SendWQE{WRID: 3, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 6000)}, nil)
	expect(t, p.ca.Wait(), 3, abi.WCSuccess, abi.WCSend)
	r = p.cb.Wait()
	expect(t, r, 901, abi.WCSuccess, abi.WCRecv)
	if r.ByteLen != 6000 || r.Flags&abi.WCWithImm != 0 {
		t.Fatalf("recv cqe %+v", r)
	}
	if !bytes.Equal(dst.Bytes()[:2500], src.Bytes()[:2500]) || !bytes.Equal(dst.Bytes()[8000:11500], src.Bytes()[2500:6000]) || dst.Bytes()[11500] != 0 {
		t.Fatal("SEND: bytes differ")
	}
	p.qb.PostRecv(902, dst.SGE(12000, 100))
	p.qa.PostSend(abi.SendWQE{WRID: 4, Opcode: abi.WRSendWithImm, Flags: abi.SendSignaled, Imm: 77}, nil, []byte("inline hello"))
	expect(t, p.ca.Wait(), 4, abi.WCSuccess, abi.WCSend)
	r = p.cb.Wait()
	expect(t, r, 902, abi.WCSuccess, abi.WCRecv)
	if r.Imm != 77 || r.Flags&abi.WCWithImm == 0 || r.ByteLen != 12 || string(dst.Bytes()[12000:12012]) != "inline hello" {
		t.Fatalf("SEND_IMM: cqe %+v, bytes %q", r, dst.Bytes()[12000:12012])
	}

	// READ into two SGEs.
	fill(dst.Bytes(), 42)
	local := p.a.NewBuf(pd, abi.AccessLocalWrite, 10000)
	p.qa.PostSend(abi.SendWQE{WRID: 5, Opcode: abi.WRRDMARead, Flags: abi.SendSignaled, RemoteAddr: dst.GPA + 1, RKey: dst.Key},
		[]abi.SGE{local.SGE(0, 5000), local.SGE(6000, 4000)}, nil)
	c = p.ca.Wait()
	expect(t, c, 5, abi.WCSuccess, abi.WCRDMARead)
	if c.ByteLen != 9000 {
		t.Fatalf("byte_len %d", c.ByteLen)
	}
	if !bytes.Equal(local.Bytes()[:5000], dst.Bytes()[1:5001]) || !bytes.Equal(local.Bytes()[6000:], dst.Bytes()[5001:9001]) {
		t.Fatal("READ: bytes differ")
	}

	// Atomics, exact: a CMP_SWAP that matches, one that does not, a
	// FETCH_ADD.
	word := dst.GPA + 4096
	binary.LittleEndian.PutUint64(p.b.Bytes(word, 8), 5)
	for i, c := range []struct {
		op                abi.WROpcode
		compareAdd, swap  uint64
		wantOld, wantWord uint64
	}{
		{abi.WRAtomicCmpSwap, 5, 9, 5, 9},
		{abi.WRAtomicCmpSwap, 5, 11, 9, 9},
		{abi.WRAtomicFetchAdd, 1 << 40, 0, 9, 9 + 1<<40},
	} {
		wrid := uint64(10 + i)
		p.qa.PostSend(abi.SendWQE{WRID: wrid, Opcode: c.op, Flags: abi.SendSignaled, RemoteAddr: word, RKey: dst.Key, CompareAdd: c.compareAdd, Swap: c.swap},
			[]abi.SGE{local.SGE(64, 8)}, nil)
		expect(t, p.ca.Wait(), wrid, abi.WCSuccess, abi.WCOpcodeFor(c.op))
		if old, now := p.a.U64(local.GPA+64), p.b.U64(word); old != c.wantOld || now != c.wantWord {
			t.Fatalf("%v: returned %#x, word %#x; want %#x, %#x", c.op, old, now, c.wantOld, c.wantWord)
		}
	}
	if n := p.f.delivered.Load(); n != 8 {
		t.Fatalf("%d requests went through Begin, want 8", n)
	}
	p.checkPins(t, "at the end")
}

// TestStreamedSendsBegunOutOfOrder: SENDs begun out of order, each with
// the number of uncommitted receive-consuming requests before it
// (RecvAhead), take the receive WQEs in message order; a commit out of
// order is refused and consumes nothing.
func TestStreamedSendsBegunOutOfOrder(t *testing.T) {
	p := newStreamPair(t, enginetest.DefaultConn)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite, 3*4096)
	for i := range 3 {
		p.qb.PostRecv(uint64(10+i), dst.SGE(uint64(i)*4096, 4096))
	}
	msgs := [3][]byte{}
	for i := range msgs {
		msgs[i] = make([]byte, 1000+1000*i)
		fill(msgs[i], byte(50*i+1))
	}
	ins := [3]fabric.Incoming{}
	for _, i := range []int{2, 0, 1} {
		r := p.req(fabric.OpSend, uint64(len(msgs[i])))
		r.RecvAhead = uint32(i)
		in, o := entered(p.b.Eng).Begin(r)
		if o != fabric.OutcomeOK {
			t.Fatalf("Begin of SEND %d: %v", i, o)
		}
		ins[i] = in
	}
	// Pieces of the three interleaved, back to front.
	for off := 2800; off >= 0; off -= 700 {
		for _, i := range []int{1, 2, 0} {
			if off < len(msgs[i]) {
				end := min(off+700, len(msgs[i]))
				if !ins[i].Place(uint64(off), msgs[i][off:end]) {
					t.Fatalf("Place of SEND %d at %d refused", i, off)
				}
			}
		}
	}
	if p.qb.RQCons() != 0 {
		t.Fatal("placing consumed a receive")
	}
	for i, in := range ins {
		if o := in.Commit(); o != fabric.OutcomeOK {
			t.Fatalf("Commit of SEND %d: %v", i, o)
		}
		in.Release()
	}
	for i := range 3 {
		r := p.cb.Wait()
		expect(t, r, uint64(10+i), abi.WCSuccess, abi.WCRecv)
		if r.ByteLen != uint32(len(msgs[i])) {
			t.Fatalf("SEND %d: byte_len %d", i, r.ByteLen)
		}
		if !bytes.Equal(dst.Bytes()[i*4096:i*4096+len(msgs[i])], msgs[i]) || dst.Bytes()[i*4096+len(msgs[i])] != 0 {
			t.Fatalf("SEND %d landed elsewhere", i)
		}
	}

	// Out of order: the second of two is committed first.
	p.qb.PostRecv(20, dst.SGE(0, 64))
	p.qb.PostRecv(21, dst.SGE(64, 64))
	first, o1 := entered(p.b.Eng).Begin(p.req(fabric.OpSend, 0))
	r := p.req(fabric.OpSend, 0)
	r.RecvAhead = 1
	second, o2 := entered(p.b.Eng).Begin(r)
	if o1 != fabric.OutcomeOK || o2 != fabric.OutcomeOK {
		t.Fatalf("Begin: %v, %v", o1, o2)
	}
	if o := second.Commit(); o != fabric.OutcomeRemoteOp {
		t.Fatalf("a commit out of order: %v", o)
	}
	first.Release()
	second.Release()
	if p.qb.RQCons() != 3 {
		t.Fatalf("rq_cons %d after a refused commit, want 3", p.qb.RQCons())
	}
	p.cb.ExpectNone(time.Millisecond)
	p.checkPins(t, "at the end")
}

// TestStreamedRefusals: Begin refuses without effect: RNR (with the QP's
// min_rnr_timer) when the receive WQE is not posted, a bad rkey, missing
// access, a receive too small, a third party; the requester sees the
// matching status and nothing is written.
func TestStreamedRefusals(t *testing.T) {
	conn := enginetest.DefaultConn
	conn.MinRNRTimer = 3
	conn.RNRRetry = 7 // for ever
	p := newStreamPair(t, conn)
	src := p.a.NewBuf(pd, abi.AccessLocalWrite, 4096)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite|abi.AccessRemoteWrite, 4096)
	fill(src.Bytes(), 1)

	r := p.req(fabric.OpSend, 100)
	r.RecvAhead = 0
	if in, o := entered(p.b.Eng).Begin(r); in != nil || o != fabric.OutcomeRNR || !r.HasRNRTimer || r.RNRTimer != 3 {
		t.Fatalf("Begin without a receive: %v, %v, timer %d/%v", in, o, r.RNRTimer, r.HasRNRTimer)
	}
	p.qb.PostRecv(1, dst.SGE(0, 64))
	r = p.req(fabric.OpSend, 100)
	if in, o := entered(p.b.Eng).Begin(r); in != nil || o != fabric.OutcomeInvalidRequest {
		t.Fatalf("Begin of 100 bytes into 64: %v, %v", in, o)
	}
	r = p.req(fabric.OpSend, 10)
	r.RecvAhead = 1
	if _, o := entered(p.b.Eng).Begin(r); o != fabric.OutcomeRNR {
		t.Fatalf("Begin one past the posted receives: %v", o)
	}
	r = p.req(fabric.OpWrite, 64)
	r.RKey, r.RemoteAddr = dst.Key+1, dst.GPA
	if _, o := entered(p.b.Eng).Begin(r); o != fabric.OutcomeRemoteAccess {
		t.Fatalf("Begin with a bad rkey: %v", o)
	}
	r = p.req(fabric.OpRead, 64)
	r.RKey, r.RemoteAddr = dst.Key, dst.GPA
	if _, o := entered(p.b.Eng).Begin(r); o != fabric.OutcomeRemoteAccess {
		t.Fatalf("Begin of a READ without REMOTE_READ: %v", o)
	}
	r = p.req(fabric.OpWrite, 64)
	r.Src.QPN++
	if _, o := entered(p.b.Eng).Begin(r); o != fabric.OutcomeUnreachable {
		t.Fatalf("Begin from a third QP: %v", o)
	}
	r = p.req(fabric.OpCmpSwap, 8)
	r.RKey, r.RemoteAddr = dst.Key, dst.GPA+8
	if _, o := entered(p.b.Eng).Begin(r); o != fabric.OutcomeRemoteAccess {
		t.Fatalf("Begin of an atomic without REMOTE_ATOMIC: %v", o)
	}
	r.RemoteAddr = dst.GPA + 4
	if _, o := entered(p.b.Eng).Begin(r); o != fabric.OutcomeInvalidRequest {
		t.Fatalf("Begin of a misaligned atomic: %v", o)
	}
	if p.qb.RQCons() != 0 || p.qb.State() != abi.QPStateRTS {
		t.Fatalf("a refused Begin changed the QP: rq_cons %d, %v", p.qb.RQCons(), p.qb.State())
	}
	p.cb.ExpectNone(time.Millisecond)
	p.checkPins(t, "after refusals")

	// Through the fabric: the SEND is refused RNR until a receive is
	// posted, then lands.
	p.qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 64)}, nil)
	expect(t, p.cb.Wait(), 1, abi.WCSuccess, abi.WCRecv)
	expect(t, p.ca.Wait(), 2, abi.WCSuccess, abi.WCSend)
	p.qa.PostSend(abi.SendWQE{WRID: 3, Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 64)}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for p.a.Eng.Stats().RNRNaks == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	p.qb.PostRecv(4, dst.SGE(128, 64))
	expect(t, p.ca.Wait(), 3, abi.WCSuccess, abi.WCSend)
	expect(t, p.cb.Wait(), 4, abi.WCSuccess, abi.WCRecv)
	if !bytes.Equal(dst.Bytes()[128:192], src.Bytes()[:64]) {
		t.Fatal("SEND after RNR: bytes differ")
	}

	// A bad rkey: REM_ACCESS_ERR and nothing written.
	before := append([]byte(nil), dst.Bytes()...)
	p.qa.PostSend(abi.SendWQE{WRID: 5, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key + 1},
		[]abi.SGE{src.SGE(0, 4096)}, nil)
	expect(t, p.ca.Wait(), 5, abi.WCRemAccessErr, abi.WCRDMAWrite)
	if !bytes.Equal(dst.Bytes(), before) {
		t.Fatal("a WRITE with a bad rkey wrote")
	}
	p.checkPins(t, "at the end")
}

// TestStreamedRequestOutlivedByItsTarget: once guest memory changed, or
// the QP was reset or destroyed, a streamed request's next step is
// refused and writes nothing; a reset or destroy lets go of its pins at
// once, before the fabric releases it.
func TestStreamedRequestOutlivedByItsTarget(t *testing.T) {
	p := newStreamPair(t, enginetest.DefaultConn)
	dst := p.b.NewBuf(pd, abi.AccessAll, 4096)
	fill(dst.Bytes(), 9)
	piece := bytes.Repeat([]byte{0xee}, 1024)
	begin := func(op fabric.Op) fabric.Incoming {
		t.Helper()
		r := p.req(op, 4096)
		r.RKey, r.RemoteAddr = dst.Key, dst.GPA
		in, o := entered(p.b.Eng).Begin(r)
		if o != fabric.OutcomeOK {
			t.Fatalf("Begin: %v", o)
		}
		if p.b.Pins.Held() == p.ringsB {
			t.Fatal("Begin did not pin its target")
		}
		return in
	}
	want := append([]byte(nil), dst.Bytes()...)
	copy(want, piece)

	in := begin(fabric.OpWrite)
	if !in.Place(0, piece) {
		t.Fatal("Place refused")
	}
	rd := begin(fabric.OpRead)
	if rd.Commit() != fabric.OutcomeOK {
		t.Fatal("READ commit refused")
	}
	buf := make([]byte, 16)
	if !rd.ReadAt(buf, 1024) || !bytes.Equal(buf, want[1024:1040]) {
		t.Fatal("ReadAt before the change")
	}
	if err := p.b.Eng.SetMemory(p.b.Mem); err != nil {
		t.Fatal(err)
	}
	if in.Place(1024, piece) {
		t.Fatal("Place after SetMemory accepted")
	}
	if in.Commit() != fabric.OutcomeRemoteOp {
		t.Fatal("Commit after SetMemory accepted")
	}
	if rd.ReadAt(buf, 0) {
		t.Fatal("ReadAt after SetMemory accepted")
	}
	in.Release()
	rd.Release()
	if !bytes.Equal(dst.Bytes(), want) {
		t.Fatal("bytes written after SetMemory")
	}
	p.checkPins(t, "after SetMemory")

	for _, change := range []string{"reset", "destroy"} {
		in := begin(fabric.OpWrite)
		rd := begin(fabric.OpRead)
		if rd.Commit() != fabric.OutcomeOK {
			t.Fatal("READ commit refused")
		}
		rd.Release() // its ReadAt stays valid, without pins
		switch change {
		case "reset":
			if err := p.b.Eng.ModifyQP(p.qb.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}); err != nil {
				t.Fatal(err)
			}
			p.checkPins(t, "right after RESET")
		case "destroy":
			if err := p.b.Eng.DestroyQP(p.qb.QPN); err != nil {
				t.Fatal(err)
			}
			if h := p.b.Pins.Held(); h > p.ringsB {
				t.Fatalf("right after destroy %d chunks held", h)
			}
		}
		if in.Place(1024, piece) {
			t.Fatalf("Place after %s accepted", change)
		}
		if in.Commit() != fabric.OutcomeRemoteOp {
			t.Fatalf("Commit after %s accepted", change)
		}
		if rd.ReadAt(buf, 0) {
			t.Fatalf("ReadAt after %s accepted", change)
		}
		in.Release()
		if !bytes.Equal(dst.Bytes(), want) {
			t.Fatalf("bytes written after %s", change)
		}
		if change == "reset" {
			// Back in service, the QP takes requests again.
			p.qb.ToRTS(p.a.GID, p.qa.QPN, enginetest.DefaultConn)
			in := begin(fabric.OpWrite)
			in.Release()
			p.checkPins(t, "after a release")
		}
	}
}

// TestStreamedWriteAllocatesNothing: in steady state a streamed WRITE
// (Begin, Place, Commit, Release) allocates nothing.
func TestStreamedWriteAllocatesNothing(t *testing.T) {
	p := newStreamPair(t, enginetest.DefaultConn)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8192)
	r := p.req(fabric.OpWrite, 8192)
	r.RKey, r.RemoteAddr = dst.Key, dst.GPA
	piece := make([]byte, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		p.b.Eng.Enter()
		defer p.b.Eng.Exit()
		in, o := p.b.Eng.Begin(r)
		if o != fabric.OutcomeOK {
			t.Fatalf("Begin: %v", o)
		}
		for off := uint64(0); off < 8192; off += 1024 {
			if !in.Place(off, piece) {
				t.Fatal("Place refused")
			}
		}
		if in.Commit() != fabric.OutcomeOK {
			t.Fatal("Commit refused")
		}
		in.Release()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per WRITE", allocs)
	}
	p.checkPins(t, "at the end")
}

// TestConnectorCalls: with a fabric.Connector the engine connects a QP at
// RTR (receive side) and RTS (send side, retry limits) and disconnects it
// at RESET, destroy and Reset; a refused Connect fails MODIFY_QP, which
// leaves the QP as it was; and a dead peer does not hold up DestroyQP,
// whose flushed request completes nothing.
func TestConnectorCalls(t *testing.T) {
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{Tenant: 42})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{Tenant: 42})
	ca := a.CreateCQ(64)
	qa := a.CreateQP(pd, ca, ca, enginetest.QPOpts{})
	peer := fabric.Addr{GID: b.GID, QPN: 9}
	local := fabric.Addr{GID: a.GID, QPN: qa.QPN}
	conn := enginetest.ConnOpts{Access: abi.AccessAll, RetryCnt: 5, RNRRetry: 6, MinRNRTimer: 1, Timeout: 14}
	qa.ToRTS(peer.GID, peer.QPN, conn)
	conns, discs := f.calls()
	wantRTR := fabric.Connection{Local: local, Remote: peer, Tenant: 42}
	wantRTS := wantRTR
	wantRTS.Send, wantRTS.RetryCnt, wantRTS.RNRRetry = true, 5, 6
	if len(conns) != 2 || conns[0] != wantRTR || conns[1] != wantRTS || len(discs) != 0 {
		t.Fatalf("connects %+v, disconnects %v; want %+v then %+v", conns, discs, wantRTR, wantRTS)
	}

	toReset := func() {
		t.Helper()
		if err := a.Eng.ModifyQP(qa.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}); err != nil {
			t.Fatal(err)
		}
	}
	toReset()
	if _, discs = f.calls(); len(discs) != 1 || discs[0] != local {
		t.Fatalf("disconnects after RESET %v", discs)
	}
	toReset() // not connected: nothing to end
	if _, discs = f.calls(); len(discs) != 1 {
		t.Fatalf("disconnects after a second RESET %v", discs)
	}

	// A refused Connect at RTR, then at RTS: MODIFY_QP fails with the
	// fabric's status (or INVALID_ARGUMENT) and changes nothing.
	init := abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: abi.AccessAll}
	if err := a.Eng.ModifyQP(qa.QPN, abi.QPAttrState|abi.QPAttrPKeyIndex|abi.QPAttrPort|abi.QPAttrAccessFlags, &init); err != nil {
		t.Fatal(err)
	}
	rtrMask := abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN | abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer
	rtr := abi.QPAttr{State: abi.QPStateRTR, PathMTU: abi.MTU1024, DestQPN: peer.QPN, RQPSN: 0x123456, MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: abi.AHAttr{DGID: peer.GID, Port: 1}}
	for _, c := range []struct {
		err  error
		want abi.Status
	}{{errors.New("no route to the peer's host"), abi.StatusInvalidArgument}, {fmt.Errorf("out of sockets: %w", abi.StatusNoResources), abi.StatusNoResources}} {
		f.mu.Lock()
		f.connErr = c.err
		f.mu.Unlock()
		err := a.Eng.ModifyQP(qa.QPN, rtrMask, &rtr)
		if !errors.Is(err, c.want) || !errors.Is(err, c.err) {
			t.Fatalf("refused Connect at RTR: %v, want %v", err, c.want)
		}
		if qa.State() != abi.QPStateInit {
			t.Fatalf("state %v after a refused Connect", qa.State())
		}
	}
	if err := a.Eng.ModifyQP(qa.QPN, rtrMask, &rtr); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.connErr = errors.New("refused")
	f.mu.Unlock()
	rts := abi.QPAttr{State: abi.QPStateRTS, SQPSN: 0xabcdef, MaxRdAtomic: 1, RetryCnt: 2, RNRRetry: 2, Timeout: 14}
	if err := a.Eng.ModifyQP(qa.QPN, abi.QPAttrState|abi.QPAttrSQPSN|abi.QPAttrMaxQPRdAtomic|abi.QPAttrRetryCnt|abi.QPAttrRNRRetry|abi.QPAttrTimeout, &rts); err == nil {
		t.Fatal("MODIFY_QP to RTS succeeded with Connect refused")
	}
	if resp, err := a.Eng.QueryQP(qa.QPN); err != nil || resp.Attr.State != abi.QPStateRTR || resp.Attr.RetryCnt != 0 || resp.Attr.Timeout != 0 {
		t.Fatalf("after a refused Connect at RTS: %+v, %v", resp.Attr, err)
	}
	// The PSNs reach the fabric: rq_psn from RTR on, sq_psn at RTS.
	wantRTR = fabric.Connection{Local: local, Remote: peer, Tenant: 42, RQPSN: 0x123456}
	if conns, _ = f.calls(); conns[len(conns)-1] != wantRTR {
		t.Fatalf("last connect %+v, want %+v", conns[len(conns)-1], wantRTR)
	}

	// A request the peer never answers (the fabric holds it) does not
	// make DestroyQP wait: Disconnect flushes it, and the flushed request
	// completes nothing on a QP that is going away.
	if err := a.Eng.ModifyQP(qa.QPN, abi.QPAttrState|abi.QPAttrSQPSN|abi.QPAttrMaxQPRdAtomic|abi.QPAttrRetryCnt|abi.QPAttrRNRRetry|abi.QPAttrTimeout, &rts); err != nil {
		t.Fatal(err)
	}
	wantRTS = wantRTR
	wantRTS.Send, wantRTS.SQPSN, wantRTS.RetryCnt, wantRTS.RNRRetry = true, 0xabcdef, 2, 2
	if conns, _ = f.calls(); conns[len(conns)-1] != wantRTS {
		t.Fatalf("connect at RTS %+v, want %+v", conns[len(conns)-1], wantRTS)
	}
	f.setPaused(true)
	f.mu.Lock()
	f.lag = 5 * time.Millisecond
	f.mu.Unlock()
	src := a.NewBuf(pd, 0, 64)
	qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: 0x1000, RKey: 1}, []abi.SGE{src.SGE(0, 64)}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for f.queued() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the WRITE was not posted")
		}
		time.Sleep(100 * time.Microsecond)
	}
	start := time.Now()
	if err := a.Eng.DestroyQP(qa.QPN); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("DestroyQP took %v", d)
	}
	f.setPaused(false)
	if _, discs = f.calls(); len(discs) != 2 || discs[1] != local {
		t.Fatalf("disconnects after destroy %v", discs)
	}
	ca.ExpectNone(2 * time.Millisecond)
	if evs := a.Events(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}

	// Reset ends every connection.
	q2 := a.CreateQP(pd, ca, ca, enginetest.QPOpts{})
	q3 := a.CreateQP(pd, ca, ca, enginetest.QPOpts{})
	q2.ToRTS(peer.GID, 10, conn)
	q3.ToRTS(peer.GID, 11, conn)
	a.Eng.Reset()
	_, discs = f.calls()
	got := map[fabric.Addr]bool{}
	for _, d := range discs[2:] {
		got[d] = true
	}
	if len(discs) != 4 || !got[fabric.Addr{GID: a.GID, QPN: q2.QPN}] || !got[fabric.Addr{GID: a.GID, QPN: q3.QPN}] {
		t.Fatalf("disconnects after Reset %v", discs)
	}
}

// TestFinalOutcomes: the final outcomes of a fabric that retries by
// itself complete the WQE with the matching IB status.
func TestFinalOutcomes(t *testing.T) {
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{})
	src := a.NewBuf(pd, 0, 64)
	for i, c := range []struct {
		o  fabric.Outcome
		st abi.WCStatus
	}{
		{fabric.OutcomeRetryExceeded, abi.WCRetryExcErr},
		{fabric.OutcomeRNRExceeded, abi.WCRNRRetryExcErr},
		{fabric.OutcomeFlushed, abi.WCWRFlushErr},
		{fabric.OutcomeLocalError, abi.WCLocProtErr},
	} {
		ca, cb := a.CreateCQ(16), b.CreateCQ(16)
		qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
		enginetest.Connect(qa, qb, enginetest.DefaultConn)
		f.force.Store(int32(c.o))
		before := a.Eng.Stats()
		qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 64)}, nil)
		expect(t, ca.Wait(), uint64(i), c.st, abi.WCSend)
		qa.WaitState(abi.QPStateErr)
		after := a.Eng.Stats()
		retries, rnrs := after.Retries-before.Retries, after.RNRNaks-before.RNRNaks
		switch {
		case c.o == fabric.OutcomeRetryExceeded && (retries != 1 || rnrs != 0),
			c.o == fabric.OutcomeRNRExceeded && (retries != 0 || rnrs != 1),
			(c.o == fabric.OutcomeFlushed || c.o == fabric.OutcomeLocalError) && (retries != 0 || rnrs != 0):
			t.Fatalf("%v: %d retries, %d RNR NAKs counted", c.o, retries, rnrs)
		}
		f.force.Store(-1)
	}
}

// TestResetWithARequestInFlight: a QP reset while the fabric holds its
// request comes back clean: the flushed request leaves no completion
// behind, and the first WQE after reconnecting completes as itself.
func TestResetWithARequestInFlight(t *testing.T) {
	p := newStreamPair(t, enginetest.DefaultConn)
	src := p.a.NewBuf(pd, 0, 4096)
	dst := p.b.NewBuf(pd, abi.AccessAll, 4096)
	fill(src.Bytes(), 3)
	p.f.setPaused(true)
	p.f.mu.Lock()
	p.f.lag = 5 * time.Millisecond // time for the engine to see the flushed outcome
	p.f.mu.Unlock()
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 4096)}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for p.f.queued() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the WRITE was not posted")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := p.a.Eng.ModifyQP(p.qa.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}); err != nil {
		t.Fatal(err)
	}
	p.f.setPaused(false)
	p.qa.SQProd, p.qa.RQProd = 0, 0 // the driver restarts its counters with the QP
	p.qa.ToRTS(p.b.GID, p.qb.QPN, enginetest.DefaultConn)
	p.qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 4096)}, nil)
	expect(t, p.ca.Wait(), 2, abi.WCSuccess, abi.WCRDMAWrite)
	p.ca.ExpectNone(time.Millisecond)
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("bytes differ")
	}
	if evs := p.a.Events(); len(evs) != 0 {
		t.Fatalf("events %v", evs)
	}
	p.checkPins(t, "at the end")
}

// TestStreamedRequestOnTruncatedMemory: a guest that truncates its memory
// file under a streamed request makes its steps fail, not the daemon.
func TestStreamedRequestOnTruncatedMemory(t *testing.T) {
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{Memfd: true, RAM: 4 << 20})
	ca, cb := a.CreateCQ(16), b.CreateCQ(16)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	dst := b.NewBuf(pd, abi.AccessAll, 8192)
	req := func(op fabric.Op) *fabric.Request {
		return &fabric.Request{Op: op, Len: 8192, RKey: dst.Key, RemoteAddr: dst.GPA,
			Src: fabric.Addr{GID: a.GID, QPN: qa.QPN}, Dst: fabric.Addr{GID: b.GID, QPN: qb.QPN}}
	}
	wr, o1 := entered(b.Eng).Begin(req(fabric.OpWrite))
	rd, o2 := entered(b.Eng).Begin(req(fabric.OpRead))
	if o1 != fabric.OutcomeOK || o2 != fabric.OutcomeOK || rd.Commit() != fabric.OutcomeOK {
		t.Fatalf("Begin: %v, %v", o1, o2)
	}
	if err := unix.Ftruncate(b.Fd, 0); err != nil {
		t.Fatal(err)
	}
	if wr.Place(0, make([]byte, 1024)) {
		t.Fatal("Place into truncated memory succeeded")
	}
	if wr.Commit() != fabric.OutcomeRemoteOp {
		t.Fatal("Commit after a failed Place accepted")
	}
	if rd.ReadAt(make([]byte, 1024), 0) {
		t.Fatal("ReadAt of truncated memory succeeded")
	}
	wr.Release()
	rd.Release()
}

// TestQuiesceTimeout: a memory change while the fabric holds a request
// that never completes (a dead peer, a receiver that never posts) waits
// QuiesceTimeout, not for ever: the QP goes to ERR with QP_FATAL, its
// connection is closed, and the request completes WR_FLUSH_ERR. The
// device's other QP, idle, is untouched.
func TestQuiesceTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{Tenant: 7, QuiesceTimeout: timeout})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{Tenant: 7})
	ca, cb := a.CreateCQ(64), b.CreateCQ(64)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	idle, peer := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	enginetest.Connect(idle, peer, enginetest.DefaultConn)
	src, dst := a.NewBuf(pd, 0, 4096), b.NewBuf(pd, abi.AccessAll, 4096)
	f.setPaused(true)
	qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 4096)}, nil)
	for deadline := time.Now().Add(5 * time.Second); f.queued() == 0; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the WRITE was not posted")
		}
	}
	start := time.Now()
	if err := a.Eng.SetMemory(a.Mem); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < timeout || d > timeout+time.Second {
		t.Fatalf("SetMemory took %v with a request held, want about %v", d, timeout)
	}
	expect(t, ca.Wait(), 1, abi.WCWRFlushErr, abi.WCRDMAWrite)
	a.WaitEvent(abi.EventQPFatal, qa.QPN)
	if resp, err := a.Eng.QueryQP(qa.QPN); err != nil || resp.Attr.State != abi.QPStateErr {
		t.Fatalf("qp after the timeout: %+v, %v", resp.Attr, err)
	}
	if resp, err := a.Eng.QueryQP(idle.QPN); err != nil || resp.Attr.State != abi.QPStateRTS {
		t.Fatalf("the idle qp: %+v, %v", resp.Attr, err)
	}
	if n := a.Eng.Stats().Abandoned; n != 1 {
		t.Fatalf("%d QPs abandoned, want 1", n)
	}
	if _, discs := f.calls(); len(discs) != 1 || discs[0] != (fabric.Addr{GID: a.GID, QPN: qa.QPN}) {
		t.Fatalf("disconnects %v", discs)
	}
	f.setPaused(false)
	// Without a request in flight the next change does not wait.
	start = time.Now()
	if err := a.Eng.SetMemory(a.Mem); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > timeout/2 {
		t.Fatalf("SetMemory took %v with nothing in flight", d)
	}
}

// TestStopLetsPeerRequestsFinish: a Stop (a VMM pausing the VM) while a
// peer's WRITE is half placed waits for the rest of it, so the WRITE
// lands and the peer's QP lives on; requests that begin meanwhile are
// told to retry. A request that does not end within QuiesceTimeout is
// cut, and Stop returns.
func TestStopLetsPeerRequestsFinish(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{Tenant: 7})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{Tenant: 7, QuiesceTimeout: timeout})
	ca, cb := a.CreateCQ(16), b.CreateCQ(16)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	dst := b.NewBuf(pd, abi.AccessAll, 8192)
	begin := func() (fabric.Incoming, fabric.Outcome) {
		return entered(b.Eng).Begin(&fabric.Request{Op: fabric.OpWrite, Len: 8192, RKey: dst.Key, RemoteAddr: dst.GPA,
			Src: fabric.Addr{GID: a.GID, QPN: qa.QPN}, Dst: fabric.Addr{GID: b.GID, QPN: qb.QPN}})
	}
	stop := func() chan time.Duration {
		stopped := make(chan time.Duration, 1)
		go func(start time.Time) { b.Eng.Stop(); stopped <- time.Since(start) }(time.Now())
		// Stop is waiting once new requests are refused.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			in, o := begin()
			if o == fabric.OutcomeRetry {
				return stopped
			}
			if o != fabric.OutcomeOK || time.Now().After(deadline) {
				t.Fatalf("Begin while stopping: %v", o)
			}
			in.Release()
		}
	}
	piece := bytes.Repeat([]byte{0x5a}, 4096)

	wr, o := begin()
	if o != fabric.OutcomeOK || !wr.Place(0, piece) {
		t.Fatalf("Begin: %v", o)
	}
	stopped := stop()
	select {
	case d := <-stopped:
		t.Fatalf("Stop returned after %v with a WRITE half placed", d)
	case <-time.After(timeout / 3):
	}
	if !wr.Place(4096, piece) || wr.Commit() != fabric.OutcomeOK {
		t.Fatal("the rest of the WRITE was refused while stopping")
	}
	wr.Release()
	if d := <-stopped; d >= timeout {
		t.Fatalf("Stop took %v, the quiesce timeout, though the WRITE ended", d)
	}
	if !bytes.Equal(dst.Bytes(), bytes.Repeat([]byte{0x5a}, 8192)) {
		t.Fatal("the WRITE did not land")
	}
	if _, o := begin(); o != fabric.OutcomeRetry {
		t.Fatalf("Begin on a stopped engine: %v, want retry", o)
	}

	// Resumed, the QP serves again; a WRITE left half placed is cut at
	// the timeout.
	if err := b.Eng.Start(b.Mem, b.DB.View(), b.Layout); err != nil {
		t.Fatal(err)
	}
	wr, o = begin()
	if o != fabric.OutcomeOK || !wr.Place(0, piece) {
		t.Fatalf("Begin after Start: %v", o)
	}
	if d := <-stop(); d < timeout || d > timeout+time.Second {
		t.Fatalf("Stop took %v with a WRITE never finished, want about %v", d, timeout)
	}
	if wr.Place(4096, piece) || wr.Commit() != fabric.OutcomeRemoteOp {
		t.Fatal("a WRITE cut by Stop went on")
	}
	wr.Release()
	if resp, err := b.Eng.QueryQP(qb.QPN); err != nil || resp.Attr.State != abi.QPStateRTS || b.Eng.Stats().Abandoned != 0 {
		t.Fatalf("our QP after a cut peer request: %+v, %v", resp.Attr, err)
	}
}

// TestStopWaitsForReadResponses: a READ's response is read from guest
// memory when it is sent and again when it is resent, until the requester
// has committed it (Finish). Stop, pausing the VM, waits for that too:
// otherwise a resend after the pause finds the memory gone and the
// peer's READ fails (REMOTE_OP) for a pause of ours.
func TestStopWaitsForReadResponses(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f := newStreamFabric(t)
	a := enginetest.NewGuest(t, f, "a", enginetest.Options{Tenant: 7})
	b := enginetest.NewGuest(t, f, "b", enginetest.Options{Tenant: 7, QuiesceTimeout: timeout})
	ca, cb := a.CreateCQ(16), b.CreateCQ(16)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	src := b.NewBuf(pd, abi.AccessAll, 8192)
	copy(src.Bytes(), bytes.Repeat([]byte{0x3c}, 8192))
	read := func() fabric.Incoming {
		t.Helper()
		in, o := entered(b.Eng).Begin(&fabric.Request{Op: fabric.OpRead, Len: 8192, RKey: src.Key, RemoteAddr: src.GPA,
			Src: fabric.Addr{GID: a.GID, QPN: qa.QPN}, Dst: fabric.Addr{GID: b.GID, QPN: qb.QPN}})
		if o != fabric.OutcomeOK || in.Commit() != fabric.OutcomeOK {
			t.Fatalf("READ: %v", o)
		}
		in.Release() // as the cross-host fabric does, before the response goes
		return in
	}
	stop := func() chan time.Duration {
		stopped := make(chan time.Duration, 1)
		go func(start time.Time) { b.Eng.Stop(); stopped <- time.Since(start) }(time.Now())
		return stopped
	}
	resend := func(in fabric.Incoming) bool {
		p := make([]byte, 4096)
		return in.ReadAt(p, 4096) && bytes.Equal(p, bytes.Repeat([]byte{0x3c}, 4096))
	}

	in := read()
	stopped := stop()
	select {
	case d := <-stopped:
		t.Fatalf("Stop returned after %v with a READ response not yet committed by the requester", d)
	case <-time.After(timeout / 3):
	}
	if !resend(in) {
		t.Fatal("the READ's response could not be resent while stopping")
	}
	in.Finish()
	if d := <-stopped; d >= timeout {
		t.Fatalf("Stop took %v, the quiesce timeout, though the response was finished", d)
	}

	// A response the requester never takes (its host gone) holds Stop
	// for the quiesce timeout only; after that it is not resent.
	if err := b.Eng.Start(b.Mem, b.DB.View(), b.Layout); err != nil {
		t.Fatal(err)
	}
	in = read()
	if d := <-stop(); d < timeout || d > timeout+time.Second {
		t.Fatalf("Stop took %v with a READ response never finished, want about %v", d, timeout)
	}
	if resend(in) {
		t.Fatal("a READ response cut by Stop was read again")
	}
	in.Finish()
	if resp, err := b.Eng.QueryQP(qb.QPN); err != nil || resp.Attr.State != abi.QPStateRTS || b.Eng.Stats().Abandoned != 0 {
		t.Fatalf("our QP after a cut READ response: %+v, %v", resp.Attr, err)
	}
}
