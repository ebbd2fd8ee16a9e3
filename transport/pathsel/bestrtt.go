package pathsel

import "math"

// bestRTT sends on the path with the lowest smoothed RTT. A min
// tournament tree over the paths keeps that path at the root, so a
// decision is O(1) and a report O(log Paths). Unmeasured paths rank
// first (key 0), so the first decisions measure every path; down paths
// rank last. One decision in Explore goes to a random path, so the
// estimates of paths not in use do not go stale for ever.
type bestRTT struct {
	s     *Selector
	n     int      // leaves: a power of two >= Paths
	key   []int64  // per leaf; MaxInt64 for down paths and padding
	tree  []uint16 // tree[i]: the leaf with the lowest key under node i; leaves at n..2n-1
	count int      // decisions since the last exploration
}

func newBestRTT(s *Selector) *bestRTT {
	n := 1
	for n < len(s.paths) {
		n *= 2
	}
	b := &bestRTT{s: s, n: n, key: make([]int64, n), tree: make([]uint16, 2*n)}
	for i := range n {
		if i >= len(s.paths) {
			b.key[i] = math.MaxInt64
		}
		b.tree[n+i] = uint16(i)
	}
	for i := n - 1; i >= 1; i-- {
		b.tree[i] = b.lower(b.tree[2*i], b.tree[2*i+1])
	}
	return b
}

// lower is the leaf of the two with the lower key (the left on a tie:
// deterministic).
func (b *bestRTT) lower(l, r uint16) uint16 {
	if b.key[r] < b.key[l] {
		return r
	}
	return l
}

func (b *bestRTT) update(p uint16) {
	st := &b.s.paths[p]
	k := st.srtt
	if st.down {
		k = math.MaxInt64
	}
	b.key[p] = k
	for i := (int(p) + b.n) / 2; i >= 1; i /= 2 {
		b.tree[i] = b.lower(b.tree[2*i], b.tree[2*i+1])
	}
}

func (b *bestRTT) pick(avoid int) uint16 {
	b.count++
	if b.count >= b.s.cfg.Explore {
		b.count = 0
		return b.s.random(avoid)
	}
	if p := b.tree[1]; b.s.usable(int(p), avoid) {
		return p
	}
	return b.s.random(avoid)
}

func (b *bestRTT) acked(p uint16, _ int64) { b.update(p) }
func (b *bestRTT) lost(p uint16)           { b.update(p) }
