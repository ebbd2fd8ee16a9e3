package endpoint

import "sync/atomic"

// ring is a bounded lock-free queue of many producers and one consumer,
// after Dmitry Vyukov's bounded MPMC queue: each slot carries a sequence
// number that says whose turn it is. A producer claims position p with a
// CAS on tail when slot p%size has sequence p (empty for this lap),
// fills it and publishes it by storing p+1; the consumer takes position p
// once it reads p+1 and frees the slot for the next lap by storing
// p+size. Producers contend only on tail; the consumer writes nothing
// they read but the slots' sequences.
//
// Positions are claimed in a total order, and the consumer takes them in
// that order: a slot claimed but not yet published holds back the ones
// behind it (pop reports empty), which keeps each producer's items in
// its order at the cost of waiting for a producer preempted between its
// claim and its publish.
//
// The consumer's methods (pop, head) must not run concurrently with each
// other; the Endpoint calls them under its main lock. ready may be called
// from anywhere: a poller's peek.
type ring[T any] struct {
	// Read-only after init.
	mask uint64
	s    []slot[T]
	// Producers write tail, the consumer pos: each on a line of its own,
	// so a push does not invalidate what a pop reads, nor the reverse.
	_    [64]byte
	tail atomic.Uint64 // next position to claim
	_    [56]byte
	pos  atomic.Uint64 // next position to take: written by the consumer only
	_    [56]byte
}

type slot[T any] struct {
	seq atomic.Uint64
	v   T
}

// init sizes the ring to n slots, a power of two.
func (r *ring[T]) init(n int) {
	if n < 2 || n&(n-1) != 0 {
		panic("endpoint: ring size not a power of two")
	}
	r.s = make([]slot[T], n)
	for i := range r.s {
		r.s[i].seq.Store(uint64(i))
	}
	r.mask = uint64(n - 1)
}

// push appends v, or reports false if the ring is full. Safe from any
// number of goroutines.
func (r *ring[T]) push(v *T) bool {
	p := r.tail.Load()
	for {
		s := &r.s[p&r.mask]
		switch d := int64(s.seq.Load() - p); {
		case d == 0:
			if r.tail.CompareAndSwap(p, p+1) {
				s.v = *v
				s.seq.Store(p + 1)
				return true
			}
			p = r.tail.Load()
		case d < 0:
			// The slot still holds the item of the previous lap.
			return false
		default:
			// Another producer claimed p: look again.
			p = r.tail.Load()
		}
	}
}

// pop takes the oldest item into *v, or reports false if there is none
// published at the head. Consumer only.
func (r *ring[T]) pop(v *T) bool {
	p := r.pos.Load()
	s := &r.s[p&r.mask]
	if s.seq.Load() != p+1 {
		return false
	}
	*v = s.v
	var zero T
	s.v = zero // drop references for the collector
	s.seq.Store(p + r.mask + 1)
	r.pos.Store(p + 1)
	return true
}

// ready reports whether pop would take an item: exactly from the
// consumer; from another goroutine, as a hint that a pop running
// meanwhile may make out of date.
func (r *ring[T]) ready() bool {
	p := r.pos.Load()
	return r.s[p&r.mask].seq.Load() == p+1
}

// head is the position pop takes next. Consumer only.
func (r *ring[T]) head() uint64 { return r.pos.Load() }

// claimed is the position the next push claims: every item pushed, or
// being pushed, is below it.
func (r *ring[T]) claimed() uint64 { return r.tail.Load() }
