package guestdriver

import (
	"context"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// waitPosted waits until ft has n event buffers posted.
func waitPosted(t *testing.T, ft *fakeTransport, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ft.numPosted() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d event buffers posted, want %d", ft.numPosted(), n)
		}
	}
}

// TestOpenTopsUpEventBuffers: a driver cannot take back its posted event
// buffers, so an Open after another only tops the queue up to
// eventBuffers. The predecessor's buffers still deliver events, and as
// each comes back one of the new Device's spare records replaces it.
func TestOpenTopsUpEventBuffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d1, ft, _ := openFake(t, false)
	waitPosted(t, ft, eventBuffers)
	d1.Close()
	d2, err := Open(ctx, ft)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if n := ft.numPosted(); n != eventBuffers {
		t.Fatalf("%d event buffers posted after a second Open, want %d", n, eventBuffers)
	}
	area := d2.ev.area
	ours := func(b Buffer) bool { return b.GPA >= area.GPA && b.GPA < area.GPA+area.Len() }
	// Every buffer posted now is d1's; fill them all, then some of d2's.
	for round, n := range []int{eventBuffers, 10} {
		for i := range n {
			if !ft.deliverEvent(abi.Event{Type: abi.EventPortActive, Handle: uint32(round*1000 + i)}) {
				t.Fatalf("round %d: no buffer for event %d", round, i)
			}
		}
		for i := range n {
			ev, err := d2.WaitEvent(ctx)
			if err != nil || ev.Handle != uint32(round*1000+i) {
				t.Fatalf("round %d event %d: %+v %v", round, i, ev, err)
			}
		}
		waitPosted(t, ft, eventBuffers)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for _, b := range ft.posted {
		if !ours(b) {
			t.Fatalf("buffer at %#x is still posted, outside the open Device's area", b.GPA)
		}
	}
}

// TestVMReopenKeepsEventQueue: Open and Close ten times on one VM. Each
// Open succeeds (the event queue of 256 would be full after four Opens
// that each added 64 buffers), the queue holds eventBuffers buffers, and
// the last Device still gets its events.
func TestVMReopenKeepsEventQueue(t *testing.T) {
	r := startRig(t, "reopen", nil)
	ctx := testCtx(t)
	tr := NewVMTransport(r.vm)
	d := r.drv
	for i := range 10 {
		d.Close()
		var err error
		if d, err = Open(ctx, tr); err != nil {
			t.Fatalf("Open %d: %v", i+2, err)
		}
		if n, err := tr.PostedEventBuffers(); err != nil || n != eventBuffers {
			t.Fatalf("Open %d: %d event buffers posted (%v), want %d", i+2, n, err, eventBuffers)
		}
	}
	defer d.Close()
	// A CQ notification: a receive on a QP in ERR is flushed, and the
	// flush completion fires the armed CQ.
	pd, err := d.AllocPD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ctx, QPInit{SendCQ: cq, RecvCQ: cq, Cap: QPCap{SQSize: 4, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(ctx, abi.QPAttrState, abi.QPAttr{State: abi.QPStateErr}); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv(RecvWR{WRID: 5}); err != nil {
		t.Fatal(err)
	}
	if err := cq.Wait(ctx); err != nil {
		t.Fatalf("no CQ notification after ten reopens: %v", err)
	}
	checkWC(t, pollOne(t, cq), 5, abi.WCRecv, abi.WCWRFlushErr)
}
