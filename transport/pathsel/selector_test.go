package pathsel_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/pathsel"
)

const us = int64(time.Microsecond)

func newSel(t testing.TB, cfg pathsel.Config) *pathsel.Selector {
	t.Helper()
	s, err := pathsel.NewSelector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sprayers are the kinds that spread a connection over its paths.
func sprayers() []pathsel.Kind {
	var ks []pathsel.Kind
	for _, k := range pathsel.Kinds() {
		if k != pathsel.Single {
			ks = append(ks, k)
		}
	}
	return ks
}

func TestKinds(t *testing.T) {
	ks := pathsel.Kinds()
	if len(ks) != 7 || ks[0] != pathsel.Single {
		t.Fatalf("kinds %v", ks)
	}
	seen := map[string]bool{}
	for _, k := range ks {
		name := k.String()
		if seen[name] || strings.HasPrefix(name, "Kind(") {
			t.Errorf("kind %d named %q", k, name)
		}
		seen[name] = true
		for _, s := range []string{name, strings.ToUpper(name), " " + name + "\n"} {
			if got, err := pathsel.ParseKind(s); err != nil || got != k {
				t.Errorf("ParseKind(%q) = %v, %v", s, got, err)
			}
		}
	}
	for _, bad := range []string{"", "ecmp", "rr2"} {
		if _, err := pathsel.ParseKind(bad); !errors.Is(err, pathsel.ErrConfig) {
			t.Errorf("ParseKind(%q): %v", bad, err)
		}
	}
	if s := pathsel.Kind(99).String(); s != "Kind(99)" {
		t.Errorf("Kind(99) is %q", s)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  pathsel.Config
		want string
	}{
		{pathsel.Config{Kind: 7}, "Kind(7)"},
		{pathsel.Config{Kind: pathsel.OPS, Paths: 257}, "257 paths"},
		{pathsel.Config{Kind: pathsel.OPS, Paths: -1}, "-1 paths"},
		{pathsel.Config{Kind: pathsel.Single, Paths: 4, Entropy: 4}, "entropy 4"},
		{pathsel.Config{Kind: pathsel.RR, Chunk: pathsel.MaxChunk + 1}, "chunk"},
		{pathsel.Config{Kind: pathsel.RR, DownAfter: 256}, "down after"},
		{pathsel.Config{Kind: pathsel.RR, ProbeInterval: -time.Second}, "probe interval"},
		{pathsel.Config{Kind: pathsel.RR, ProbeInterval: time.Second, MaxProbeInterval: time.Millisecond}, "probe interval"},
		{pathsel.Config{Kind: pathsel.BestRTT, Explore: -1}, "explore"},
		{pathsel.Config{Kind: pathsel.REPS, RecyclePercent: 99}, "recycle threshold"},
		{pathsel.Config{Kind: pathsel.REPS, RecycleBuffer: 65}, "recycle buffer"},
		{pathsel.Config{Kind: pathsel.REPS, FreezeTime: -time.Millisecond}, "freeze time"},
		{pathsel.Config{Kind: pathsel.REPS, FreezeTime: 2 * time.Second}, "freeze time"},
	} {
		_, err := pathsel.New(tc.cfg)
		if !errors.Is(err, pathsel.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// The defaults are valid for every kind, and the entropy is checked
	// only for Single.
	for _, k := range pathsel.Kinds() {
		s, err := pathsel.NewSelector(pathsel.Config{Kind: k})
		if err != nil || s.Paths() != 128 || s.Kind() != k {
			t.Errorf("%v defaults: %v", k, err)
		}
	}
	if _, err := pathsel.New(pathsel.Config{Kind: pathsel.OPS, Paths: 4, Entropy: 9}); err != nil {
		t.Errorf("entropy on a sprayer: %v", err)
	}
}

// TestSingle: one entropy whatever happens, and never down.
func TestSingle(t *testing.T) {
	s := newSel(t, pathsel.Config{Kind: pathsel.Single, Paths: 8, Entropy: 5})
	for i := range 100 {
		s.OnLoss(int64(i), 5)
		if p := s.SelectPath(int64(i), uint32(i), i%2 == 1); p != 5 {
			t.Fatalf("packet %d on path %d", i, p)
		}
	}
	if s.Down() != 0 || s.Path(5).Losses != 100 || s.Path(5).Down {
		t.Fatalf("down %d, path %+v", s.Down(), s.Path(5))
	}
}

// TestPathState: the shared per-path estimates.
func TestPathState(t *testing.T) {
	s := newSel(t, pathsel.Config{Kind: pathsel.OPS, Paths: 4})
	s.OnAck(100, 2, 8000)
	s.OnAck(200, 2, 16000)
	s.OnAck(300, 2, 0) // an ACK without a sample
	st := s.Path(2)
	if st.SRTT != 9000 || st.MinRTT != 8000 || st.Acks != 3 || st.LastAck != 300 || st.LossRate != 0 {
		t.Fatalf("%+v: want SRTT 8000 + (16000-8000)/8, min 8000, 3 ACKs", st)
	}
	s.OnLoss(400, 2)
	if st := s.Path(2); st.Losses != 1 || st.LossRate <= 0 || st.LossRate > 1 || st.Down {
		t.Fatalf("after a loss: %+v", st)
	}
	if st := s.Path(4); st != (pathsel.PathStats{}) {
		t.Fatalf("path out of range: %+v", st)
	}
	s.OnAck(1, 9, 5) // ignored
	s.OnLoss(1, 9)
}

// script drives a selector with a pseudo-random but fixed sequence of
// decisions and reports, and returns the paths chosen.
func script(s *pathsel.Selector, n int) []uint16 {
	var out []uint16
	x := uint64(12345)
	now := int64(0)
	for i := range n {
		x = x*6364136223846793005 + 1442695040888963407
		now += int64(x>>60) * 100
		p := s.SelectPath(now, uint32(i), x>>59&1 == 1)
		out = append(out, p)
		switch x >> 56 & 3 {
		case 0:
			s.OnLoss(now, p)
		case 1, 2:
			s.OnAck(now, p, 5*us+int64(x>>40&0xffff)*10)
		}
	}
	return out
}

// TestDeterminism: the same seed and calls give the same paths; another
// seed gives others (every kind but Single draws on its seed).
func TestDeterminism(t *testing.T) {
	for _, k := range sprayers() {
		t.Run(k.String(), func(t *testing.T) {
			cfg := pathsel.Config{Kind: k, Paths: 64, Seed: 1}
			a, b := script(newSel(t, cfg), 5000), script(newSel(t, cfg), 5000)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatal("same seed, different paths")
			}
			cfg.Seed = 2
			if c := script(newSel(t, cfg), 5000); fmt.Sprint(a) == fmt.Sprint(c) {
				t.Fatal("seeds 1 and 2 gave the same paths")
			}
		})
	}
}

// TestOPSDistribution: random spraying covers every path about equally.
func TestOPSDistribution(t *testing.T) {
	const paths, n = 128, 128000
	s := newSel(t, pathsel.Config{Kind: pathsel.OPS, Paths: paths, Seed: 3})
	count := make([]int, paths)
	for i := range n {
		count[s.SelectPath(0, uint32(i), false)]++
	}
	// Mean 1000, standard deviation about 32: 20% is six of them.
	for p, c := range count {
		if c < 800 || c > 1200 {
			t.Errorf("path %d: %d of %d", p, c, n)
		}
	}
}

// TestRRDistribution: round robin gives every path the same share, in
// turn.
func TestRRDistribution(t *testing.T) {
	const paths = 10
	s := newSel(t, pathsel.Config{Kind: pathsel.RR, Paths: paths, Seed: 4})
	first := s.SelectPath(0, 0, false)
	for i := 1; i < 10*paths; i++ {
		if p, want := s.SelectPath(0, uint32(i), false), (int(first)+i)%paths; int(p) != want {
			t.Fatalf("decision %d: path %d, want %d", i, p, want)
		}
	}
}

// TestChunk: with Chunk n, new packets change path only every n; a
// retransmission in between is decided alone and does not break the run.
func TestChunk(t *testing.T) {
	const chunk = 8
	for _, k := range sprayers() {
		t.Run(k.String(), func(t *testing.T) {
			s := newSel(t, pathsel.Config{Kind: k, Paths: 32, Seed: 5, Chunk: chunk})
			var paths []uint16
			changes := 0
			for i := range 800 {
				p := s.SelectPath(int64(i)*us, uint32(i), false)
				s.OnAck(int64(i)*us, p, 10*us+int64(i%7)*us)
				if i%5 == 4 {
					s.SelectPath(int64(i)*us, uint32(i-3), true)
				}
				if i%chunk != 0 && p != paths[i-1] {
					t.Fatalf("packet %d on %d, the chunk's path is %d", i, p, paths[i-1])
				}
				if i > 0 && p != paths[i-1] {
					changes++
				}
				paths = append(paths, p)
			}
			// The decisions are not all the same path (BestRTT's are
			// mostly, but it explores).
			if changes == 0 {
				t.Fatal("one path for every chunk")
			}
		})
	}
}

// TestRetransmissionAvoidsLostPath: a retransmission goes on another
// path than the one its packet was lost on; with one path it has no
// choice.
func TestRetransmissionAvoidsLostPath(t *testing.T) {
	for _, k := range sprayers() {
		t.Run(k.String(), func(t *testing.T) {
			s := newSel(t, pathsel.Config{Kind: k, Paths: 16, Seed: 6})
			for psn := range uint32(1000) {
				now := int64(psn) * us
				p := s.SelectPath(now, psn, false)
				s.OnLoss(now, p)
				q := s.SelectPath(now, psn, true)
				if q == p {
					t.Fatalf("psn %d: retransmitted on %d, where it was lost", psn, p)
				}
				s.OnAck(now, q, 10*us)
				s.OnAck(now, p, 10*us) // keep every path up
			}
		})
	}
	for _, k := range sprayers() {
		s := newSel(t, pathsel.Config{Kind: k, Paths: 1})
		s.SelectPath(0, 1, false)
		s.OnLoss(0, 0)
		if p := s.SelectPath(0, 1, true); p != 0 {
			t.Errorf("%v, one path: retransmitted on %d", k, p)
		}
	}
}

// fabric is a fake network for one selector: packets on a dead path are
// reported lost after lag, the others acknowledged after rtt.
type fabric struct {
	s        *pathsel.Selector
	dead     func(p uint16) bool
	rtt, lag int64
	pending  []report // in time order: rtt and lag are constant
	lost     []report
}

type report struct {
	at   int64
	path uint16
}

// run sends one packet per µs from..to and counts the packets sent on
// each path from count on.
func (f *fabric) run(from, to, count int64, sent []int) {
	for now := from; now < to; now += us {
		for len(f.pending) > 0 && f.pending[0].at <= now {
			f.s.OnAck(f.pending[0].at, f.pending[0].path, f.rtt)
			f.pending = f.pending[1:]
		}
		for len(f.lost) > 0 && f.lost[0].at <= now {
			f.s.OnLoss(f.lost[0].at, f.lost[0].path)
			f.lost = f.lost[1:]
		}
		p := f.s.SelectPath(now, uint32(now/us), false)
		if now >= count {
			sent[p]++
		}
		if f.dead(p) {
			f.lost = append(f.lost, report{now + f.lag, p})
		} else {
			f.pending = append(f.pending, report{now + f.rtt, p})
		}
	}
}

// TestBlackHole: every sprayer takes a quarter of its paths that lose
// everything down after a few losses and then sends them only probes;
// when they heal, the probes bring them back.
func TestBlackHole(t *testing.T) {
	const paths = 32
	ms := int64(time.Millisecond)
	for _, k := range sprayers() {
		t.Run(k.String(), func(t *testing.T) {
			s := newSel(t, pathsel.Config{Kind: k, Paths: paths, Seed: 7, MaxProbeInterval: 4 * time.Millisecond})
			healed := false
			f := &fabric{s: s, rtt: 10 * us, lag: 30 * us, dead: func(p uint16) bool { return !healed && p%4 == 1 }}
			sent := make([]int, paths)
			f.run(0, 20*ms, 5*ms, sent)
			// A dead path is down, or no longer chosen at all (REPS
			// stops drawing fresh entropies once its buffer recycles
			// enough good ones); a live one is up.
			onDead, total := 0, 0
			for p, n := range sent {
				total += n
				down := s.Path(uint16(p)).Down
				if dead := f.dead(uint16(p)); dead && !down && n > 0 || !dead && down {
					t.Errorf("path %d (dead %v): down %v, %d packets", p, dead, down, n)
				}
				if f.dead(uint16(p)) {
					onDead += n
				}
			}
			// At most a probe a millisecond per dead path (backing off
			// to one per 4 ms) for 15 ms, a few more for probes falling
			// due between packets.
			if probes := paths / 4 * 15; onDead > probes+paths {
				t.Fatalf("%d of %d packets on dead paths, want about %d probes", onDead, total, probes)
			}
			healed = true
			clear(sent)
			f.run(20*ms, 35*ms, 25*ms, sent)
			if s.Down() != 0 {
				t.Fatalf("%d paths still down after healing", s.Down())
			}
			// REPS keeps reusing the entropies that work while they
			// work: it has no reason to draw the healed ones again.
			for p, n := range sent {
				if n == 0 && k != pathsel.REPS {
					t.Errorf("path %d unused after healing", p)
				}
			}
		})
	}
}

// TestProbeCadence: a down path gets one packet after ProbeInterval,
// then after twice that, and so on up to MaxProbeInterval; an ACK brings
// it back, and going down again starts over.
func TestProbeCadence(t *testing.T) {
	const first, most = 100 * us, 400 * us
	s := newSel(t, pathsel.Config{Kind: pathsel.RR, Paths: 4, ProbeInterval: time.Duration(first), MaxProbeInterval: time.Duration(most)})
	down := func(at int64) {
		for range 3 {
			s.OnLoss(at, 2)
		}
		if s.Down() != 1 || !s.Path(2).Down {
			t.Fatalf("down %d", s.Down())
		}
	}
	// expect lists the times of the probes of a path gone down at from.
	expect := func(from, to int64) []int64 {
		var want []int64
		for at, gap := from+first, 2*first; at < to; at, gap = at+gap, min(2*gap, most) {
			want = append(want, at/us)
		}
		return want
	}
	used := func(from, to int64) []int64 {
		var on2 []int64
		for now := from; now < to; now += us {
			if s.SelectPath(now, uint32(now/us), false) == 2 {
				on2 = append(on2, now/us)
			}
		}
		return on2
	}
	down(0)
	if got, want := used(0, 2000*us), expect(0, 2000*us); fmt.Sprint(got) != fmt.Sprint(want) || len(want) != 6 {
		t.Fatalf("path 2 used at %v µs, want %v", got, want)
	}
	s.OnAck(2000*us, 2, 10*us)
	if s.Down() != 0 {
		t.Fatal("an ACK did not bring the path back")
	}
	down(3000 * us)
	if got, want := used(3000*us, 3500*us), expect(3000*us, 3500*us); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("down again: path 2 used at %v µs, want %v", got, want)
	}
}

// TestAllDown: with every path down something is still chosen, in range.
func TestAllDown(t *testing.T) {
	for _, k := range sprayers() {
		s := newSel(t, pathsel.Config{Kind: k, Paths: 8, DownAfter: 1})
		for p := range uint16(8) {
			s.OnLoss(0, p)
		}
		if s.Down() != 8 {
			t.Fatalf("%v: %d down", k, s.Down())
		}
		for i := range 100 {
			if p := s.SelectPath(int64(i), uint32(i), i%3 == 0); p >= 8 {
				t.Fatalf("%v: path %d", k, p)
			}
		}
	}
}

// TestAllocations: the per-packet calls allocate nothing.
func TestAllocations(t *testing.T) {
	for _, k := range pathsel.Kinds() {
		s := newSel(t, pathsel.Config{Kind: k, Paths: 256, Chunk: 2})
		i := uint32(0)
		allocs := testing.AllocsPerRun(2000, func() {
			i++
			now := int64(i) * us
			p := s.SelectPath(now, i, false)
			switch {
			case i%97 == 0:
				s.OnTimeout(now)
			case i%7 == 0:
				s.OnLoss(now, p)
				s.SelectPath(now, i, true)
			default:
				s.OnAck(now, p, 10*us+int64(i%13)*us)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per packet", k, allocs)
		}
	}
}
