package pathsel

// reps is Recycled Entropy Packet Spraying (Bonato et al., arXiv
// 2407.21625; UEC's htsim buffer_reps): an entropy whose packet was
// acknowledged without sign of congestion goes into a small FIFO and is
// used again; a decision takes the oldest recycled entropy, or a fresh
// random one when there is none. An RTT above RecyclePercent of the
// minimum stands in for REPS's ECN mark: that entropy, like a lost one,
// is not recycled. (REPS's freeze mode after timeouts is not modelled:
// the selector is not told of timeouts.)
type reps struct {
	s       *Selector
	buf     [MaxRecycleBuffer]uint16
	head, n int
	size    int
}

func (r *reps) pick(avoid int) uint16 {
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
func (r *reps) lost(p uint16) {
	k := 0
	for i := range r.n {
		if e := r.buf[(r.head+i)%r.size]; e != p {
			r.buf[(r.head+k)%r.size] = e
			k++
		}
	}
	r.n = k
}
