package pathsel

// ops sprays obliviously: every decision a uniformly random path.
type ops struct{ s *Selector }

func (o ops) pick(avoid int) uint16 { return o.s.random(avoid) }
func (ops) acked(uint16, int64)     {}
func (ops) lost(uint16)             {}

// roundRobin takes the paths in turn, from a seeded start (so the
// connections of one host do not march in step), skipping those down.
type roundRobin struct {
	s    *Selector
	next int
}

func (r *roundRobin) pick(avoid int) uint16 {
	n := len(r.s.paths)
	for i := range n {
		if p := (r.next + i) % n; r.s.usable(p, avoid) {
			r.next = (p + 1) % n
			return uint16(p)
		}
	}
	return r.s.random(avoid)
}
func (*roundRobin) acked(uint16, int64) {}
func (*roundRobin) lost(uint16)         {}

// p2c is UCCL's power of two choices: two random paths, the one with the
// lower EWMA RTT (an unmeasured path counts as the lowest, so it gets
// measured).
type p2c struct{ s *Selector }

func (c p2c) pick(avoid int) uint16 {
	s := c.s
	x := s.rng.uint64()
	a, b := below(uint32(x), len(s.paths)), below(uint32(x>>32), len(s.paths))
	ua, ub := s.usable(a, avoid), s.usable(b, avoid)
	switch {
	case ua && ub:
		if s.paths[b].srtt < s.paths[a].srtt {
			return uint16(b)
		}
		return uint16(a)
	case ua:
		return uint16(a)
	case ub:
		return uint16(b)
	}
	return s.random(avoid)
}
func (p2c) acked(uint16, int64) {}
func (p2c) lost(uint16)         {}
