package remote_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
)

// TestResponderInRTR: a QP that stays in RTR serves READs and atomics
// (docs/spec.md §12), as the server of perftest's ib_read_bw and
// ib_atomic_bw does: it never goes to RTS, so it never has a sq_psn of
// its own. Its responses start its stream where the requester expects
// it (the requester's rq_psn, which its requests carry). When it does
// reach RTS later, with the sq_psn the requester was told, its own
// requests follow on the same stream.
func TestResponderInRTR(t *testing.T) {
	a, b := pair(t, opts{})
	for _, send := range []bool{false, true} {
		if err := a.f.Connect(connection(a, b, 100, 200, send, 2, 7)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.f.Connect(connection(b, a, 200, 100, false, 0, 0)); err != nil {
		t.Fatal(err)
	}
	w := newWaiter()

	b.dev.mu.Lock()
	fill(b.dev.mem[300000:365536], 7)
	want := append([]byte(nil), b.dev.mem[300000:365536]...)
	binary.LittleEndian.PutUint64(b.dev.mem[512:], 1000)
	b.dev.mu.Unlock()

	// perftest's ib_read_bw: 64 KiB READs.
	for i := range 3 {
		rv, rp := buffer(t, 65536)
		read := request(a, b, 100, 200, fabric.OpRead)
		read.RemoteAddr, read.Len, read.Local = 300000, 65536, rv
		a.f.Post(read, w)
		if r := w.next(t, 10*time.Second); r.o != fabric.OutcomeOK || !bytes.Equal(rp, want) {
			t.Fatalf("READ %d from a QP in RTR: %v, bytes equal %v", i, r.o, bytes.Equal(rp, want))
		}
	}
	for _, c := range []struct {
		op             fabric.Op
		cmp, swap, old uint64
	}{{fabric.OpFetchAdd, 0, 5, 1000}, {fabric.OpCmpSwap, 1005, 7, 1005}} {
		v, p := buffer(t, 8)
		r := request(a, b, 100, 200, c.op)
		r.RemoteAddr, r.Len, r.Local, r.Compare, r.SwapAdd = 512, 8, v, c.cmp, c.swap
		a.f.Post(r, w)
		if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK || binary.LittleEndian.Uint64(p) != c.old {
			t.Fatalf("%v on a QP in RTR: %v, old %d", c.op, res.o, binary.LittleEndian.Uint64(p))
		}
	}

	// RTS: b's own requests go on the stream its responses started.
	if err := b.f.Connect(connection(b, a, 200, 100, true, 2, 7)); err != nil {
		t.Fatal(err)
	}
	wr, src := writeOf(t, b, a, 200, 100, 5000, 3)
	wr.RemoteAddr = 8192
	b.f.Post(wr, w)
	if r := w.next(t, 10*time.Second); r.o != fabric.OutcomeOK {
		t.Fatalf("WRITE from b after RTS: %v", r.o)
	}
	a.dev.mu.Lock()
	ok := bytes.Equal(a.dev.mem[8192:8192+5000], src)
	a.dev.mu.Unlock()
	if !ok {
		t.Fatal("WRITE from b: wrong bytes")
	}
	rv, _ := buffer(t, 100)
	read := request(a, b, 100, 200, fabric.OpRead)
	read.RemoteAddr, read.Len, read.Local = 300000, 100, rv
	a.f.Post(read, w)
	if r := w.next(t, 10*time.Second); r.o != fabric.OutcomeOK {
		t.Fatalf("READ after b's RTS: %v", r.o)
	}
}
