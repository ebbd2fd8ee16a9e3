package pathsel

// reps is Recycled Entropy Packet Spraying (Bonato et al., arXiv
// 2407.21625; UEC's htsim buffer_reps): an entropy whose packet was
// acknowledged without sign of congestion goes into a small FIFO and is
// used again; a decision takes the oldest recycled entropy, or a fresh
// random one when there is none. An RTT above RecyclePercent of the
// minimum stands in for REPS's ECN mark: that entropy, like a lost one,
// is not recycled.
//
// Freeze mode (REPS's answer to failures): a retransmission timeout
// says packets vanished, likely on paths that died. For FreezeTime after
// it, REPS stops exploring: decisions cycle through the entropies the
// buffer holds without consuming them, so the known-good paths carry
// everything while fresh draws (a quarter of them onto a dead spine,
// say) would lose more. A fresh entropy is drawn only when no recycled
// one is usable; a lost one still leaves the buffer. REPS sizes its
// buffer to the window; ours is small (RecycleBuffer, 8), and under load
// few entropies qualify for it, so a freeze on what it holds could pile
// the whole window onto one or two paths: it freezes only while the
// buffer is at least half full, and otherwise explores as usual.
type reps struct {
	s       *Selector
	buf     [MaxRecycleBuffer]uint16
	head, n int
	size    int
	// frozenUntil: in freeze mode while now is before it. next is the
	// buffer position (from head) the next frozen decision takes.
	frozenUntil int64
	frozen      bool
	next        int
}

func (r *reps) pick(avoid int) uint16 {
	if r.frozen && r.s.now >= r.frozenUntil {
		r.frozen = false
	}
	if r.frozen && 2*r.n >= r.size {
		return r.recycle(avoid)
	}
	// Not frozen, or too little to freeze on: the oldest recycled
	// entropy, consumed.
	for r.n > 0 {
		p := r.buf[r.head]
		r.head = (r.head + 1) % r.size
		r.n--
		// One that went down since, or the one a retransmission must
		// avoid, is dropped: the buffer holds what just worked.
		if r.s.usable(int(p), avoid) {
			return p
		}
	}
	return r.s.random(avoid)
}

// recycle is a frozen decision: the buffer's entropies in turn, left in
// place; one that went down leaves it, the one to avoid is skipped.
func (r *reps) recycle(avoid int) uint16 {
	for range r.n {
		i := r.next % r.n
		p := r.buf[(r.head+i)%r.size]
		switch {
		case r.s.paths[p].down:
			r.remove(p)
			continue
		case r.s.usable(int(p), avoid):
			r.next = i + 1
			return p
		}
		r.next = i + 1
	}
	return r.s.random(avoid)
}

// timeout enters freeze mode, or extends it, until FreezeTime from now.
func (r *reps) timeout(now int64) {
	r.frozen, r.frozenUntil = true, now+int64(r.s.cfg.FreezeTime)
}

func (r *reps) acked(p uint16, rtt int64) {
	if rtt <= 0 || rtt > r.s.minRTT*int64(r.s.cfg.RecyclePercent)/100 {
		return
	}
	if r.n == r.size { // full: the oldest goes
		r.head = (r.head + 1) % r.size
		r.n--
	}
	r.buf[(r.head+r.n)%r.size] = p
	r.n++
}

// lost removes p from the buffer: an entropy that just lost a packet is
// not reused.
func (r *reps) lost(p uint16) { r.remove(p) }

// remove takes every copy of p out of the buffer.
func (r *reps) remove(p uint16) {
	k := 0
	for i := range r.n {
		if e := r.buf[(r.head+i)%r.size]; e != p {
			r.buf[(r.head+k)%r.size] = e
			k++
		}
	}
	r.n = k
}
