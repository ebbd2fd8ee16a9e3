package fabric_test

import (
	"bytes"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// These tests run two real engines joined by the local fabric: the
// devices of two VMs on one host.

const pd = 1

type link struct {
	a, b   *enginetest.Guest
	qa, qb *enginetest.QP
	ca, cb *enginetest.CQ
}

func newLink(tb testing.TB, o enginetest.QPOpts) *link {
	tb.Helper()
	l := fabric.NewLocal()
	k := &link{a: enginetest.NewGuest(tb, l, "a", enginetest.Options{RAM: 64 << 20}), b: enginetest.NewGuest(tb, l, "b", enginetest.Options{RAM: 64 << 20})}
	k.ca, k.cb = k.a.CreateCQ(256), k.b.CreateCQ(256)
	k.qa, k.qb = k.a.CreateQP(pd, k.ca, k.ca, o), k.b.CreateQP(pd, k.cb, k.cb, o)
	enginetest.Connect(k.qa, k.qb, enginetest.DefaultConn)
	return k
}

// TestRoutingAmongThreeDevices: each device's traffic lands at the device
// that owns the destination GID and nowhere else.
func TestRoutingAmongThreeDevices(t *testing.T) {
	l := fabric.NewLocal()
	g := []*enginetest.Guest{
		enginetest.NewGuest(t, l, "r0", enginetest.Options{}),
		enginetest.NewGuest(t, l, "r1", enginetest.Options{}),
		enginetest.NewGuest(t, l, "r2", enginetest.Options{}),
	}
	bufs := make([]enginetest.Buf, 3)
	cqs := make([]*enginetest.CQ, 3)
	for i := range g {
		bufs[i] = g[i].NewBuf(pd, abi.AccessAll, 64)
		cqs[i] = g[i].CreateCQ(16)
	}
	// r0 -> r1 and r2 -> r0, each a connected pair.
	q01, q10 := g[0].CreateQP(pd, cqs[0], cqs[0], enginetest.QPOpts{}), g[1].CreateQP(pd, cqs[1], cqs[1], enginetest.QPOpts{})
	q20, q02 := g[2].CreateQP(pd, cqs[2], cqs[2], enginetest.QPOpts{}), g[0].CreateQP(pd, cqs[0], cqs[0], enginetest.QPOpts{})
	enginetest.Connect(q01, q10, enginetest.DefaultConn)
	enginetest.Connect(q20, q02, enginetest.DefaultConn)
	src0, src2 := g[0].NewBuf(pd, 0, 8), g[2].NewBuf(pd, 0, 8)
	copy(src0.Bytes(), "from r0!")
	copy(src2.Bytes(), "from r2!")
	q01.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: bufs[1].GPA, RKey: bufs[1].Key}, []abi.SGE{src0.SGE(0, 8)}, nil)
	q20.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: bufs[0].GPA, RKey: bufs[0].Key}, []abi.SGE{src2.SGE(0, 8)}, nil)
	if c := cqs[0].Wait(); c.Status != abi.WCSuccess {
		t.Fatal(c.Status)
	}
	if c := cqs[2].Wait(); c.Status != abi.WCSuccess {
		t.Fatal(c.Status)
	}
	if string(bufs[1].Bytes()[:8]) != "from r0!" || string(bufs[0].Bytes()[:8]) != "from r2!" || !bytes.Equal(bufs[2].Bytes(), make([]byte, 64)) {
		t.Fatalf("r0 %q r1 %q r2 %q", bufs[0].Bytes()[:8], bufs[1].Bytes()[:8], bufs[2].Bytes()[:8])
	}
}

// TestSteadyStateAllocatesNothing: after warm-up, WRITEs and SEND/RECV
// between two devices allocate nothing on the heap (the only allocations
// a run may see come from the runtime and the test's own polling).
func TestSteadyStateAllocatesNothing(t *testing.T) {
	k := newLink(t, enginetest.QPOpts{})
	src := k.a.NewBuf(pd, 0, 4096)
	dst := k.b.NewBuf(pd, abi.AccessAll, 4096)
	round := func(i int) {
		k.qb.PostRecv(uint64(i), dst.SGE(0, 4096))
		k.qa.WriteSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 4096)}, nil)
		k.qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRSend, Flags: abi.SendSignaled}, []abi.SGE{src.SGE(0, 1000), src.SGE(2000, 1000)}, nil)
		for _, ok := k.ca.Poll(); !ok; _, ok = k.ca.Poll() {
		}
		for _, ok := k.cb.Poll(); !ok; _, ok = k.cb.Poll() {
		}
	}
	for i := range 100 {
		round(i)
	}
	const n = 2000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		round(i)
	}
	runtime.ReadMemStats(&after)
	allocs := after.Mallocs - before.Mallocs
	t.Logf("%d heap allocations for %d rounds of three WQEs", allocs, n)
	if allocs > n/20 {
		t.Fatalf("%d heap allocations for %d rounds of three WQEs", allocs, n)
	}
}

// BenchmarkWrite1MiB measures RDMA WRITE bandwidth between two devices
// and, as memcpy-1MiB, a plain copy of the same size: the engine target is
// at least 0.7x the copy.
func BenchmarkWrite1MiB(b *testing.B) {
	const size = 1 << 20
	k := newLink(b, enginetest.QPOpts{SQSize: 64})
	src := k.a.NewBuf(pd, 0, size)
	dst := k.b.NewBuf(pd, abi.AccessAll, size)
	b.Run("memcpy", func(b *testing.B) {
		b.SetBytes(size)
		s, d := src.Bytes(), dst.Bytes()
		for b.Loop() {
			copy(d, s)
		}
	})
	b.Run("write", func(b *testing.B) {
		b.SetBytes(size)
		const depth = 16
		posted, done := 0, 0
		for b.Loop() {
			for posted-done >= depth {
				if _, ok := k.ca.Poll(); ok {
					done++
				} else {
					runtime.Gosched() // polling drivers must leave the engines a CPU
				}
			}
			k.qa.PostSend(abi.SendWQE{WRID: uint64(posted), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, size)}, nil)
			posted++
		}
		for done < posted {
			if c, ok := k.ca.Poll(); ok {
				if c.Status != abi.WCSuccess {
					b.Fatal(c.Status)
				}
				done++
			} else {
				runtime.Gosched()
			}
		}
	})
}

// BenchmarkPingPong8B measures 8-byte WRITE ping-pong between two devices:
// each side waits for the peer's value to land in its memory, then
// writes the next one back (inline). It reports the round trip's p50 and
// p99.
func BenchmarkPingPong8B(b *testing.B) {
	k := newLink(b, enginetest.QPOpts{SQSize: 64})
	bufA := k.a.NewBuf(pd, abi.AccessAll, 64)
	bufB := k.b.NewBuf(pd, abi.AccessAll, 64)
	va, vb := k.a.View(bufA.GPA, 8), k.b.View(bufB.GPA, 8)
	stop, exited := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-exited }() // before cleanup unmaps the memory
	var val [8]byte
	// B echoes every value it sees.
	go func() {
		defer close(exited)
		var last uint64
		var v [8]byte
		for {
			x := vb.LoadUint64Acquire(0)
			if x == last {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
				continue
			}
			last = x
			putLE(v[:], x)
			k.qb.PostSend(abi.SendWQE{WRID: x, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: bufA.GPA, RKey: bufA.Key}, nil, v[:])
			for _, ok := k.cb.Poll(); !ok; _, ok = k.cb.Poll() {
				runtime.Gosched()
			}
		}
	}()
	rtts := make([]time.Duration, 0, 1<<16)
	i := uint64(0)
	for b.Loop() {
		i++
		putLE(val[:], i)
		t0 := time.Now()
		k.qa.PostSend(abi.SendWQE{WRID: i, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: bufB.GPA, RKey: bufB.Key}, nil, val[:])
		for va.LoadUint64Acquire(0) != i {
			runtime.Gosched()
		}
		rtts = append(rtts, time.Since(t0))
		for _, ok := k.ca.Poll(); !ok; _, ok = k.ca.Poll() {
			runtime.Gosched()
		}
	}
	slices.Sort(rtts)
	if len(rtts) > 0 {
		b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1000, "rtt-p50-us")
		b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds())/1000, "rtt-p99-us")
	}
}

func putLE(b []byte, x uint64) {
	for i := range 8 {
		b[i] = byte(x >> (8 * i))
	}
}

// BenchmarkRespondWrite1MiB is the responder's share of a 1 MiB WRITE on
// one goroutine (no engine loop, no driver): translation plus the one
// copy. Compared with memcpy-1MiB it shows the data path's own overhead,
// apart from scheduling.
func BenchmarkRespondWrite1MiB(b *testing.B) {
	const size = 1 << 20
	k := newLink(b, enginetest.QPOpts{})
	src := k.a.NewBuf(pd, 0, size)
	dst := k.b.NewBuf(pd, abi.AccessAll, size)
	req := &fabric.Request{Op: fabric.OpWrite, Src: fabric.Addr{GID: k.a.GID, QPN: k.qa.QPN}, Dst: fabric.Addr{GID: k.b.GID, QPN: k.qb.QPN},
		RemoteAddr: dst.GPA, RKey: dst.Key, Len: size, Local: []guestmem.View{k.a.View(src.GPA, size)}}
	b.SetBytes(size)
	for b.Loop() {
		if o := k.b.Eng.Respond(req); o != fabric.OutcomeOK {
			b.Fatal(o)
		}
	}
}

// TestRNRNakCarriesRespondersTimer: a responder that answers RNR tells
// the requester its QP's min_rnr_timer through the request, across the
// local fabric, and a request that is answered otherwise carries none.
func TestRNRNakCarriesRespondersTimer(t *testing.T) {
	l := fabric.NewLocal()
	a := enginetest.NewGuest(t, l, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, l, "b", enginetest.Options{})
	ca, cb := a.CreateCQ(16), b.CreateCQ(16)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	ra, rb := enginetest.DefaultConn, enginetest.DefaultConn
	ra.MinRNRTimer, rb.MinRNRTimer = 3, 0 // 0 is 655.36 ms, not "unset"
	qa.ToRTS(b.GID, qb.QPN, ra)
	qb.ToRTS(a.GID, qa.QPN, rb)
	src := a.NewBuf(pd, 0, 8)
	send := func() (*fabric.Request, fabric.Outcome) {
		req := &fabric.Request{Op: fabric.OpSend, Src: fabric.Addr{GID: a.GID, QPN: qa.QPN}, Dst: fabric.Addr{GID: b.GID, QPN: qb.QPN},
			Len: 8, Local: []guestmem.View{a.View(src.GPA, 8)}, RNRTimer: 9}
		c := &outcomeOf{}
		l.Post(req, c)
		return req, c.o
	}
	req, o := send()
	if o != fabric.OutcomeRNR || !req.HasRNRTimer || req.RNRTimer != 0 {
		t.Fatalf("no receive posted: %v, timer %d (set %v), want RNR with the responder's 0", o, req.RNRTimer, req.HasRNRTimer)
	}
	qb.PostRecv(1, b.NewBuf(pd, abi.AccessLocalWrite, 8).SGE(0, 8))
	req, o = send()
	if o != fabric.OutcomeOK || req.HasRNRTimer {
		t.Fatalf("receive posted: %v, timer set %v", o, req.HasRNRTimer)
	}
}

// outcomeOf records the outcome of one request.
type outcomeOf struct{ o fabric.Outcome }

func (c *outcomeOf) Complete(_ *fabric.Request, o fabric.Outcome) { c.o = o }
