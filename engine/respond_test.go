package engine_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// BenchmarkRespond measures the responder's own cost of one small
// request from the in-process fabric (Respond on the benchmark's
// goroutine: no engine loop, no scheduling), per operation kind, so a
// change to the responder shows apart from the noise of a whole verbs
// run.
func BenchmarkRespond(b *testing.B) {
	fab := fabric.NewLocal()
	ga := enginetest.NewGuest(b, fab, "a", enginetest.Options{})
	gb := enginetest.NewGuest(b, fab, "b", enginetest.Options{})
	ca, cb := ga.CreateCQ(64), gb.CreateCQ(64)
	qa, qb := ga.CreateQP(pd, ca, ca, enginetest.QPOpts{}), gb.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	src := ga.NewBuf(pd, abi.AccessLocalWrite, 64)
	dst := gb.NewBuf(pd, abi.AccessAll, 64)
	req := func(op fabric.Op, n uint64) *fabric.Request {
		return &fabric.Request{Op: op, Src: fabric.Addr{GID: ga.GID, QPN: qa.QPN}, Dst: fabric.Addr{GID: gb.GID, QPN: qb.QPN},
			RemoteAddr: dst.GPA, RKey: dst.Key, Len: n, Local: []guestmem.View{ga.View(src.GPA, n)}}
	}
	run := func(name string, r *fabric.Request, before, after func()) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if before != nil {
					before()
				}
				if o := gb.Eng.Respond(r); o != fabric.OutcomeOK {
					b.Fatal(o)
				}
				if after != nil {
					after()
				}
			}
		})
	}
	run("write-8B", req(fabric.OpWrite, 8), nil, nil)
	run("read-8B", req(fabric.OpRead, 8), nil, nil)
	run("fetch-add", req(fabric.OpFetchAdd, 8), nil, nil)
	recv := dst.SGE(0, 64)
	poll := func() {
		if _, ok := cb.Poll(); !ok {
			b.Fatal("no receive completion")
		}
	}
	run("send-8B", req(fabric.OpSend, 8), func() { qb.PostRecv(1, recv) }, poll)
	run("write-imm-8B", req(fabric.OpWriteImm, 8), func() { qb.PostRecv(1) }, poll)
}

// TestConcurrentResponds: local requests to one QP from several
// goroutines at once (the local fabric carries one per connection at a
// time, but Respond is for any caller) each land, and every pin they
// took is let go.
func TestConcurrentResponds(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	rings := p.b.Pins.Held()
	src := p.a.NewBuf(pd, 0, 4096)
	dst := p.b.NewBuf(pd, abi.AccessAll, 4*4096)
	back := p.a.NewBuf(pd, abi.AccessLocalWrite, 4*4096) // what each goroutine reads back
	fill(src.Bytes(), 3)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				op, local := fabric.OpWrite, p.a.View(src.GPA, 4096)
				if i%2 == 1 {
					op, local = fabric.OpRead, p.a.View(back.GPA+uint64(g)*4096, 4096)
				}
				r := &fabric.Request{Op: op, Src: fabric.Addr{GID: p.a.GID, QPN: p.qa.QPN}, Dst: fabric.Addr{GID: p.b.GID, QPN: p.qb.QPN},
					RemoteAddr: dst.GPA + uint64(g)*4096, RKey: dst.Key, Len: 4096, Local: []guestmem.View{local}}
				if o := p.b.Eng.Respond(r); o != fabric.OutcomeOK {
					t.Errorf("goroutine %d, request %d (%v): %v", g, i, op, o)
					return
				}
			}
		})
	}
	wg.Wait()
	for g := range 4 {
		if !bytes.Equal(dst.Bytes()[g*4096:(g+1)*4096], src.Bytes()) || !bytes.Equal(back.Bytes()[g*4096:(g+1)*4096], src.Bytes()) {
			t.Fatalf("goroutine %d's range differs", g)
		}
	}
	if h := p.b.Pins.Held(); h != rings {
		t.Fatalf("%d chunks held after the requests, want the rings' %d", h, rings)
	}
}
