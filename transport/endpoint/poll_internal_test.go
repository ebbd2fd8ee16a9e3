package endpoint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// pairLo is two endpoints on loopback with connection 1 on a to 2 on b;
// ring, if not 0, resizes a's submission ring.
func pairLo(t *testing.T, o Options, ring int, done func(transport.Completion)) (a, b *Endpoint) {
	t.Helper()
	sa, sb := listenLo(t), listenLo(t)
	a, b = NewWith(sa, nil, o), NewWith(sb, nil, o)
	if ring != 0 {
		a.subs.init(ring) // before any push
	}
	for i, side := range []struct {
		e           *Endpoint
		local, peer uint32
		to          *Endpoint
		done        func(transport.Completion)
	}{{a, 1, 2, b, done}, {b, 2, 1, a, nil}} {
		c, err := transport.NewConn(transport.Config{Tenant: 1, LocalConn: side.local, LocalToken: uint64(side.local) * 3,
			RemoteConn: side.peer, RemoteToken: uint64(side.peer) * 3, MaxPayload: 1024}, nopSink{})
		if err != nil {
			t.Fatal(err)
		}
		if err := side.e.Add(side.local, c, side.to.sock.LocalAddr(0), 1, side.done); err != nil {
			t.Fatalf("side %d: %v", i, err)
		}
	}
	return a, b
}

// start runs e's loop until the test ends.
func start(t *testing.T, e *Endpoint) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestSpillKeepsOrder: with a ring of 4 slots, several submitters
// overflow it (into the spill) while the loop drains it; every message
// completes once, and each submitter's in its order.
func TestSpillKeepsOrder(t *testing.T) { BothModes(t, testSpillKeepsOrder) }

func testSpillKeepsOrder(t *testing.T, o Options) {
	const workers, msgs = 4, 600
	var mu sync.Mutex
	last := map[int]int{}
	var total atomic.Int64
	all := make(chan struct{})
	a, b := pairLo(t, o, 4, func(c transport.Completion) {
		w, i := int(c.Token>>32), int(uint32(c.Token))
		mu.Lock()
		defer mu.Unlock()
		if c.Status != transport.StatusOK {
			t.Errorf("completion %+v", c)
		}
		if prev, ok := last[w]; ok && i != prev+1 || !ok && i != 0 {
			t.Errorf("worker %d: message %d completed after %d", w, i, prev)
		}
		last[w] = i
		if total.Add(1) == workers*msgs {
			close(all)
		}
	})
	start(t, b)
	// Half the messages before a's loop runs: they overflow the ring.
	var wg sync.WaitGroup
	submit := func(from, to int) {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Larger than inlineMaxLen: always the loop's.
				p := make([]byte, 5000)
				for i := from; i < to; i++ {
					m := transport.Message{Op: wire.OpWrite, Len: 5000, Src: bytesSrc(p), Token: uint64(w)<<32 | uint64(i)}
					if err := a.Submit(1, m); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	submit(0, msgs/2)
	if !a.spilling.Load() {
		t.Fatal("the ring of 4 did not overflow")
	}
	start(t, a)
	submit(msgs/2, msgs)
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d of %d completions", total.Load(), workers*msgs)
	}
}

// TestRemoveRacesSubmit: Remove while submitters keep submitting (into a
// small ring, so through the spill too): every Submit that returned nil
// completes exactly once, before Remove returns, and the rest fail with
// ErrNoConn.
func TestRemoveRacesSubmit(t *testing.T) { BothModes(t, testRemoveRacesSubmit) }

func testRemoveRacesSubmit(t *testing.T, o Options) {
	for round := range 20 {
		var comps sync.Map
		var removed atomic.Bool
		var late atomic.Int64
		a, _ := pairLo(t, o, 8, func(c transport.Completion) {
			if removed.Load() {
				late.Add(1)
			}
			if _, dup := comps.LoadOrStore(c.Token, true); dup {
				t.Errorf("round %d: token %#x completed twice", round, c.Token)
			}
		})
		start(t, a)
		const workers = 3
		var accepted [workers][]uint64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := make([]byte, 5000)
				for i := 0; ; i++ {
					tok := uint64(w)<<32 | uint64(i)
					// Small and large: inline and queued.
					n := uint32(64)
					if i%3 == 0 {
						n = 5000
					}
					err := a.Submit(1, transport.Message{Op: wire.OpWrite, Len: n, Src: bytesSrc(p), Token: tok})
					if errors.Is(err, ErrNoConn) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					accepted[w] = append(accepted[w], tok)
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		a.Remove(1)
		removed.Store(true)
		wg.Wait()
		for w := range workers {
			for _, tok := range accepted[w] {
				if _, ok := comps.Load(tok); !ok {
					t.Fatalf("round %d: accepted token %#x never completed", round, tok)
				}
			}
		}
		if n := late.Load(); n != 0 {
			t.Fatalf("round %d: %d completions after Remove returned", round, n)
		}
	}
}

// TestSubmitAllocs: a submission that goes through the ring, and its
// collection by the loop, allocate nothing.
func TestSubmitAllocs(t *testing.T) {
	a, _ := pairLo(t, Options{}, 0, nil)
	p := make([]byte, 8000)
	m := transport.Message{Op: wire.OpWrite, Len: 8000, Src: bytesSrc(p)}
	en := a.conns[1]
	once := func() {
		if err := a.Submit(1, m); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		a.collect()
		if len(en.q) != 1 || en.queued.Load() != 1 {
			t.Fatalf("queue %d, queued %d", len(en.q), en.queued.Load())
		}
		// As if posted.
		en.q, en.pending, a.pending = en.q[:0], false, a.pending[:0]
		en.queued.Add(-1)
		a.mu.Unlock()
	}
	once()
	if avg := testing.AllocsPerRun(200, once); avg != 0 {
		t.Fatalf("%.1f allocations per submission", avg)
	}
}

// TestIdlePollingSleeps: a polling endpoint exchanges messages, then,
// idle, goes back to blocking: its busy time stops growing.
func TestIdlePollingSleeps(t *testing.T) {
	pollingProcs(t)
	done := make(chan transport.Completion, 100)
	a, b := pairLo(t, Options{Poll: &Polling{}}, 0, func(c transport.Completion) { done <- c })
	if on, cpu := a.Polling(); !on || cpu != -1 {
		t.Fatalf("Polling() = %v, %d", on, cpu)
	}
	start(t, a)
	start(t, b)
	p := make([]byte, 5000)
	for i := range 50 {
		if err := a.Submit(1, transport.Message{Op: wire.OpWrite, Len: uint32(len(p)), Src: bytesSrc(p), Token: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		select {
		case c := <-done:
			if c.Status != transport.StatusOK {
				t.Fatalf("completion %+v", c)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("timed out")
		}
	}
	if a.Busy() == 0 {
		t.Fatal("no busy time while exchanging")
	}
	time.Sleep(20 * time.Millisecond) // done spinning
	before := a.Busy()
	const idle = 100 * time.Millisecond
	time.Sleep(idle)
	// Waking every maxIdle for its timers costs a little; spinning all
	// along would cost all of it.
	if grew := a.Busy() - before; grew > idle/10 {
		t.Fatalf("busy %v of %v idle: the loop did not go back to blocking", grew, idle)
	}
	if (New(a.sock, nil)).Busy() != 0 {
		t.Fatal("a blocking endpoint reports busy time")
	}
}
