package pathsel

// Weights and deficits in 1/wOne of a packet.
const (
	wOne = 1024
	// wMin keeps a slow or lossy path in the rotation at 1/16 of the
	// best one's share, so it is still measured, and bounds the visits a
	// decision takes.
	wMin = wOne / 16
)

// dwrr is deficit weighted round robin: the rotation visits each path in
// turn and credits it its weight; a path sends when it holds a whole
// packet of credit. A path's weight is minRTT/SRTT (queueing halves a
// path's share when it doubles its RTT) times 1 - 4*lossRate.
type dwrr struct {
	s       *Selector
	deficit []int64
	cur     int
}

func newDWRR(s *Selector) *dwrr {
	return &dwrr{s: s, deficit: make([]int64, len(s.paths)), cur: s.rng.intn(len(s.paths))}
}

func (d *dwrr) weight(p int) int64 {
	st := &d.s.paths[p]
	w := int64(wOne)
	if st.srtt > 0 && d.s.minRTT > 0 {
		w = wOne * d.s.minRTT / st.srtt
	}
	w = w * (wOne - min(4*int64(st.lossRate), wOne)) / wOne
	return min(max(w, wMin), wOne)
}

func (d *dwrr) pick(avoid int) uint16 {
	s := d.s
	n := len(s.paths)
	// Every usable path gains at least wMin per round, so this many
	// visits find one if there is one.
	seen := false // a usable path was visited
	for i := range n * (wOne/wMin + 1) {
		p := d.cur
		if s.usable(p, avoid) {
			if d.deficit[p] >= wOne {
				d.deficit[p] -= wOne
				return uint16(p)
			}
			seen = true
		}
		if i == n && !seen {
			break // a whole round and nothing usable
		}
		d.cur = (d.cur + 1) % n
		if q := d.cur; s.paths[q].down {
			d.deficit[q] = 0 // no credit piles up while it is avoided
		} else {
			// The cap keeps a path skipped as a retransmission's avoid
			// from bursting later.
			d.deficit[q] = min(d.deficit[q]+d.weight(q), 2*wOne)
		}
	}
	return s.random(avoid)
}

func (*dwrr) acked(uint16, int64) {}
func (*dwrr) lost(uint16)         {}
