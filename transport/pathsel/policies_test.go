package pathsel_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/pathsel"
)

// TestDWRRWeights: a path at twice the minimum RTT gets about half the
// share of the others; a lossy one less than the others; the rest the
// same.
func TestDWRRWeights(t *testing.T) {
	const paths = 8
	s := newSel(t, pathsel.Config{Kind: pathsel.DWRR, Paths: paths, Seed: 8})
	for i := range 64 {
		for p := range uint16(paths) {
			rtt := 10 * us
			if p == 0 {
				rtt = 20 * us
			}
			if p == 1 && i%8 == 0 {
				s.OnLoss(0, p) // one report in 8 a loss
				continue
			}
			s.OnAck(0, p, rtt)
		}
	}
	count := make([]int, paths)
	for i := range 15000 {
		count[s.SelectPath(0, uint32(i), false)]++
	}
	normal := count[2]
	for p := 3; p < paths; p++ {
		if count[p] < normal-2 || count[p] > normal+2 {
			t.Fatalf("equal paths got %v", count)
		}
	}
	if count[0] < normal*4/10 || count[0] > normal*6/10 {
		t.Errorf("slow path got %d, the others %d: want about half", count[0], normal)
	}
	if count[1] >= normal*9/10 || count[1] < normal/16 {
		t.Errorf("lossy path (loss rate %.2f) got %d, the others %d", s.Path(1).LossRate, count[1], normal)
	}
}

// TestBestRTT: the first decisions measure every path (unmeasured ones
// rank first); then the lowest smoothed RTT carries all but the
// explorations, which reach every path; a best path gone down gives way
// to the next.
func TestBestRTT(t *testing.T) {
	const paths = 16
	s := newSel(t, pathsel.Config{Kind: pathsel.BestRTT, Paths: paths, Seed: 9, Explore: 16})
	seen := map[uint16]bool{}
	for i := range paths - 1 { // the 16th decision explores
		p := s.SelectPath(0, uint32(i), false)
		seen[p] = true
		s.OnAck(0, p, 50*us+int64(p)*us) // path 0 the fastest
	}
	if len(seen) != paths-1 {
		t.Fatalf("first decisions on %d distinct paths: %v", len(seen), seen)
	}
	for p := range uint16(paths) { // path 5 becomes the fastest
		rtt := 50*us + int64(p)*us
		if p == 5 {
			rtt = 20 * us
		}
		for range 40 {
			s.OnAck(0, p, rtt)
		}
	}
	count := make([]int, paths)
	const n = 16000
	for i := range n {
		count[s.SelectPath(0, uint32(i), false)]++
	}
	if lo := n*15/16 - 50; count[5] < lo {
		t.Errorf("best path got %d of %d, want >= %d", count[5], n, lo)
	}
	for p, c := range count {
		if c == 0 {
			t.Errorf("path %d never explored", p)
		}
	}
	for range 3 {
		s.OnLoss(0, 5)
	}
	clear(count)
	for i := range n {
		count[s.SelectPath(0, uint32(i), false)]++
	}
	// Path 0 is the next best; 5 gets only a probe.
	if count[5] > 1 || count[0] < n*15/16-50 {
		t.Errorf("after path 5 went down: %v", count)
	}
}

// TestP2C: of two random paths the lower RTT wins, so with half the paths
// slow the fast half carries about 3/4 of the packets.
func TestP2C(t *testing.T) {
	const paths, n = 64, 40000
	s := newSel(t, pathsel.Config{Kind: pathsel.P2C, Paths: paths, Seed: 10})
	for p := range uint16(paths) {
		rtt := 10 * us
		if p%2 == 1 {
			rtt = 30 * us
		}
		s.OnAck(0, p, rtt)
	}
	fast := 0
	for i := range n {
		if s.SelectPath(0, uint32(i), false)%2 == 0 {
			fast++
		}
	}
	if frac := float64(fast) / n; frac < 0.72 || frac > 0.78 {
		t.Fatalf("fast paths got %.3f of the packets, want about 0.75", frac)
	}
}

// TestREPS: entropies acknowledged fast are reused, oldest first; slow or
// lost ones are not; the buffer keeps the most recent RecycleBuffer.
func TestREPS(t *testing.T) {
	const paths = 256
	s := newSel(t, pathsel.Config{Kind: pathsel.REPS, Paths: paths, Seed: 11, RecycleBuffer: 4})
	s.OnAck(0, 100, 10*us) // the minimum RTT
	if p := s.SelectPath(0, 0, false); p != 100 {
		t.Fatalf("picked %d, want the recycled 100", p)
	}
	// FIFO order.
	for _, p := range []uint16{7, 8, 9} {
		s.OnAck(0, p, 12*us)
	}
	for i, want := range []uint16{7, 8, 9} {
		if p := s.SelectPath(0, uint32(1+i), false); p != want {
			t.Fatalf("pick %d: %d, want %d", i, p, want)
		}
	}
	// A loss removes an entropy from the buffer.
	s.OnAck(0, 20, 10*us)
	s.OnAck(0, 21, 10*us)
	s.OnLoss(0, 20)
	if p := s.SelectPath(0, 10, false); p != 21 {
		t.Fatalf("picked %d after 20 was lost, want 21", p)
	}
	// Overflow keeps the newest four.
	for p := uint16(30); p < 36; p++ {
		s.OnAck(0, p, 10*us)
	}
	for i, want := range []uint16{32, 33, 34, 35} {
		if p := s.SelectPath(0, uint32(20+i), false); p != want {
			t.Fatalf("pick %d: %d, want %d", i, p, want)
		}
	}
	// Above 150% of the minimum RTT is congestion: not recycled, so the
	// entropy comes back only as often as a fresh draw would pick it.
	again := 0
	for i := range 1000 {
		s.OnAck(0, 50, 16*us)
		if s.SelectPath(0, uint32(100+i), false) == 50 {
			again++
		}
	}
	if again > 20 {
		t.Fatalf("a congested entropy was reused %d times in 1000", again)
	}
	// A fast one is reused every time.
	for i := range 1000 {
		s.OnAck(0, 60, 14*us)
		if p := s.SelectPath(0, uint32(2000+i), false); p != 60 {
			t.Fatalf("round %d: picked %d, want the recycled 60", i, p)
		}
	}
}

// TestREPSFreeze: after a retransmission timeout REPS freezes for
// FreezeTime: it cycles through the entropies it holds, in order,
// without consuming them and without drawing fresh ones; an entropy that
// loses a packet leaves; a retransmission skips the path it must avoid.
// After FreezeTime it explores again: the buffer is consumed, then fresh
// entropies are drawn. A buffer less than half full does not freeze.
func TestREPSFreeze(t *testing.T) {
	const paths = 256
	freeze := time.Millisecond
	s := newSel(t, pathsel.Config{Kind: pathsel.REPS, Paths: paths, Seed: 5, RecycleBuffer: 4, FreezeTime: freeze})
	for _, p := range []uint16{10, 11, 12} {
		s.OnAck(0, p, 10*us)
	}
	at := int64(100 * us)
	s.OnTimeout(at)
	psn := uint32(0)
	next := func(now int64) uint16 {
		psn++
		return s.SelectPath(now, psn, false)
	}
	for i := range 30 {
		if p, want := next(at+int64(i)*us), []uint16{10, 11, 12}[i%3]; p != want {
			t.Fatalf("frozen pick %d: %d, want %d", i, p, want)
		}
	}
	s.OnLoss(at, 11)
	seen := map[uint16]int{}
	for range 20 {
		seen[next(at+50*us)]++
	}
	if len(seen) != 2 || seen[10] != 10 || seen[12] != 10 {
		t.Fatalf("frozen after 11 lost: picked %v, want 10 and 12 in turn", seen)
	}
	// A retransmission avoids the path its packet went on.
	s.SelectPath(at+60*us, 1000, false) // psn 1000 goes on 10 or 12
	last := s.SelectPath(at+60*us, 1000, false)
	if p := s.SelectPath(at+61*us, 1000, true); p == last || (p != 10 && p != 12) {
		t.Fatalf("frozen retransmission of a packet last on %d: %d", last, p)
	}
	// Thawed: the two left are consumed, then fresh ones come.
	thaw := at + int64(freeze)
	got := []uint16{next(thaw), next(thaw)}
	if !(got[0] == 10 && got[1] == 12 || got[0] == 12 && got[1] == 10) {
		t.Fatalf("after the freeze: %v, want the buffer's 10 and 12", got)
	}
	fresh := map[uint16]bool{}
	for range 50 {
		fresh[next(thaw)] = true
	}
	if len(fresh) < 40 {
		t.Fatalf("after the freeze, 50 decisions took %d distinct paths: not exploring", len(fresh))
	}

	// Frozen on too little (one entropy in a buffer of four): it
	// explores rather than pile everything onto that one.
	s = newSel(t, pathsel.Config{Kind: pathsel.REPS, Paths: paths, Seed: 5, RecycleBuffer: 4, FreezeTime: freeze})
	s.OnAck(0, 10, 10*us)
	s.OnTimeout(at)
	fresh = map[uint16]bool{}
	for i := range 50 {
		fresh[s.SelectPath(at, uint32(i), false)] = true
	}
	if len(fresh) < 40 {
		t.Fatalf("frozen on one entropy, 50 decisions took %d distinct paths", len(fresh))
	}

	// Without a timeout nothing freezes: the same buffer is consumed.
	s = newSel(t, pathsel.Config{Kind: pathsel.REPS, Paths: paths, Seed: 5, RecycleBuffer: 4, FreezeTime: freeze})
	for _, p := range []uint16{10, 11, 12} {
		s.OnAck(0, p, 10*us)
	}
	fresh = map[uint16]bool{}
	for i := range 50 {
		fresh[s.SelectPath(at, uint32(i), false)] = true
	}
	if len(fresh) < 40 {
		t.Fatalf("unfrozen, 50 decisions took %d distinct paths", len(fresh))
	}
}
