package virtio

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestConcurrentDriverDevice runs a driver goroutine and a device goroutine
// over one queue, each sleeping on its "eventfd" (a 1-buffered channel)
// whenever the other side's notification suppression says it may. A lost
// wakeup shows up as a stall. Under -race this also checks that the Go-side
// state of each queue is touched by one goroutine only (guest memory is
// mmap'd, so the race detector does not see the ring traffic itself).
func TestConcurrentDriverDevice(t *testing.T) {
	for _, eventIdx := range []bool{false, true} {
		t.Run(map[bool]string{false: "flags", true: "event_idx"}[eventIdx], func(t *testing.T) {
			concurrentRun(t, eventIdx, 20000)
		})
	}
}

func concurrentRun(t *testing.T, eventIdx bool, total int) {
	const size = 16
	e := newEnv(t, size)
	drv, dev := e.pair(t, eventIdx)
	kick := make(chan struct{}, 1)
	irq := make(chan struct{}, 1)
	stop := make(chan struct{})
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	const stall = 10 * time.Second

	devErr := make(chan error, 1)
	go func() { // device
		var c Chain
		var buf [8]byte
		for {
			dev.DisableNotify()
			for {
				ok, err := dev.PopInto(&c)
				if err != nil {
					devErr <- err
					return
				}
				if !ok {
					break
				}
				// Echo the 8-byte request (a sequence number) back, +1.
				c.ReadAll(buf[:])
				binary.LittleEndian.PutUint64(buf[:], binary.LittleEndian.Uint64(buf[:])+1)
				dev.Push(c.Head, c.WriteAll(buf[:]))
			}
			if dev.NeedsNotify() {
				signal(irq)
			}
			if dev.EnableNotify() {
				continue
			}
			select {
			case <-kick:
			case <-stop:
				devErr <- nil
				return
			}
		}
	}()

	// Driver: request n carries n in a staging slot in r2 and gets its
	// response in slot n%size of r1. At most size/2 requests are
	// outstanding (two descriptors each), so the slots never collide.
	slot := func(i uint16) uint64 { return r1Base + 16*uint64(i) }
	seqOf := map[uint16]uint64{}
	sent, done := 0, 0
	for done < total {
		for sent < total && drv.NumFree() >= 2 {
			req := r2Base + 16*uint64(sent%(2*size))
			binary.LittleEndian.PutUint64(e.bytes(t, req, 8), uint64(sent))
			h, err := drv.Add([]Buffer{{req, 8}}, []Buffer{{slot(uint16(sent % size)), 8}})
			if err != nil {
				t.Fatal(err)
			}
			seqOf[h] = uint64(sent)
			sent++
		}
		if drv.Publish() {
			signal(kick)
		}
		got := 0
		for {
			h, n, ok := drv.GetUsed()
			if !ok {
				break
			}
			got++
			want := seqOf[h]
			if n != 8 {
				t.Fatalf("head %d: written %d", h, n)
			}
			resp := e.bytes(t, slot(uint16(want%size)), 8)
			if v := binary.LittleEndian.Uint64(resp); v != want+1 {
				t.Fatalf("request %d: response %d", want, v)
			}
			delete(seqOf, h)
			done++
		}
		if drv.Err() != nil {
			t.Fatal(drv.Err())
		}
		if got > 0 || (sent < total && drv.NumFree() >= 2) {
			continue
		}
		if drv.EnableInterrupts() {
			drv.DisableInterrupts()
			continue
		}
		select {
		case <-irq:
		case err := <-devErr:
			t.Fatalf("device stopped: %v", err)
		case <-time.After(stall):
			t.Fatalf("stalled: sent %d done %d, free %d (lost wakeup)", sent, done, drv.NumFree())
		}
		drv.DisableInterrupts()
	}
	close(stop)
	if err := <-devErr; err != nil {
		t.Fatal(err)
	}
	if drv.NumFree() != size {
		t.Fatalf("%d free at the end", drv.NumFree())
	}
}
