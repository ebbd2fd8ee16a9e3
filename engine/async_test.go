package engine_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// asyncFabric delivers every request on a goroutine of its own after a
// delay, as a fabric between hosts would: Complete comes after Post has
// returned, from another goroutine, while the request still holds views
// of the requester's memory.
type asyncFabric struct {
	*fabric.Local
	delay time.Duration

	mu       sync.Mutex
	inflight map[abi.GID]*atomic.Int64 // requests posted and not yet done with, per source GID
}

func newAsyncFabric(delay time.Duration) *asyncFabric {
	return &asyncFabric{Local: fabric.NewLocal(), delay: delay, inflight: map[abi.GID]*atomic.Int64{}}
}

func (f *asyncFabric) counter(gid abi.GID) *atomic.Int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.inflight[gid]
	if n == nil {
		n = new(atomic.Int64)
		f.inflight[gid] = n
	}
	return n
}

// completer adapts a function to fabric.Completer.
type completer func(*fabric.Request, fabric.Outcome)

func (c completer) Complete(r *fabric.Request, o fabric.Outcome) { c(r, o) }

// Post implements fabric.Fabric.
func (f *asyncFabric) Post(req *fabric.Request, c fabric.Completer) {
	n := f.counter(req.Src.GID)
	n.Add(1)
	go func() {
		time.Sleep(f.delay)
		f.Local.Post(req, completer(func(r *fabric.Request, o fabric.Outcome) {
			n.Add(-1) // the fabric is done with the requester's memory
			c.Complete(r, o)
		}))
	}()
}

// TestQuiesceWithAsynchronousFabric: a control change that takes memory
// away from the data path (here SetMemory, again and again) holds the
// gate only once no request of the device is on the fabric, even though
// the engine goes on posting right up to the moment it takes the gate;
// and traffic over a fabric that completes asynchronously runs through
// it all.
func TestQuiesceWithAsynchronousFabric(t *testing.T) {
	fab := newAsyncFabric(50 * time.Microsecond)
	a := enginetest.NewGuest(t, fab, "a", enginetest.Options{})
	b := enginetest.NewGuest(t, fab, "b", enginetest.Options{})
	ca, cb := a.CreateCQ(256), b.CreateCQ(256)
	qa, qb := a.CreateQP(pd, ca, ca, enginetest.QPOpts{}), b.CreateQP(pd, cb, cb, enginetest.QPOpts{})
	enginetest.Connect(qa, qb, enginetest.DefaultConn)
	src := a.NewBuf(pd, 0, 4096)
	dst := b.NewBuf(pd, abi.AccessAll, 4096)
	fill(src.Bytes(), 3)

	var quiets, violations atomic.Int64
	inflight := fab.counter(a.GID)
	a.Eng.SetQuiet(func() {
		quiets.Add(1)
		if inflight.Load() != 0 {
			violations.Add(1)
		}
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	var completed atomic.Int64
	var bad atomic.Value
	go func() {
		defer close(done)
		posted := int64(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for posted-completed.Load() < 16 {
				qa.PostSend(abi.SendWQE{WRID: uint64(posted), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key},
					[]abi.SGE{src.SGE(0, 4096)}, nil)
				posted++
			}
			c, ok := ca.Poll()
			if !ok {
				time.Sleep(10 * time.Microsecond)
				continue
			}
			if c.Status != abi.WCSuccess {
				bad.Store(c)
				return
			}
			completed.Add(1)
		}
	}()
	for range 300 {
		if err := a.Eng.SetMemory(a.Mem); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	close(stop)
	<-done
	if c := bad.Load(); c != nil {
		t.Fatalf("completion %+v", c)
	}
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d of %d quiesced control changes had requests on the fabric", v, quiets.Load())
	}
	if n := completed.Load(); n < 100 {
		t.Fatalf("only %d WRITEs completed", n)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
	t.Logf("%d WRITEs, %d quiesced SetMemory calls", completed.Load(), quiets.Load())
}
