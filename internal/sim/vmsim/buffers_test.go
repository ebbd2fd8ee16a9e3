package vmsim

import (
	"context"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio"
)

func TestPostWritableAndTakeUsed(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := vm.TakeUsed(0); ok || err != nil {
		t.Fatalf("TakeUsed on an idle queue: ok %v err %v", ok, err)
	}
	var bufs []virtio.Buffer
	for i := range 3 {
		gpa, err := vm.Alloc(64, 16)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, virtio.Buffer{Addr: gpa, Len: uint32(16 + i)})
	}
	if err := vm.PostWritable(0, bufs...); err != nil {
		t.Fatal(err)
	}
	// The fake device echoes the (empty) readable part: every chain comes
	// back with 0 bytes written, in the order posted.
	var got []virtio.Buffer
	for len(got) < len(bufs) {
		b, n, ok, err := vm.TakeUsed(0)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if err := vm.WaitUsed(ctx, 0); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if n != 0 {
			t.Errorf("buffer %+v: %d bytes written", b, n)
		}
		got = append(got, b)
	}
	for i := range bufs {
		if got[i] != bufs[i] {
			t.Errorf("used %d = %+v, posted %+v", i, got[i], bufs[i])
		}
	}
	// Nothing else is pending, so a short wait times out.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, ok, _ := vm.TakeUsed(0); ok {
		t.Fatal("a fourth buffer came back")
	}
	for {
		if err := vm.WaitUsed(short, 0); err != nil {
			break // the deadline: no used chain arrived
		}
		if _, _, ok, _ := vm.TakeUsed(0); ok {
			t.Fatal("a fourth buffer came back")
		}
	}

	// A reset lays the rings out anew; the bookkeeping starts over.
	if err := vm.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.PostWritable(0, bufs[0]); err == nil {
		t.Fatal("posted on a reset queue")
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.PostWritable(0, bufs[1]); err != nil {
		t.Fatal(err)
	}
	for {
		b, _, ok, err := vm.TakeUsed(0)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if b != bufs[1] {
				t.Fatalf("after reset: used %+v, posted %+v", b, bufs[1])
			}
			break
		}
		if err := vm.WaitUsed(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPostWritableQueueFull(t *testing.T) {
	ctx := ctx10(t)
	be := newFakeBackend(t, 1)
	vm := newVM(t, be, Config{NumQueues: 1, QueueSize: 4})
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Stop the device's worker so nothing is consumed.
	be.stopWorkers()
	gpa, err := vm.Alloc(64, 16)
	if err != nil {
		t.Fatal(err)
	}
	b := virtio.Buffer{Addr: gpa, Len: 16}
	if err := vm.PostWritable(0, b, b, b, b, b); err == nil {
		t.Fatal("five chains posted on a 4-entry queue")
	}
	if n := vm.Queue(0).NumFree(); n != 0 {
		t.Fatalf("%d descriptors free, want 0 (four posted)", n)
	}
}
