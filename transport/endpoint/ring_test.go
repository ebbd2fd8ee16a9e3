package endpoint

import (
	"runtime"
	"sync"
	"testing"
)

// TestRingFIFO: one producer fills the ring, a push to a full ring
// fails, pops return the items in order, and the ring keeps working over
// many laps.
func TestRingFIFO(t *testing.T) {
	var r ring[int]
	r.init(4)
	var v int
	if r.pop(&v) || r.ready() {
		t.Fatal("pop from an empty ring")
	}
	next, want := 0, 0
	for lap := range 100 {
		for range 1 + lap%4 {
			x := next
			if !r.push(&x) {
				t.Fatalf("lap %d: push %d failed", lap, next)
			}
			next++
		}
		if lap%4 == 3 {
			x := -1
			if r.push(&x) {
				t.Fatal("push to a full ring succeeded")
			}
		}
		for r.ready() {
			if !r.pop(&v) || v != want {
				t.Fatalf("lap %d: popped %d, want %d", lap, v, want)
			}
			want++
		}
	}
	if want != next || r.head() != uint64(next) || r.claimed() != uint64(next) {
		t.Fatalf("popped %d of %d; head %d, claimed %d", want, next, r.head(), r.claimed())
	}
}

// TestRingDropsReferences: a popped slot keeps no reference to its item.
func TestRingDropsReferences(t *testing.T) {
	var r ring[*int]
	r.init(2)
	x := new(int)
	r.push(&x)
	var got *int
	r.pop(&got)
	if got != x || r.s[0].v != nil {
		t.Fatal("slot still references the popped item")
	}
}

// TestRingProducersOrder: several producers push concurrently into a
// small ring while the consumer pops; every item arrives once, and each
// producer's items in its order. Run with -race: the slots' sequence
// numbers must order each item's write before its read.
func TestRingProducersOrder(t *testing.T) {
	type item struct{ p, i int }
	const producers, items = 6, 20000
	var r ring[item]
	r.init(16)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range items {
				it := item{p, i}
				for !r.push(&it) {
					runtime.Gosched() // full: let the consumer run
				}
			}
		}()
	}
	var next [producers]int
	var it item
	for n := 0; n < producers*items; {
		if !r.pop(&it) {
			runtime.Gosched()
			continue
		}
		if it.i != next[it.p] {
			t.Fatalf("producer %d: item %d after %d", it.p, it.i, next[it.p]-1)
		}
		next[it.p]++
		n++
	}
	wg.Wait()
	if r.pop(&it) {
		t.Fatalf("extra item %+v", it)
	}
}

// TestRingPushAllocs: push and pop allocate nothing.
func TestRingPushAllocs(t *testing.T) {
	var r ring[item4]
	r.init(8)
	v := item4{a: 1}
	if avg := testing.AllocsPerRun(100, func() {
		r.push(&v)
		r.pop(&v)
	}); avg != 0 {
		t.Fatalf("%.1f allocations per push and pop", avg)
	}
}

type item4 struct{ a, b, c, d uint64 }

// BenchmarkRing measures a push and a pop, uncontended, and pushes from
// parallel producers with the consumer popping.
func BenchmarkRing(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		var r ring[item4]
		r.init(256)
		var v item4
		for b.Loop() {
			r.push(&v)
			r.pop(&v)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var r ring[item4]
		r.init(256)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			var v item4
			for {
				select {
				case <-stop:
					return
				default:
				}
				for r.pop(&v) {
				}
				runtime.Gosched()
			}
		}()
		b.RunParallel(func(pb *testing.PB) {
			v := item4{a: 1}
			for pb.Next() {
				for !r.push(&v) {
					runtime.Gosched()
				}
			}
		})
		close(stop)
		<-done
	})
}
