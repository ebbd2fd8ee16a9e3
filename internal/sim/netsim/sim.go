package netsim

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// Endpoint is a sans-IO transport endpoint.
type Endpoint interface {
	// Receive handles a packet arriving at now.
	Receive(now int64, pkt []byte)
	// Transmit writes the next packet to send into buf, if any.
	Transmit(now int64, buf []byte) (pkt []byte, path uint16, ok bool)
	// Timeout is the endpoint's next deadline.
	Timeout() (int64, bool)
	// HandleTimeout runs the timers due at now.
	HandleTimeout(now int64)
}

// Window is a time interval [From, To).
type Window struct{ From, To time.Duration }

func (w Window) has(t int64) bool { return t >= int64(w.From) && t < int64(w.To) }

// Link is one direction between two endpoints.
type Link struct {
	Delay  time.Duration // one-way propagation delay
	Jitter time.Duration // uniform extra delay in [0, Jitter)
	// Rate serialises packets (bits/s; 0: infinitely fast).
	Rate float64
	// Loss, Dup and Reorder are per-packet probabilities: dropped,
	// delivered twice, delayed by an extra ReorderDelay (so later packets
	// overtake it).
	Loss, Dup, Reorder float64
	ReorderDelay       time.Duration
	// Spikes add SpikeDelay to every packet that leaves within them.
	Spikes     []Window
	SpikeDelay time.Duration
	// Partitions drop every packet that leaves within them.
	Partitions []Window
	// PathDelay, if set, adds a per-path delay (multipath: paths differ).
	PathDelay func(path uint16) time.Duration
}

// Stats count what a link did.
type Stats struct {
	Sent, Delivered, Lost, Duplicated, Reordered, Partitioned uint64
	Bytes                                                     uint64
}

type event struct {
	at   int64
	seq  uint64 // ties in insertion order: determinism
	dst  int    // endpoint index; -1: timer check
	pkt  []byte
	node int
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Sim is two endpoints joined by a link each way.
type Sim struct {
	now   int64
	rng   *rand.Rand
	q     queue
	seq   uint64
	eps   [2]Endpoint
	links [2]*Link // links[i]: from endpoint i to 1-i
	busy  [2]int64 // serialisation: when link i is free
	st    [2]Stats
	buf   []byte
	free  [][]byte
	evs   []*event // free events
}

// New creates a simulation of a and b, a→b over ab and b→a over ba, with
// randomness from seed.
func New(seed uint64, a, b Endpoint, ab, ba *Link) *Sim {
	return &Sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), eps: [2]Endpoint{a, b},
		links: [2]*Link{ab, ba}, buf: make([]byte, 1<<16)}
}

// Now is the virtual time (ns).
func (s *Sim) Now() int64 { return s.now }

// Stats returns what link i (0: a→b, 1: b→a) did.
func (s *Sim) Stats(i int) Stats { return s.st[i] }

// Rand is the simulation's random source, for workloads that must be
// deterministic with it.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Run advances until done returns true (checked after every event), no
// event is left, or the virtual time passes limit. It reports whether
// done returned true.
func (s *Sim) Run(limit time.Duration, done func() bool) bool {
	for {
		s.pump(0)
		s.pump(1)
		if done() {
			return true
		}
		// done may have given the endpoints more to send.
		s.pump(0)
		s.pump(1)
		next, ok := s.next()
		if !ok || next > int64(limit) {
			return false
		}
		s.now = next
		s.step()
	}
}

// next is the time of the next event or timer.
func (s *Sim) next() (int64, bool) {
	at, ok := int64(0), false
	if len(s.q) > 0 {
		at, ok = s.q[0].at, true
	}
	for _, e := range s.eps {
		if t, has := e.Timeout(); has && (!ok || t < at) {
			at, ok = max(t, s.now), true
		}
	}
	return at, ok
}

// step runs everything due now.
func (s *Sim) step() {
	for len(s.q) > 0 && s.q[0].at <= s.now {
		e := heap.Pop(&s.q).(*event)
		s.eps[e.dst].Receive(s.now, e.pkt)
		s.free = append(s.free, e.pkt[:cap(e.pkt)])
		e.pkt = nil
		s.evs = append(s.evs, e)
	}
	for _, e := range s.eps {
		if t, has := e.Timeout(); has && t <= s.now {
			e.HandleTimeout(s.now)
		}
	}
}

// pump sends everything endpoint i has to send now.
func (s *Sim) pump(i int) {
	for {
		pkt, path, ok := s.eps[i].Transmit(s.now, s.buf)
		if !ok {
			return
		}
		s.send(i, pkt, path)
	}
}

func (s *Sim) send(i int, pkt []byte, path uint16) {
	l, st := s.links[i], &s.st[i]
	st.Sent++
	st.Bytes += uint64(len(pkt))
	depart := s.now
	if l.Rate > 0 {
		depart = max(depart, s.busy[i])
		s.busy[i] = depart + int64(float64(len(pkt))*8/l.Rate*1e9)
	}
	// Impairments apply when the packet is on the wire.
	for _, w := range l.Partitions {
		if w.has(depart) {
			st.Partitioned++
			return
		}
	}
	if s.rng.Float64() < l.Loss {
		st.Lost++
		return
	}
	copies := 1
	if s.rng.Float64() < l.Dup {
		copies = 2
		st.Duplicated++
	}
	for range copies {
		at := depart + int64(l.Delay)
		if l.Jitter > 0 {
			at += s.rng.Int64N(int64(l.Jitter))
		}
		if l.PathDelay != nil {
			at += int64(l.PathDelay(path))
		}
		for _, w := range l.Spikes {
			if w.has(depart) {
				at += int64(l.SpikeDelay)
			}
		}
		if s.rng.Float64() < l.Reorder {
			st.Reordered++
			at += int64(l.ReorderDelay)
		}
		s.seq++
		var e *event
		if n := len(s.evs); n > 0 {
			e, s.evs = s.evs[n-1], s.evs[:n-1]
		} else {
			e = new(event)
		}
		*e = event{at: at, seq: s.seq, dst: 1 - i, pkt: s.copy(pkt)}
		heap.Push(&s.q, e)
		st.Delivered++
	}
}

func (s *Sim) copy(p []byte) []byte {
	var b []byte
	if n := len(s.free); n > 0 {
		b, s.free = s.free[n-1], s.free[:n-1]
	}
	if cap(b) < len(p) {
		b = make([]byte, len(p), max(len(p), 2048))
	}
	b = b[:len(p)]
	copy(b, p)
	return b
}
