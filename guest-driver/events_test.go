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
