package cc

import "math"

// delayWindow keeps the latest RTT samples and answers a quantile of the
// newest of them: Swift's robust delay.
type delayWindow struct {
	val, at []int64 // ring of samples and when they were taken
	head, n int     // next slot; samples held
	q       float64
	scratch []int64 // selection works on a copy
}

// minKeep is the fewest samples the quantile covers when that many are
// recent: at small windows (few samples per RTT) it reaches back a few
// RTTs, so that a quarter of slow paths moves the median with odds below
// 1e-3 (binomial, 16 of 32) rather than several percent (8 of 16).
const minKeep = 32

func newDelayWindow(size int, q float64) delayWindow {
	return delayWindow{val: make([]int64, size), at: make([]int64, size), q: q, scratch: make([]int64, size)}
}

// add records sample v taken at now.
func (d *delayWindow) add(now, v int64) {
	d.val[d.head], d.at[d.head] = v, now
	d.head = (d.head + 1) % len(d.val)
	d.n = min(d.n+1, len(d.val))
}

// quantile is the q-quantile (nearest rank) of the newest count samples
// (at least minKeep, at most those held), leaving out those taken before
// now-horizon but the newest; 0 if there are none. The horizon keeps a
// connection that samples rarely (a window below one packet) from
// following a delay long gone: it falls back to its latest samples.
func (d *delayWindow) quantile(now, horizon int64, count int) int64 {
	m := 0
	for i := range min(max(count, minKeep), d.n) {
		j := (d.head - 1 - i + len(d.val)) % len(d.val)
		if i > 0 && d.at[j] < now-horizon {
			break // samples are in time order: the rest are older
		}
		d.scratch[m] = d.val[j]
		m++
	}
	if m == 0 {
		return 0
	}
	k := int(math.Ceil(d.q*float64(m))) - 1 // nearest rank
	return selectK(d.scratch[:m], min(max(k, 0), m-1))
}

// selectK returns the k-th smallest of a (reordering it): quickselect
// with a median-of-three pivot, deterministic.
func selectK(a []int64, k int) int64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Order a[lo], a[mid], a[hi]; the median goes to mid.
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		p := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < p {
				i++
			}
			for a[j] > p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}
