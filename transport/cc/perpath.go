package cc

// PerPath keeps one controller per path, as UCCL's CubicPP keeps one
// CUBIC per path: acknowledgements and losses move only their path's
// window, so a congested path shrinks its own share and no other.
// Window is the sum of the windows of the paths heard of (an ack or a
// loss) within PathIdle, bounded by MaxWindow; a path not heard of for
// longer keeps its state but leaves the sum until it is heard of again.
// A timeout (nothing acknowledged on any path) reaches every path. Build
// it with New.
type PerPath struct {
	paths []pathState
	total float64 // sum of the active paths' windows
	most  int
	gain  float64
	idle  int64
	sweep int // next path the idle check looks at
}

type pathState struct {
	ctl    controller
	last   int64   // when last heard of
	active bool    // counts in total
	cwnd   float64 // what it adds to total
}

// pathsChecked is how many paths each event checks for idleness: a full
// sweep every Paths/2 events, at O(1) per event.
const pathsChecked = 2

func newPerPath(cfg Config) *PerPath {
	p := &PerPath{paths: make([]pathState, cfg.Paths), most: cfg.MaxWindow, gain: cfg.PacingGain, idle: int64(cfg.PathIdle)}
	for i := range p.paths {
		p.paths[i].ctl = newController(cfg)
	}
	return p
}

// Paths is how many path states it keeps.
func (p *PerPath) Paths() int { return len(p.paths) }

// PathCwnd is the window of path's state.
func (p *PerPath) PathCwnd(path uint16) float64 { return p.state(path).ctl.Cwnd() }

// Cwnd is the sum of the active paths' windows (packets).
func (p *PerPath) Cwnd() float64 { return max(p.total, 0) }

// Window implements transport.CongestionControl.
func (p *PerPath) Window() int { return window(p.total, p.most) }

func (p *PerPath) state(path uint16) *pathState { return &p.paths[int(path)%len(p.paths)] }

// OnAck implements transport.CongestionControl.
func (p *PerPath) OnAck(now int64, path uint16, acked int, rtt int64) {
	st := p.state(path)
	st.ctl.OnAck(now, path, acked, rtt)
	p.heard(now, st)
}

// OnLoss implements transport.CongestionControl.
func (p *PerPath) OnLoss(now int64, path uint16, sentAt int64) {
	st := p.state(path)
	st.ctl.OnLoss(now, path, sentAt)
	p.heard(now, st)
}

// OnTimeout implements transport.CongestionControl: every active path
// times out.
func (p *PerPath) OnTimeout(now int64) {
	p.total = 0
	for i := range p.paths {
		st := &p.paths[i]
		if st.active {
			st.ctl.OnTimeout(now)
			st.cwnd = st.ctl.Cwnd()
			p.total += st.cwnd
		}
	}
}

// MarkUndo implements transport.Undoer: every path's state is kept, as
// the episode's losses may be on any of them.
func (p *PerPath) MarkUndo(now int64) {
	for i := range p.paths {
		p.paths[i].ctl.MarkUndo(now)
	}
}

// Undo implements transport.Undoer: each path takes back its own cuts.
func (p *PerPath) Undo(now int64) bool {
	undone := false
	for i := range p.paths {
		st := &p.paths[i]
		if st.ctl.Undo(now) {
			undone = true
			st.cwnd = st.ctl.Cwnd()
		}
	}
	if undone {
		p.resum()
	}
	return undone
}

// PacingGap implements transport.Pacer: the sum's RTT over the window,
// as a single controller would (srtt is the connection's, over all
// paths).
func (p *PerPath) PacingGap(srtt int64, _ int) int64 {
	return pacingGap(float64(srtt), p.total, p.gain)
}

// heard updates the sum for st's new window and retires idle paths.
func (p *PerPath) heard(now int64, st *pathState) {
	if st.active {
		p.total -= st.cwnd
	}
	st.active, st.last, st.cwnd = true, now, st.ctl.Cwnd()
	p.total += st.cwnd
	for range pathsChecked {
		if p.sweep == 0 {
			p.resum() // float drift stays bounded
		}
		q := &p.paths[p.sweep]
		p.sweep = (p.sweep + 1) % len(p.paths)
		if q.active && now-q.last > p.idle {
			q.active = false
			p.total -= q.cwnd
		}
	}
}

// resum recomputes the sum exactly.
func (p *PerPath) resum() {
	p.total = 0
	for i := range p.paths {
		if p.paths[i].active {
			p.total += p.paths[i].cwnd
		}
	}
}
