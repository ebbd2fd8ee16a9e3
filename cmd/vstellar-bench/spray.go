package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/transport/pathsel"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The spray and failover suites (see the package doc) run VMs on a
// hostsim.Cluster: in-process vstellard hosts on a netlab leaf-spine.

const sprayMethod = `hostsim.Cluster on a netlab leaf-spine of network namespaces: 2 leaves of
4 hosts, 4 spines, every host an in-process vstellard with a VM; leaf-spine
links 250 Mb/s (a bisection of 1 Gb/s each way), host links 500 Mb/s, MTU
9000, 128 UDP source ports per host, CC cubic. Permutation traffic: host i
under leaf 0 and host i under leaf 1 stream RDMA WRITEs both ways on one RC
QP pair. Each path selector runs on a fresh cluster with the same ECMP hash
seed; the single path runs several times, a hash seed each (which flows
collide varies), and is averaged. Goodput as a fraction of the bisection
in both directions.`

var sprayGoals = []goal{
	atLeast("best_frac", 0.9, "the best sprayer's fraction of the bisection"),
	atLeast("ratio", 1.3, "best sprayer / single path"),
}

const failoverMethod = `The spray suite's fabric; host i under leaf 0 sends a fixed amount of
64 KiB WRITEs to host i under leaf 1. After a warm-up, leaf 0 drops
everything it sends to its busiest spine (a black hole: the route is
kept). Completed bytes are sampled every 2 ms; recovery is the end of the
first 20 ms window after the failure whose goodput is back above 70% of
the remaining capacity, and the post-failure fraction is the goodput
after recovery over that capacity. Each selector runs on a fresh cluster;
the headline is the best sprayer that finished its transfer.`

var failoverGoals = []goal{
	within("recover_ms", 0, 50, "-1: no sprayer finished its transfer and recovered"),
	atLeast("post_failure_frac", 0.7, "of the remaining capacity"),
}

// sprayPaths is the UDP source ports (entropies) per host.
const sprayPaths = 128

// fabricParams is the testbed and the load of one suite run.
type fabricParams struct {
	hosts    int    // per leaf
	spines   int    // leaves are always 2
	linkRate uint64 // each leaf<->spine link, bits/s per direction
	mtu      int
	cc       string
	size     int // bytes per WRITE
	qps      int // QP pairs per host pair
}

// bisection is the capacity between the leaves, one direction, in bits/s.
func (p fabricParams) bisection() float64 { return float64(p.spines) * float64(p.linkRate) }

// hostRate is each host link's limit: twice a host's fair share of the
// bisection, so that the spines, not the hosts' links, are the
// bottleneck, while a host still cannot take the whole fabric.
func (p fabricParams) hostRate() uint64 { return 2 * uint64(p.spines) * p.linkRate / uint64(p.hosts) }

func (p fabricParams) net(seed uint32) netlab.LeafSpineOptions {
	return netlab.LeafSpineOptions{Prefix: "vsspray", Leaves: 2, HostsPerLeaf: p.hosts, Spines: p.spines,
		MTU: p.mtu, LinkRate: p.linkRate, HostRate: p.hostRate(), HashSeed: seed}
}

// benchCluster is a cluster with a VM on every host, its QPs connected
// to its partner's (the same index under the other leaf).
type benchCluster struct {
	c     *hostsim.Cluster
	sides [2][]*vmSide // [leaf][i]
}

func newBenchCluster(ctx context.Context, p fabricParams, spray string, seed uint32) (_ *benchCluster, err error) {
	c, err := hostsim.NewCluster(ctx, hostsim.ClusterOptions{Net: p.net(seed), Spray: spray, CC: p.cc, Paths: sprayPaths})
	if err != nil {
		return nil, err
	}
	b := &benchCluster{c: c}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	for l := range 2 {
		for i := range p.hosts {
			s, err := newVMSide(ctx, c.Host(l, i), fmt.Sprintf("spray-%d-%d", l, i), p.qps)
			if err != nil {
				return nil, fmt.Errorf("VM on host %d under leaf %d: %w", i, l, err)
			}
			b.sides[l] = append(b.sides[l], s)
		}
	}
	for i := range p.hosts {
		if err := connectSides(ctx, b.sides[0][i], b.sides[1][i]); err != nil {
			return nil, fmt.Errorf("host pair %d: %w", i, err)
		}
	}
	return b, nil
}

func (b *benchCluster) close() { b.c.Close() }

// counters reads both leaves' uplink counters, [leaf][spine].
func (b *benchCluster) counters() ([2][]netlab.LinkCounters, error) {
	var cs [2][]netlab.LinkCounters
	for l := range cs {
		var err error
		if cs[l], err = b.c.Fabric.LeafCounters(l); err != nil {
			return cs, err
		}
	}
	return cs, nil
}

// spineBytes is what each of leaf's uplinks carried between two counter
// readings: bytes, since a GSO batch crosses the veths as one packet.
func spineBytes(before, after [2][]netlab.LinkCounters, leaf int) []uint64 {
	out := make([]uint64, len(after[leaf]))
	for s := range out {
		out[s] = after[leaf][s].Sub(before[leaf][s]).TxBytes
	}
	return out
}

// fabricTotals are the hosts' fabric counters, summed: datagrams, and
// the connections' DATA packets sent for the first time, resent, resent
// for nothing as the sender found (spurious), and received twice (what
// was resent for nothing, as the receiver saw it), and the congestion
// cuts taken back (undos).
type fabricTotals struct {
	sent, received                         uint64
	dataSent, retransmits, spurious, dupes uint64
	undos                                  uint64
}

func (b *benchCluster) fabricTotals() fabricTotals {
	var t fabricTotals
	for _, h := range b.c.Hosts {
		if f := h.Fabric(); f != nil {
			st := f.Stats()
			t.sent += st.Sent
			t.received += st.Received
			t.dataSent += st.DataSent
			t.retransmits += st.Retransmits
			t.spurious += st.SpuriousRetransmits
			t.dupes += st.Duplicates
			t.undos += st.CCUndos
		}
	}
	return t
}

// sub is t minus an earlier reading u.
func (t fabricTotals) sub(u fabricTotals) fabricTotals {
	return fabricTotals{sent: t.sent - u.sent, received: t.received - u.received, dataSent: t.dataSent - u.dataSent,
		retransmits: t.retransmits - u.retransmits, spurious: t.spurious - u.spurious, dupes: t.dupes - u.dupes,
		undos: t.undos - u.undos}
}

// retxFrac is the DATA packets resent per packet sent for the first
// time; spuriousFrac the share of those resent that the receiver got
// twice (the retransmission was not needed); seenFrac the share the
// sender found spurious itself.
func (t fabricTotals) retxFrac() float64 { return ratio(t.retransmits, t.dataSent) }
func (t fabricTotals) spuriousFrac() float64 {
	return min(ratio(t.dupes, t.retransmits), 1)
}
func (t fabricTotals) seenFrac() float64 { return ratio(t.spurious, t.retransmits) }

// ratio is a/b, 0 when b is.
func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// load is the WRITE traffic of a run: one sender per VM that sends,
// all adding the bytes of their completed WRITEs to one counter.
type load struct {
	done    atomic.Uint64 // bytes of WRITEs completed
	stop    chan struct{} // closed: post no more
	stopped sync.Once
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []senderResult
}

// senderResult is what one sender saw.
type senderResult struct {
	name     string
	bytes    uint64        // completed
	finished time.Duration // when its budget was done (0: it was not)
	errQPs   int           // QPs that completed a WRITE in error
	firstErr error
}

// start runs a sender from src into dst until stop, or until budget
// bytes (0: no limit) completed. t0 is the run's start.
func (ld *load) start(ctx context.Context, name string, src, dst *vmSide, size int, budget uint64, t0 time.Time) {
	ld.wg.Add(1)
	go func() {
		defer ld.wg.Done()
		r := ld.send(ctx, src, dst, size, budget, t0)
		r.name = name
		ld.mu.Lock()
		ld.results = append(ld.results, r)
		ld.mu.Unlock()
	}()
}

// finish stops posting and waits for every sender to drain.
func (ld *load) finish() []senderResult {
	ld.stopped.Do(func() { close(ld.stop) })
	ld.wg.Wait()
	return ld.results
}

func newLoad() *load { return &load{stop: make(chan struct{})} }

// send is one sender's loop: vmPerQP WRITEs posted on each QP, the next
// posted as one completes. A QP whose WRITE fails is in error: the sender
// stops posting on it (its other WRITEs complete flushed) and goes on
// with the rest.
func (ld *load) send(ctx context.Context, src, dst *vmSide, size int, budget uint64, t0 time.Time) senderResult {
	var r senderResult
	src.spin = streamSpin
	var posted uint64 // bytes posted
	dead := make([]bool, len(src.qps))
	outstanding := 0
	seq := uint64(0)
	post := func(q int) error {
		if budget > 0 && posted >= budget {
			return nil
		}
		select {
		case <-ld.stop:
			return nil
		default:
		}
		seq++
		err := src.qps[q].PostSend(guestdriver.SendWR{
			WRID:       uint64(q)<<32 | seq&0xffffffff,
			Opcode:     abi.WRRDMAWrite,
			SGL:        []abi.SGE{src.mr.SGE(0, uint32(size))},
			RemoteAddr: dst.mr.IOVA(),
			RKey:       dst.mr.RKey(),
			Signaled:   true,
		})
		if err != nil {
			return fmt.Errorf("posting on QP %d: %w", q, err)
		}
		posted += uint64(size)
		outstanding++
		return nil
	}
	fail := func(err error) senderResult {
		if r.firstErr == nil {
			r.firstErr = err
		}
		return r
	}
	for q := range src.qps {
		for range vmPerQP {
			if err := post(q); err != nil {
				return fail(err)
			}
		}
	}
	wcs := make([]guestdriver.WC, 64)
	last := time.Now()
	for outstanding > 0 {
		k, err := src.next(ctx, wcs)
		if err != nil {
			return fail(err)
		}
		now := time.Now()
		for _, wc := range wcs[:k] {
			outstanding--
			q := int(wc.WRID >> 32)
			if q >= len(dead) {
				return fail(fmt.Errorf("completion of an unknown WR %#x", wc.WRID))
			}
			if err := wc.Err(); err != nil {
				if !dead[q] {
					dead[q] = true
					r.errQPs++
					if r.firstErr == nil {
						r.firstErr = fmt.Errorf("QP %d: WRITE: %w", q, err)
					}
				}
				continue
			}
			r.bytes += uint64(size)
			ld.done.Add(uint64(size))
			if budget > 0 && r.bytes >= budget && r.finished == 0 {
				r.finished = now.Sub(t0)
			}
			if !dead[q] {
				if err := post(q); err != nil {
					return fail(err)
				}
			}
		}
		if k > 0 {
			last = now
		} else if now.Sub(last) > 10*time.Second {
			return fail(fmt.Errorf("stalled: %d WRITEs outstanding, none completed for 10 s", outstanding))
		}
	}
	return r
}

// sample is the load's completed bytes at a time since the run's start.
type sample struct {
	at    time.Duration
	bytes uint64
}

// sampleEvery records ld.done every interval until stop is closed.
func sampleEvery(ld *load, t0 time.Time, interval time.Duration, stop <-chan struct{}) <-chan []sample {
	out := make(chan []sample, 1)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		ss := []sample{{0, ld.done.Load()}}
		for {
			select {
			case <-stop:
				out <- append(ss, sample{time.Since(t0), ld.done.Load()})
				return
			case <-tick.C:
				ss = append(ss, sample{time.Since(t0), ld.done.Load()})
			}
		}
	}()
	return out
}

// rate is the goodput, bits/s, between the samples at or after from
// and at or before to (0 if they are the same).
func rate(ss []sample, from, to time.Duration) float64 {
	i := slices.IndexFunc(ss, func(s sample) bool { return s.at >= from })
	j := slices.IndexFunc(ss, func(s sample) bool { return s.at > to }) - 1
	if j < 0 {
		j = len(ss) - 1
	}
	if i < 0 || j <= i {
		return 0
	}
	return float64(ss[j].bytes-ss[i].bytes) * 8 / (ss[j].at - ss[i].at).Seconds()
}

// sprayKinds is every selector, single (the baseline) first.
func sprayKinds() []string {
	var ks []string
	for _, k := range pathsel.Kinds() {
		ks = append(ks, k.String())
	}
	return ks
}

// spreadCell formats per-spine bytes as percentages of their sum.
func spreadCell(bs []uint64) string {
	var sum uint64
	for _, b := range bs {
		sum += b
	}
	if sum == 0 {
		return "-"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%.0f", 100*float64(b)/float64(sum))
	}
	return strings.Join(parts, "/")
}

var errNoNamespaces = errors.New("this suite needs network namespaces (run as root)")

// sprayResult is one selector's measurement.
type sprayResult struct {
	gbps   float64 // aggregate goodput, both directions
	frac   float64 // of the bisection in both directions
	spread [2][]uint64
	drops  uint64       // leaf->spine frames the rate limiters dropped
	fab    fabricTotals // during the measurement
	good   uint64       // goodput bytes in the measurement
	errQPs int          // QPs that went to error
	where  string
}

// wirePerGoodput is the bytes on all uplinks per goodput byte.
func (r sprayResult) wirePerGoodput() float64 {
	var w uint64
	for _, bs := range r.spread {
		for _, b := range bs {
			w += b
		}
	}
	if r.good == 0 {
		return 0
	}
	return float64(w) / float64(r.good)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sprayRun builds a cluster with the selector, runs the permutation
// (every host pair both ways) for warm, then measures for d.
func sprayRun(ctx context.Context, p fabricParams, spray string, seed uint32, warm, d time.Duration) (res sprayResult, err error) {
	b, err := newBenchCluster(ctx, p, spray, seed)
	if err != nil {
		return res, err
	}
	defer b.close()
	ld := newLoad()
	defer func() {
		for _, r := range ld.finish() {
			// A QP in error is the selector's result (reported);
			// anything else stops the suite.
			res.errQPs += r.errQPs
			if r.firstErr != nil && r.errQPs == 0 && err == nil {
				err = fmt.Errorf("%s: %w", r.name, r.firstErr)
			}
		}
	}()
	t0 := time.Now()
	for i := range p.hosts {
		a, z := b.sides[0][i], b.sides[1][i]
		ld.start(ctx, fmt.Sprintf("h0-%d->h1-%d", i, i), a, z, p.size, 0, t0)
		ld.start(ctx, fmt.Sprintf("h1-%d->h0-%d", i, i), z, a, p.size, 0, t0)
	}
	if err := sleepCtx(ctx, warm); err != nil {
		return res, err
	}
	c0, err := b.counters()
	if err != nil {
		return res, err
	}
	f0, n0, s0 := b.fabricTotals(), ld.done.Load(), time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return res, err
	}
	n1, s1, f1 := ld.done.Load(), time.Now(), b.fabricTotals()
	c1, err := b.counters()
	if err != nil {
		return res, err
	}
	res.good, res.where = n1-n0, b.c.Where
	res.gbps = float64(res.good) * 8 / s1.Sub(s0).Seconds() / 1e9
	res.frac = res.gbps * 1e9 / (2 * p.bisection())
	res.spread = [2][]uint64{spineBytes(c0, c1, 0), spineBytes(c0, c1, 1)}
	for l := range c1 {
		for s := range c1[l] {
			res.drops += c1[l][s].RateDropped - c0[l][s].RateDropped
		}
	}
	res.fab = f1.sub(f0)
	return res, nil
}

// failoverResult is one selector's run through a failure.
type failoverResult struct {
	where       string
	spine       int           // the spine black-holed from leaf 0
	preGbps     float64       // goodput before the failure
	recover     time.Duration // -1: goodput never came back
	postGbps    float64       // goodput after recovery (or after recoverBy without it)
	completed   bool          // every sender finished its transfer
	errQPs      int           // QPs that went to error
	samples     []sample
	blackHoleAt time.Duration
	end         time.Duration // the first sender done (-1: none was)
}

// failoverTiming is the schedule of a failover run.
type failoverTiming struct {
	warm, pre time.Duration // before the failure: warm-up, then the pre-failure rate
	post      time.Duration // how long the transfer lasts after it, at the remaining capacity
	window    time.Duration // goodput windows for the recovery
	every     time.Duration // sampling interval
	limit     time.Duration // give up on a transfer after this long past the failure
}

// recoverBy is how long after the failure a sprayer's goodput must be
// back, and where the single path's post-failure window starts.
const recoverBy = 50 * time.Millisecond

// failoverRun sends a fixed amount from every host under leaf 0 to its
// partner under leaf 1, black-holes leaf 0's busiest uplink after
// warm+pre, and follows the goodput until every transfer is done (or
// failed, or timing.limit passed).
func failoverRun(ctx context.Context, p fabricParams, spray string, seed uint32, tm failoverTiming) (res failoverResult, err error) {
	b, err := newBenchCluster(ctx, p, spray, seed)
	if err != nil {
		return res, err
	}
	defer b.close()
	res.where = b.c.Where
	// Each sender's share of the remaining capacity for post, plus its
	// share of the whole for warm+pre.
	s := float64(p.spines)
	perFlow := p.bisection() / float64(p.hosts) / 8 // bytes/s
	budget := uint64(perFlow * (tm.warm + tm.pre + time.Duration(float64(tm.post)*s/(s-1))).Seconds())
	budget = max(1, budget/uint64(p.size)) * uint64(p.size)
	ld := newLoad()
	stopSampling := make(chan struct{})
	t0 := time.Now()
	samples := sampleEvery(ld, t0, tm.every, stopSampling)
	for i := range p.hosts {
		ld.start(ctx, fmt.Sprintf("h0-%d->h1-%d", i, i), b.sides[0][i], b.sides[1][i], p.size, budget, t0)
	}
	finished := make(chan struct{})
	go func() { ld.wg.Wait(); close(finished) }()
	defer func() {
		close(stopSampling)
		res.samples = <-samples
		results := ld.finish()
		res.completed = len(results) == p.hosts
		res.end = -1
		for _, r := range results {
			res.errQPs += r.errQPs
			if r.finished == 0 {
				res.completed = false
			} else if res.end < 0 || r.finished < res.end {
				res.end = r.finished
			}
			// A QP in error is what the single path does when its
			// path dies: a result, not a failure of the run.
			if r.firstErr != nil && r.errQPs == 0 && err == nil {
				err = fmt.Errorf("%s: %w", r.name, r.firstErr)
			}
		}
		if err == nil {
			res.measure(tm, p)
		}
	}()
	if err := sleepCtx(ctx, tm.warm); err != nil {
		return res, err
	}
	c0, err := b.counters()
	if err != nil {
		return res, err
	}
	if err := sleepCtx(ctx, tm.pre); err != nil {
		return res, err
	}
	c1, err := b.counters()
	if err != nil {
		return res, err
	}
	// The busiest spine from leaf 0: one that surely carries traffic,
	// also for the single path.
	bs := spineBytes(c0, c1, 0)
	res.spine = slices.Index(bs, slices.Max(bs))
	if err := b.c.Fabric.BlackHole(0, res.spine, true); err != nil {
		return res, err
	}
	res.blackHoleAt = time.Since(t0)
	select {
	case <-finished:
	case <-time.After(tm.limit):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	return res, nil
}

// The failover timeline's windows: failoverBin wide, from failoverBefore
// before the black hole to failoverAfter past the transfer's planned end.
const (
	failoverBin    = 20 * time.Millisecond
	failoverBefore = 200 * time.Millisecond
	failoverAfter  = 300 * time.Millisecond
)

// timeline is the goodput in windows of bin, as (ms since the black hole,
// Gb/s), from before ahead of it to after past it or until the first
// sender finished, whichever is first (the others then have the fabric
// to themselves).
func (res *failoverResult) timeline(bin, before, after time.Duration) [][2]float64 {
	ss := res.samples
	if len(ss) == 0 {
		return nil
	}
	end := min(res.blackHoleAt+after, ss[len(ss)-1].at)
	if res.end >= 0 {
		end = min(end, res.end)
	}
	var out [][2]float64
	for t := max(0, res.blackHoleAt-before); t+bin <= end; t += bin {
		out = append(out, [2]float64{float64((t + bin - res.blackHoleAt).Microseconds()) / 1e3, rate(ss, t, t+bin) / 1e9})
	}
	return out
}

// measure derives the rates and the recovery from the samples.
func (res *failoverResult) measure(tm failoverTiming, p fabricParams) {
	ss, tb := res.samples, res.blackHoleAt
	res.preGbps = rate(ss, tm.warm, tb) / 1e9
	remaining := p.bisection() * float64(p.spines-1) / float64(p.spines)
	// Only windows before the first sender finished count: the others
	// have the fabric to themselves then.
	end := res.end
	if end < 0 {
		end = ss[len(ss)-1].at
	}
	res.recover = -1
	for i, s := range ss {
		if s.at < tb || s.at+tm.window > end {
			continue
		}
		if rate(ss[i:], s.at, s.at+tm.window) >= 0.7*remaining {
			res.recover = s.at + tm.window - tb
			break
		}
	}
	from := tb + recoverBy
	if res.recover >= 0 {
		from = tb + res.recover
	}
	res.postGbps = rate(ss, from, min(end, from+tm.post)) / 1e9
}

// sprayPlan is what the spray suite runs.
type sprayPlan struct {
	p          fabricParams
	warm, d    time.Duration
	singleRuns int   // the single path is measured this often, a hash seed each
	extraSizes []int // also measure every selector at these WRITE sizes
}

func sprayPlanFor(o options) sprayPlan {
	pl := sprayPlan{
		p:    fabricParams{hosts: 4, spines: 4, linkRate: 250e6, mtu: 9000, cc: "cubic", size: 1 << 20, qps: 1},
		warm: 300 * time.Millisecond, d: 2 * time.Second, singleRuns: 6, extraSizes: []int{64 << 10},
	}
	if o.quick {
		pl.d, pl.singleRuns, pl.extraSizes = time.Second, 3, nil
	}
	if o.tiny {
		// 64 KiB WRITEs: the few in flight at the window's edges are
		// a small part of what 300 ms measure.
		pl.p.hosts, pl.p.spines, pl.p.size = 2, 2, 64<<10
		pl.warm, pl.d, pl.singleRuns, pl.extraSizes = 100*time.Millisecond, 300*time.Millisecond, 1, nil
	}
	return pl
}

// hashSeed is the leaves' ECMP hash seed of run k: fixed, so the run is
// the same topology every time; the single path's runs take several.
func hashSeed(k int) uint32 { return uint32(0x5eed + k) }

func runSpray(ctx context.Context, o options, r *report) error {
	if err := netlab.Available(); err != nil {
		return fmt.Errorf("%w: %w", errNoNamespaces, err)
	}
	pl := sprayPlanFor(o)
	sizes := append([]int{pl.p.size}, pl.extraSizes...)
	var where string
	fig := r.barChart("selectors", "Permutation goodput per path selector", "fraction of the bisection")
	for n, size := range sizes {
		p := pl.p
		p.size = size
		key := ""
		if n > 0 {
			key = "_" + sizeKey(uint64(size))
		}
		t := r.table(fmt.Sprintf("Permutation traffic, %s WRITEs, both directions: goodput as a fraction of the bisection (%s)", sizeName(uint64(size)), rateName(2*p.bisection())),
			"selector", "Gb/s", "fraction", "leaf 0 -> spines %", "leaf 1 -> spines %", "wire/goodput", "resent %", "spurious % (seen)", "CC undos", "drops", "UDP lost")
		var single []float64
		var best float64
		for _, kind := range sprayKinds() {
			runs := 1
			if kind == "single" {
				runs = pl.singleRuns
			}
			var fracs []float64
			errQPs := 0
			for k := range runs {
				res, err := sprayRun(ctx, p, kind, hashSeed(k), pl.warm, pl.d)
				if err != nil {
					return fmt.Errorf("%s, %s WRITEs: %w", kind, sizeName(uint64(size)), err)
				}
				if where == "" {
					where = res.where
				}
				fracs = append(fracs, res.frac)
				name := kind
				if runs > 1 {
					name = fmt.Sprintf("%s (run %d)", kind, k+1)
				}
				if res.errQPs > 0 {
					name += fmt.Sprintf(" (%d QPs failed)", res.errQPs)
				}
				errQPs += res.errQPs
				t.row(name, fmt.Sprintf("%.3f", res.gbps), fmt.Sprintf("%.3f", res.frac), spreadCell(res.spread[0]), spreadCell(res.spread[1]),
					fmt.Sprintf("%.3f", res.wirePerGoodput()), fmt.Sprintf("%.1f", 100*res.fab.retxFrac()),
					fmt.Sprintf("%.0f (%.0f)", 100*res.fab.spuriousFrac(), 100*res.fab.seenFrac()), fmt.Sprint(res.fab.undos),
					fmt.Sprint(res.drops), fmt.Sprint(int64(res.fab.sent-res.fab.received)))
				if k == 0 {
					r.set(kind+"_wire_per_goodput"+key, res.wirePerGoodput())
					r.set(kind+"_retx_frac"+key, res.fab.retxFrac())
					r.set(kind+"_spurious_frac"+key, res.fab.spuriousFrac())
					r.set(kind+"_seen_frac"+key, res.fab.seenFrac())
					r.set(kind+"_cc_undos"+key, float64(res.fab.undos))
				}
			}
			f := mean(fracs)
			fig.bar(sizeName(uint64(size))+" WRITEs", kind, f)
			r.set(kind+"_frac"+key, f)
			r.set(kind+"_qp_errors"+key, float64(errQPs))
			if kind == "single" {
				single = fracs
				if runs > 1 {
					t.row("single (mean)", fmt.Sprintf("%.3f", f*2*p.bisection()/1e9), fmt.Sprintf("%.3f", f), "", "", "", "", "", "", "", "")
					r.set("single_frac_min"+key, slices.Min(fracs))
					r.set("single_frac_max"+key, slices.Max(fracs))
				}
			} else {
				best = max(best, f)
			}
		}
		r.set("best_frac"+key, best)
		r.set("ratio"+key, best/mean(single))
	}
	r.set("bisection_gbps", pl.p.bisection()/1e9)
	r.note("%s; %d host pairs (host i under leaf 0 <-> host i under leaf 1), each %d RC QP pair streaming both ways, %d WRITEs posted per QP; %d UDP source ports per host; CC %s", where, pl.p.hosts, pl.p.qps, vmPerQP, sprayPaths, pl.p.cc)
	r.note("links at %s so that the fabric, not the CPU, is the bottleneck: with unlimited links this 2-core machine forwarded about 8 Gb/s sprayed, 13 Gb/s single-path; CC cubic (with fixed, the default, 2 QPs per pair or 4 MiB WRITEs overran the links' queues until QPs exhausted their retries)", rateName(float64(pl.p.linkRate)))
	r.note("each selector on a fresh cluster, the same ECMP hash seed; %v warm-up, then %v measured; goodput = bytes of WRITEs completed (data placed and acknowledged) / time; fraction = goodput / (2 x bisection)", pl.warm, pl.d)
	r.note("single: one source port per QP, picked by the connection id (an HMAC under the cluster secret, new per run), so which flows collide on a spine varies; it runs %d times, each with another ECMP hash seed, and single_frac is their mean", pl.singleRuns)
	r.note("spines %%: each leaf's uplink bytes per spine; wire/goodput: bytes on all uplinks (frames, ACKs, retransmissions) per goodput byte, about 1.01-1.02 with no retransmission; drops: frames the uplinks' rate limiters dropped; UDP lost: datagrams the hosts sent less those they received (counters read a moment apart, so +-100 is noise)")
	r.note("resent %%: DATA packets retransmitted per packet sent for the first time; spurious %%: of those retransmitted, the share the receiver got twice (the original had arrived: the retransmission was not needed), and in parentheses the share the sender itself found spurious (transport.Stats.SpuriousRetransmits: by echoed timestamps and the receivers' duplicate reports); both over the measured interval, so a few in flight at its edges blur them; CC undos: CUBIC cuts taken back because every loss that caused one proved spurious (transport.Stats.CCUndos)")
	return nil
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func rateName(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.3g Gb/s", bps/1e9)
	}
	return fmt.Sprintf("%.3g Mb/s", bps/1e6)
}

// failoverPlan is what the failover suite runs.
type failoverPlan struct {
	p     fabricParams
	tm    failoverTiming
	kinds []string // single first, then the sprayers
}

func failoverPlanFor(o options) failoverPlan {
	pl := failoverPlan{
		// Small WRITEs, so that a 20 ms window holds enough completions
		// to tell the goodput (about 30 at the remaining capacity).
		p: fabricParams{hosts: 4, spines: 4, linkRate: 250e6, mtu: 9000, cc: "cubic", size: 64 << 10, qps: 1},
		tm: failoverTiming{warm: 300 * time.Millisecond, pre: 300 * time.Millisecond, post: time.Second,
			window: 20 * time.Millisecond, every: 2 * time.Millisecond, limit: 10 * time.Second},
		kinds: sprayKinds(),
	}
	if o.quick {
		pl.tm.post = 500 * time.Millisecond
		pl.kinds = []string{"single", "rr", "p2c", "reps"}
	}
	if o.tiny {
		// Four spines still, so that a quarter of the paths dies as in
		// a full run (with two, half of them does).
		pl.p.hosts = 2
		pl.tm.warm, pl.tm.pre, pl.tm.post = 100*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
		pl.kinds = []string{"single", "p2c"}
	}
	return pl
}

func runFailover(ctx context.Context, o options, r *report) error {
	if err := netlab.Available(); err != nil {
		return fmt.Errorf("%w: %w", errNoNamespaces, err)
	}
	pl := failoverPlanFor(o)
	p := pl.p
	remaining := p.bisection() * float64(p.spines-1) / float64(p.spines)
	var t *table
	type cand struct {
		kind    string
		recover time.Duration
		post    float64
	}
	var cands []cand
	fig := r.lines("timeline", fmt.Sprintf("Goodput around the black hole (%v windows)", failoverBin), "ms since the black hole", "Gb/s")
	for _, kind := range pl.kinds {
		res, err := failoverRun(ctx, p, kind, hashSeed(0), pl.tm)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		if t == nil {
			t = r.table(fmt.Sprintf("Leaf 0 -> leaf 1, one uplink of leaf 0 black-holed mid-transfer; %s", res.where),
				"selector", "spine", "pre Gb/s", "pre fraction", "recover ms", "post Gb/s", "post fraction", "done", "QPs in error")
		}
		for _, pt := range res.timeline(failoverBin, failoverBefore, pl.tm.post+failoverAfter) {
			fig.add(kind, pt[0], pt[1])
		}
		pre := res.preGbps * 1e9 / p.bisection()
		post := res.postGbps * 1e9 / remaining
		rec := -1.0
		recCell := "never"
		if res.recover >= 0 {
			rec = float64(res.recover.Microseconds()) / 1e3
			recCell = fmt.Sprintf("%.0f", rec)
		}
		done := map[bool]string{true: "yes", false: "no"}[res.completed]
		t.row(kind, fmt.Sprint(res.spine), fmt.Sprintf("%.3f", res.preGbps), fmt.Sprintf("%.3f", pre), recCell,
			fmt.Sprintf("%.3f", res.postGbps), fmt.Sprintf("%.3f", post), done, fmt.Sprint(res.errQPs))
		r.set(kind+"_recover_ms", rec)
		r.set(kind+"_post_failure_frac", post)
		r.set(kind+"_pre_failure_frac", pre)
		r.set(kind+"_completed", b2f(res.completed))
		r.set(kind+"_qp_errors", float64(res.errQPs))
		if kind != "single" && res.completed && res.recover >= 0 {
			cands = append(cands, cand{kind, res.recover, post})
		}
	}
	fig.reference("70% of the remaining capacity", -float64(failoverBefore.Milliseconds()),
		float64((pl.tm.post + failoverAfter).Milliseconds()), 0.7*remaining/1e9)
	// The headline sprayer: of those that finished their transfer and
	// recovered, the best goodput after the failure among those back
	// within recoverBy, else the quickest to recover.
	bestKind := ""
	if len(cands) > 0 {
		best := slices.MaxFunc(cands, func(a, b cand) int {
			aIn, bIn := a.recover <= recoverBy, b.recover <= recoverBy
			if aIn != bIn {
				return map[bool]int{true: 1, false: -1}[aIn]
			}
			if aIn {
				return cmp.Compare(a.post, b.post)
			}
			return cmp.Compare(b.recover, a.recover) // sooner is better
		})
		bestKind = best.kind
	}
	if bestKind == "" {
		r.set("recover_ms", -1)
		r.set("post_failure_frac", 0)
		r.note("no sprayer finished its transfer and recovered: recover_ms -1, post_failure_frac 0")
	} else {
		r.set("recover_ms", r.summary[bestKind+"_recover_ms"])
		r.set("post_failure_frac", r.summary[bestKind+"_post_failure_frac"])
		r.note("headline (recover_ms, post_failure_frac): %s; of the sprayers that finished and recovered, the best post fraction among those back within %v, else the quickest back", bestKind, recoverBy)
	}
	r.note("%d host pairs, host i under leaf 0 -> host i under leaf 1, each %d RC QP pair, %s WRITEs, %d posted per QP, a fixed amount per pair (about %v of traffic); CC %s", p.hosts, p.qps, sizeName(uint64(p.size)), vmPerQP, pl.tm.warm+pl.tm.pre+pl.tm.post, p.cc)
	r.note("after %v warm-up and %v measured (pre), leaf 0 drops everything it sends to its busiest spine (route kept); goodput sampled every %v", pl.tm.warm, pl.tm.pre, pl.tm.every)
	r.note("recover ms: from the black hole to the end of the first %v window (starting after it) whose goodput is >= 70%% of the remaining capacity (%s); never: not before the first pair finished", pl.tm.window, rateName(remaining))
	r.note("post fraction: goodput from recovery (or %v after the black hole) for up to %v, before the first pair finishes, over the remaining capacity; pre fraction: over the bisection", recoverBy, pl.tm.post)
	r.note("single: a QP whose one path dies exhausts its retries and goes to error (QPs in error); its pair's transfer never finishes")
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
