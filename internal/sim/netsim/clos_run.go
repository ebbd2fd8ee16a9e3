package netsim

import "time"

// Where a packet in flight arrives next.
const (
	atSrcLeaf uint8 = iota // off the sender's NIC, at its leaf
	atSpine                // off a leaf uplink, at the spine
	atDstLeaf              // off a spine downlink, at the receiver's leaf
	atHost                 // off the leaf's host port, at the receiver
)

// closPkt is a packet in flight, and the event of its next arrival.
type closPkt struct {
	at    int64
	seq   uint64 // ties in insertion order: determinism
	pkt   []byte
	ep    int // receiving endpoint: flow*2 + side
	src   int // hosts
	dst   int
	spine int // -1: same leaf
	stage uint8
}

// pktHeap is a binary min-heap on (at, seq), typed to avoid the
// interface conversions of container/heap on the hot path.
type pktHeap []*closPkt

func (h pktHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *pktHeap) push(e *closPkt) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *pktHeap) pop() *closPkt {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = nil
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// endpoint is endpoint i: side i%2 of flow i/2.
func (c *Clos) endpoint(i int) Endpoint { return c.flows[i/2].eps[i%2] }

// Run advances until done returns true (checked after every step), no
// event is left, or the virtual time passes limit. It reports whether
// done returned true. After done, every endpoint is asked for what it
// has to send (done may have posted work anywhere), so a step costs
// O(endpoints) besides its events.
func (c *Clos) Run(limit time.Duration, done func() bool) bool {
	for {
		if done() {
			return true
		}
		c.pumpAll()
		next, ok := c.next()
		if !ok || next > int64(limit) {
			return false
		}
		c.now = next
		c.step()
	}
}

// next is the time of the next arrival or endpoint deadline; it keeps
// every endpoint's deadline for step.
func (c *Clos) next() (int64, bool) {
	at, ok := int64(0), false
	if len(c.q) > 0 {
		at, ok = c.q[0].at, true
	}
	for i := range c.deadlines {
		d := &c.deadlines[i]
		d.at, d.ok = c.endpoint(i).Timeout()
		d.touched = false
		if d.ok && (!ok || d.at < at) {
			at, ok = max(d.at, c.now), true
		}
	}
	return at, ok
}

// step runs every arrival and deadline due now. An endpoint nothing
// arrived at still has the deadline next read.
func (c *Clos) step() {
	for len(c.q) > 0 && c.q[0].at <= c.now {
		c.arrive(c.q.pop())
	}
	for i := range c.deadlines {
		d := &c.deadlines[i]
		e := c.endpoint(i)
		if d.touched {
			d.at, d.ok = e.Timeout()
		}
		if d.ok && d.at <= c.now {
			e.HandleTimeout(c.now)
		}
	}
}

func (c *Clos) pumpAll() {
	for i := range 2 * len(c.flows) {
		c.pump(i)
	}
}

// pump puts everything endpoint i has to send now on its host's NIC.
func (c *Clos) pump(i int) {
	f := &c.flows[i/2]
	src, dst := f.src, f.dst
	if i%2 == 1 {
		src, dst = dst, src
	}
	ep := f.eps[i%2]
	for {
		pkt, path, ok := ep.Transmit(c.now, c.buf)
		if !ok {
			return
		}
		e := c.newPkt(pkt)
		e.ep, e.src, e.dst, e.stage = i^1, src, dst, atSrcLeaf
		e.spine = c.Spine(src, dst, path)
		c.enqueue(src, e) // host uplink index == host
	}
}

// arrive moves a packet on from the node it reached.
func (c *Clos) arrive(e *closPkt) {
	cfg := &c.cfg
	hosts := c.Hosts()
	switch e.stage {
	case atSrcLeaf:
		if e.spine < 0 {
			e.stage = atHost
			c.enqueue(hosts+e.dst, e)
			return
		}
		i := 2*hosts + c.leaf(e.src)*cfg.Spines + e.spine
		for _, w := range c.links[i].holes {
			if w.has(c.now) {
				c.links[i].st.BlackHoled++
				c.release(e)
				return
			}
		}
		e.stage = atSpine
		c.enqueue(i, e)
	case atSpine:
		e.stage = atDstLeaf
		c.enqueue(2*hosts+cfg.Leaves*cfg.Spines+e.spine*cfg.Leaves+c.leaf(e.dst), e)
	case atDstLeaf:
		e.stage = atHost
		c.enqueue(hosts+e.dst, e)
	default:
		c.deadlines[e.ep].touched = true
		c.endpoint(e.ep).Receive(c.now, e.pkt)
		c.release(e)
	}
}

// enqueue queues e on link i (or drops it) and schedules its arrival at
// the link's far end.
func (c *Clos) enqueue(i int, e *closPkt) {
	l := &c.links[i]
	if l.loss > 0 && c.rng.Float64() < l.loss {
		l.st.Lost++
		c.release(e)
		return
	}
	ser := int64(float64(len(e.pkt)) * l.nsPerByte)
	start := max(c.now, l.busy)
	backlog := start - c.now + ser // ns of work queued, this packet included
	if l.bufNs > 0 && backlog > l.bufNs {
		l.st.Drops++
		c.release(e)
		return
	}
	l.busy = start + ser
	l.st.Packets++
	l.st.Bytes += uint64(len(e.pkt))
	l.st.MaxQueue = max(l.st.MaxQueue, int(float64(backlog)/l.nsPerByte+0.5))
	c.seq++
	e.at, e.seq = l.busy+int64(c.cfg.Delay), c.seq
	c.q.push(e)
}

// newPkt takes a packet event and a buffer holding a copy of p from the
// free lists.
func (c *Clos) newPkt(p []byte) *closPkt {
	var e *closPkt
	if n := len(c.evs); n > 0 {
		e, c.evs = c.evs[n-1], c.evs[:n-1]
	} else {
		e = new(closPkt)
	}
	var b []byte
	if n := len(c.free); n > 0 {
		b, c.free = c.free[n-1], c.free[:n-1]
	}
	if cap(b) < len(p) {
		b = make([]byte, len(p), max(len(p), 2048))
	}
	b = b[:len(p)]
	copy(b, p)
	*e = closPkt{pkt: b}
	return e
}

// release returns e and its buffer to the free lists.
func (c *Clos) release(e *closPkt) {
	c.free = append(c.free, e.pkt[:cap(e.pkt)])
	e.pkt = nil
	c.evs = append(c.evs, e)
}
