package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/virtio/abi"
)

var secret = []byte("0123456789abcdef-cluster")

const (
	tenant = 5
	memKey = 0x77
)

func gidOf(s string) abi.GID { return netip.MustParseAddr(s).As16() }

// dev is a fake device: a StreamResponder over plain byte slices. mem is
// one region reached with memKey (RemoteAddr is the offset in it);
// receive buffers are consumed in order, as a QP's receive queue.
type dev struct {
	t  testing.TB
	mu sync.Mutex

	mem   []byte
	recvs [][]byte
	rcons int
	cqes  []cqe

	begins, open, released, badRelease, responds int
	finished                                     int // READs told their response is done
	maxAhead                                     uint32
	acceptedAhead                                int // Begins accepted with RecvAhead > 0

	// Scripted refusals: the next refuseN Begins answer refuse; Place
	// fails when failPlace; Commit answers commitOutcome if set.
	refuse        fabric.Outcome
	refuseN       int
	failPlace     bool
	commitOutcome fabric.Outcome

	hold chan struct{} // if set, Begin waits for it (stalls the loop)
	held chan struct{}

	// gate is the device's data path: a test holding it exclusively is a
	// control change in progress. inside counts the callers in it: every
	// call of Begin and of an Incoming must come from one (check).
	gate   sync.RWMutex
	inside atomic.Int32
	// onCommit, if set, runs in Commit (inside the data path).
	onCommit func(*fabric.Request)
}

func (d *dev) TryEnter() bool {
	if !d.gate.TryRLock() {
		return false
	}
	d.inside.Add(1)
	return true
}

func (d *dev) Enter() {
	d.gate.RLock()
	d.inside.Add(1)
}

func (d *dev) Exit() {
	d.inside.Add(-1)
	d.gate.RUnlock()
}

// check reports a call from outside the device's data path.
func (d *dev) check(what string) {
	if d.inside.Load() <= 0 {
		d.t.Errorf("%s called outside the data path", what)
	}
}

type cqe struct {
	wqe int
	op  fabric.Op
	len uint64
	imm uint32
}

func newDev(t testing.TB, memSize int) *dev { return &dev{t: t, mem: make([]byte, memSize)} }

func (d *dev) postRecv(n int) {
	d.mu.Lock()
	d.recvs = append(d.recvs, make([]byte, n))
	d.mu.Unlock()
}

// Respond serves the in-process path (WRITE only, enough to see it used).
func (d *dev) Respond(req *fabric.Request) fabric.Outcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.responds++
	if req.Op != fabric.OpWrite || req.RKey != memKey || req.RemoteAddr+req.Len > uint64(len(d.mem)) {
		return fabric.OutcomeRemoteAccess
	}
	off := req.RemoteAddr
	for _, v := range req.Local {
		off += uint64(copy(d.mem[off:], v.Bytes()))
	}
	return fabric.OutcomeOK
}

// Begin checks req as a device would and returns an Incoming holding a
// copy of it (so nothing depends on the fabric keeping req).
func (d *dev) Begin(req *fabric.Request) (fabric.Incoming, fabric.Outcome) {
	d.check("Begin")
	d.mu.Lock()
	hold, held := d.hold, d.held
	d.mu.Unlock()
	if hold != nil {
		select {
		case held <- struct{}{}:
		default:
		}
		<-hold
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.begins++
	d.maxAhead = max(d.maxAhead, req.RecvAhead)
	if d.refuseN > 0 {
		d.refuseN--
		return nil, d.refuse
	}
	in := &incoming{d: d, req: *req, wqe: -1}
	switch req.Op {
	case fabric.OpWrite, fabric.OpWriteImm, fabric.OpRead, fabric.OpCmpSwap, fabric.OpFetchAdd:
		if req.RKey != memKey || req.RemoteAddr+req.Len > uint64(len(d.mem)) {
			return nil, fabric.OutcomeRemoteAccess
		}
		if (req.Op == fabric.OpCmpSwap || req.Op == fabric.OpFetchAdd) && (req.RemoteAddr%8 != 0 || req.Len != 8) {
			return nil, fabric.OutcomeInvalidRequest
		}
		in.target = d.mem[req.RemoteAddr : req.RemoteAddr+req.Len]
	}
	switch req.Op {
	case fabric.OpSend, fabric.OpSendImm, fabric.OpWriteImm:
		i := d.rcons + int(req.RecvAhead)
		if i >= len(d.recvs) {
			req.RNRTimer, req.HasRNRTimer = 1, true
			return nil, fabric.OutcomeRNR
		}
		in.wqe = i
		if req.Op != fabric.OpWriteImm {
			if req.Len > uint64(len(d.recvs[i])) {
				return nil, fabric.OutcomeInvalidRequest
			}
			in.target = d.recvs[i][:req.Len]
		}
	}
	d.open++
	if req.RecvAhead > 0 {
		d.acceptedAhead++
	}
	return in, fabric.OutcomeOK
}

func (d *dev) snapshot() (begins, open, released, badRelease int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.begins, d.open, d.released, d.badRelease
}

type incoming struct {
	d         *dev
	req       fabric.Request
	target    []byte
	wqe       int
	value     uint64
	committed bool
	released  bool
	finished  bool
}

func (in *incoming) Place(off uint64, b []byte) bool {
	in.d.check("Place")
	in.d.mu.Lock()
	defer in.d.mu.Unlock()
	if in.d.failPlace {
		return false
	}
	if in.released || off+uint64(len(b)) > uint64(len(in.target)) {
		in.d.t.Errorf("place [%d,+%d) of %d bytes (released %v)", off, len(b), len(in.target), in.released)
		return false
	}
	copy(in.target[off:], b)
	return true
}

func (in *incoming) Commit() fabric.Outcome {
	d := in.d
	d.check("Commit")
	if d.onCommit != nil {
		d.onCommit(&in.req)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.committed || in.released {
		d.t.Errorf("commit twice or after release")
		return fabric.OutcomeRemoteOp
	}
	in.committed = true
	if d.commitOutcome != fabric.OutcomeOK {
		return d.commitOutcome
	}
	if in.wqe >= 0 {
		if in.wqe != d.rcons {
			d.t.Errorf("commit of receive WQE %d with %d next", in.wqe, d.rcons)
			return fabric.OutcomeRemoteOp
		}
		d.rcons++
		d.cqes = append(d.cqes, cqe{wqe: in.wqe, op: in.req.Op, len: in.req.Len, imm: in.req.Imm})
	}
	switch in.req.Op {
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		old := binary.LittleEndian.Uint64(in.target)
		nv := old + in.req.SwapAdd
		if in.req.Op == fabric.OpCmpSwap {
			nv = old
			if old == in.req.Compare {
				nv = in.req.SwapAdd
			}
		}
		binary.LittleEndian.PutUint64(in.target, nv)
		in.value = old
	}
	return fabric.OutcomeOK
}

func (in *incoming) Value() uint64 { return in.value }

func (in *incoming) ReadAt(p []byte, off uint64) bool {
	in.d.check("ReadAt")
	in.d.mu.Lock()
	defer in.d.mu.Unlock()
	if off+uint64(len(p)) > uint64(len(in.target)) {
		return false
	}
	copy(p, in.target[off:])
	return true
}

// Finish checks the contract: once per committed READ, after Release.
func (in *incoming) Finish() {
	in.d.mu.Lock()
	defer in.d.mu.Unlock()
	if in.req.Op != fabric.OpRead || !in.committed || !in.released || in.finished {
		in.d.t.Errorf("Finish of %v (committed %v, released %v, finished %v)", in.req.Op, in.committed, in.released, in.finished)
	}
	in.finished = true
	in.d.finished++
}

func (in *incoming) Release() {
	in.d.check("Release")
	in.d.mu.Lock()
	defer in.d.mu.Unlock()
	if in.released {
		in.d.badRelease++
		return
	}
	in.released = true
	in.d.open--
	in.d.released++
}

// result is one completion.
type result struct {
	req *fabric.Request
	o   fabric.Outcome
}

// waiter collects completions.
type waiter chan result

func newWaiter() waiter { return make(waiter, 1<<14) }

func (w waiter) Complete(req *fabric.Request, o fabric.Outcome) { w <- result{req, o} }

func (w waiter) next(t testing.TB, d time.Duration) result {
	t.Helper()
	select {
	case r := <-w:
		return r
	case <-time.After(d):
		t.Fatalf("no completion within %v", d)
		return result{}
	}
}

// none checks nothing completes within d.
func (w waiter) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case r := <-w:
		t.Fatalf("unexpected completion %v of %v", r.o, r.req.Op)
	case <-time.After(d):
	}
}

// buffer is requester memory: views over an anonymous mapping, in two
// unequal pieces, and the same bytes as one slice for checking.
func buffer(t testing.TB, n int) ([]guestmem.View, []byte) {
	t.Helper()
	m, err := guestmem.MapAnonymous(uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	all, err := m.View().Sub(0, uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	cut := uint64(n / 3)
	a, _ := all.Sub(0, cut)
	b, _ := all.Sub(cut, uint64(n)-cut)
	return []guestmem.View{a, b}, all.Bytes()
}

// host is one remote.Fabric with a device at gid.
type host struct {
	f   *remote.Fabric
	dev *dev
	gid abi.GID
}

type opts struct {
	transport transport.Config
	paths     int
}

func newHost(t testing.TB, prefix, gid string, o opts) *host {
	t.Helper()
	f, err := remote.New(t.Context(), remote.Config{
		Listen:    netip.MustParseAddrPort("127.0.0.1:0"),
		GIDPrefix: netip.MustParsePrefix(prefix),
		Secret:    secret,
		Transport: o.transport,
		Paths:     o.paths,
	})
	if err != nil {
		t.Fatal(err)
	}
	return startHost(t, f, gid)
}

// startHost registers a device of 1 MiB at gid on f and runs f until the
// test ends.
func startHost(t testing.TB, f *remote.Fabric, gid string) *host {
	t.Helper()
	h := &host{f: f, dev: newDev(t, 1<<20), gid: gidOf(gid)}
	if _, err := f.Register(h.gid, h.dev); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil && !errors.Is(err, remote.ErrClosed) { // closed before it ran
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// pair makes two hosts that know each other.
func pair(t testing.TB, o opts) (a, b *host) {
	t.Helper()
	a = newHost(t, "fd00:0:0:1::/64", "fd00:0:0:1::10", o)
	b = newHost(t, "fd00:0:0:2::/64", "fd00:0:0:2::20", o)
	if err := a.f.SetPeers([]remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: b.f.Addr()}}); err != nil {
		t.Fatal(err)
	}
	if err := b.f.SetPeers([]remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"), Addr: a.f.Addr()}}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// connection is QP qa of a connected to QP qb of b, as a's engine
// describes it: qa's rq_psn is qb's sq_psn, and its sq_psn (at RTS) is
// qb's rq_psn.
func connection(a, b *host, qa, qb uint32, send bool, retry, rnr uint8) fabric.Connection {
	c := fabric.Connection{Local: fabric.Addr{GID: a.gid, QPN: qa}, Remote: fabric.Addr{GID: b.gid, QPN: qb},
		Tenant: tenant, Send: send, RQPSN: sqPSN(b, qb), RetryCnt: retry, RNRRetry: rnr}
	if send {
		c.SQPSN = sqPSN(a, qa)
	}
	return c
}

// sqPSN is the sq_psn the tests give QP qpn of h: one per QP, 24 bits,
// some near the top so that streams cross 2^24.
func sqPSN(h *host, qpn uint32) uint32 {
	return (uint32(h.gid[15])<<16 + qpn*7919 + 0xfffe00) & 0xffffff
}

// connect connects qa and qb both ways, RTR then RTS.
func connect(t testing.TB, a, b *host, qa, qb uint32, retry, rnr uint8) {
	t.Helper()
	for _, send := range []bool{false, true} {
		if err := a.f.Connect(connection(a, b, qa, qb, send, retry, rnr)); err != nil {
			t.Fatal(err)
		}
		if err := b.f.Connect(connection(b, a, qb, qa, send, retry, rnr)); err != nil {
			t.Fatal(err)
		}
	}
}

// request builds a request from a's qa to b's qb.
func request(a, b *host, qa, qb uint32, op fabric.Op) *fabric.Request {
	return &fabric.Request{Op: op, Src: fabric.Addr{GID: a.gid, QPN: qa}, Dst: fabric.Addr{GID: b.gid, QPN: qb}, RKey: memKey}
}

// writeOf builds a WRITE of n bytes (fill's pattern from seed) from a's
// qa to offset 0 of b's qb, and returns it with the bytes it writes.
func writeOf(t testing.TB, a, b *host, qa, qb uint32, n int, seed byte) (*fabric.Request, []byte) {
	t.Helper()
	v, src := buffer(t, n)
	fill(src, seed)
	r := request(a, b, qa, qb, fabric.OpWrite)
	r.Len, r.Local = uint64(n), v
	return r, src
}

// holdDevice takes h's device's data-path gate, as a control change
// does, and returns what lets it go: callable more than once, and run at
// cleanup too (before the hosts close) if the test ends first.
func holdDevice(t testing.TB, h *host) (release func()) {
	h.dev.gate.Lock()
	release = sync.OnceFunc(h.dev.gate.Unlock)
	t.Cleanup(release)
	return release
}
