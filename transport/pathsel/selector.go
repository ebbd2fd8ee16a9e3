package pathsel

import (
	"fmt"

	"github.com/vstellar/vstellar/transport"
)

// histSize is how many recent packets' paths a selector remembers, by
// PSN, so a retransmission can avoid the path its packet was lost on: a
// power of two above the transport's 256-packet window.
const histSize = 1024

// noPath means no path to avoid.
const noPath = -1

// policy is what differs between the spraying kinds: how a fresh
// decision is made, and what they learn beyond the shared path state.
type policy interface {
	// pick returns a path for a new decision, preferring one that is up
	// and is not avoid (noPath: none to avoid).
	pick(avoid int) uint16
	// acked and lost run after the shared state took the report
	// (including a path's coming back up or going down).
	acked(path uint16, rtt int64)
	lost(path uint16)
}

// freezer is a policy that changes course after a retransmission
// timeout (REPS's freeze mode).
type freezer interface{ timeout(now int64) }

// Selector is a path selector of any Kind. It implements
// transport.PathSelector; like the connection that calls it, it is not
// safe for concurrent use.
type Selector struct {
	cfg    Config
	paths  []pathState
	rng    rng
	pol    policy // nil: Single
	minRTT int64  // smallest RTT sample on any path; 0: none yet

	// Black holes: ndown paths are down; none may be probed before
	// nextProbe.
	ndown     int
	nextProbe int64

	// strict is set while a retransmission's path is chosen: it must
	// not be a path that lost a packet since its last ACK.
	strict bool

	// Chunk: cur carries left more new packets.
	cur  uint16
	left int

	// now is the time of the decision being made (for the policies).
	now int64

	hist [histSize]uint16 // path of the last transmission of psn%histSize
}

var _ transport.PathSelector = (*Selector)(nil)

// New returns a selector for cfg.
func New(cfg Config) (transport.PathSelector, error) {
	s, err := NewSelector(cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewSelector is New returning the concrete selector, for callers that
// also inspect its paths.
func NewSelector(cfg Config) (*Selector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Selector{cfg: cfg, paths: make([]pathState, cfg.Paths), rng: newRNG(cfg.Seed)}
	switch cfg.Kind {
	case Single:
	case OPS:
		s.pol = ops{s}
	case RR:
		s.pol = &roundRobin{s: s, next: s.rng.intn(cfg.Paths)}
	case DWRR:
		s.pol = newDWRR(s)
	case BestRTT:
		s.pol = newBestRTT(s)
	case P2C:
		s.pol = p2c{s}
	case REPS:
		s.pol = &reps{s: s, size: cfg.RecycleBuffer}
	default:
		return nil, fmt.Errorf("pathsel: %v: %w", cfg.Kind, ErrConfig)
	}
	return s, nil
}

// Kind is the selector's policy.
func (s *Selector) Kind() Kind { return s.cfg.Kind }

// Paths is the number of paths.
func (s *Selector) Paths() int { return len(s.paths) }

// Path returns what the selector knows of path p (zero if p >= Paths).
func (s *Selector) Path(p uint16) PathStats {
	if int(p) >= len(s.paths) {
		return PathStats{}
	}
	return s.paths[p].stats()
}

// Down is the number of paths currently down.
func (s *Selector) Down() int { return s.ndown }

// SelectPath implements transport.PathSelector: a due probe of a down
// path first, else the current chunk's path, else the policy's choice.
// A retransmission avoids the path psn was last sent on, and any path
// that lost a packet since its last ACK, where the policy has another:
// a packet lost once is not risked on a path that may be dead.
func (s *Selector) SelectPath(now int64, psn uint32, retx bool) uint16 {
	if s.pol == nil {
		return s.cfg.Entropy
	}
	s.now = now
	avoid := noPath
	if retx {
		avoid = int(s.hist[psn%histSize])
	}
	// Only new packets probe: a packet already lost once is not risked
	// on a path that may be dead (a stuck packet retransmitted at every
	// timeout would otherwise probe every down path in turn).
	p, ok := uint16(0), false
	if !retx && s.ndown > 0 && now >= s.nextProbe {
		p, ok = s.probe(now)
	}
	switch {
	case ok:
	case !retx && s.left > 0 && !s.paths[s.cur].down:
		p = s.cur
		s.left--
	default:
		s.strict = retx
		p = s.pol.pick(avoid)
		s.strict = false
		if !retx {
			s.cur, s.left = p, s.cfg.Chunk-1
		}
	}
	s.hist[psn%histSize] = p
	return p
}

// OnAck implements transport.PathSelector. An ACK brings a down path
// back up.
func (s *Selector) OnAck(now int64, path uint16, rtt int64) {
	if int(path) >= len(s.paths) {
		return
	}
	st := &s.paths[path]
	st.ack(now, rtt)
	if rtt > 0 && (s.minRTT == 0 || rtt < s.minRTT) {
		s.minRTT = min(rtt, maxRTT)
	}
	if st.down {
		st.down = false
		s.ndown--
	}
	if s.pol != nil {
		s.pol.acked(path, rtt)
	}
}

// OnLoss implements transport.PathSelector. DownAfter losses in a row
// take a path down (not Single's: it has no other).
func (s *Selector) OnLoss(now int64, path uint16) {
	if int(path) >= len(s.paths) {
		return
	}
	st := &s.paths[path]
	st.loss()
	if s.pol == nil {
		return
	}
	if !st.down && int(st.consec) >= s.cfg.DownAfter {
		st.down = true
		st.probeAt = now + int64(s.cfg.ProbeInterval)
		st.probeGap = min(2*int64(s.cfg.ProbeInterval), int64(s.cfg.MaxProbeInterval))
		if s.ndown == 0 || st.probeAt < s.nextProbe {
			s.nextProbe = st.probeAt
		}
		s.ndown++
	}
	s.pol.lost(path)
}

// OnTimeout implements transport.PathSelector. REPS freezes (see
// reps). The other kinds need nothing more: the timeout declares every
// packet in flight lost, and each loss, reported to OnLoss, already
// makes its path suspect (a retransmission avoids it; DownAfter in a row
// take it down for probing).
func (s *Selector) OnTimeout(now int64) {
	if f, ok := s.pol.(freezer); ok {
		f.timeout(now)
	}
}

// probe picks the down path waiting longest for its probe, if one is
// due, and schedules its next, twice as far off up to MaxProbeInterval.
// It scans the paths, but only when a probe is due: at most once per
// ProbeInterval per down path.
func (s *Selector) probe(now int64) (uint16, bool) {
	best := noPath
	for i := range s.paths {
		st := &s.paths[i]
		if st.down && st.probeAt <= now && (best == noPath || st.probeAt < s.paths[best].probeAt) {
			best = i
		}
	}
	if best != noPath {
		st := &s.paths[best]
		st.probeAt = now + st.probeGap
		st.probeGap = min(2*st.probeGap, int64(s.cfg.MaxProbeInterval))
	}
	s.nextProbe = 0
	first := true
	for i := range s.paths {
		if st := &s.paths[i]; st.down && (first || st.probeAt < s.nextProbe) {
			s.nextProbe, first = st.probeAt, false
		}
	}
	return uint16(max(best, 0)), best != noPath
}

// usable: p is up and not the path to avoid; for a retransmission
// (strict), it has also lost nothing since its last ACK.
func (s *Selector) usable(p, avoid int) bool {
	st := &s.paths[p]
	return !st.down && p != avoid && !(s.strict && st.consec > 0)
}

// random draws a usable path uniformly; when most paths are down it
// scans from a random start, and when none is usable it returns any
// path but avoid (something must carry the packet).
func (s *Selector) random(avoid int) uint16 {
	n := len(s.paths)
	for range 4 {
		if p := s.rng.intn(n); s.usable(p, avoid) {
			return uint16(p)
		}
	}
	start := s.rng.intn(n)
	for i := range n {
		if p := (start + i) % n; s.usable(p, avoid) {
			return uint16(p)
		}
	}
	if s.strict { // no clean path: any up path will do
		s.strict = false
		p := s.random(avoid)
		s.strict = true
		return p
	}
	if n > 1 && avoid >= 0 {
		p := s.rng.intn(n - 1)
		if p >= avoid {
			p++
		}
		return uint16(p)
	}
	return uint16(s.rng.intn(n))
}
