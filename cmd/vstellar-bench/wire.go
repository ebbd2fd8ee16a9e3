package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// The wire and loss suites measure RDMA between VMs on two hosts
// (vmwire.go): two network namespaces joined by a veth
// (internal/netlab), each with an in-process vstellard whose cross-host
// fabric runs the transport, and a VM on each. The wire suite also runs
// the transport alone between the same namespaces (the "core" rows: host
// buffers stand in for guest memory, no engine, no VMs) and raw batched
// UDP, the baseline.

const wireMethod = `Two hosts (hostsim.Pair): two network namespaces joined by a veth
(loopback without root), each an in-process vstellard whose cross-host
fabric runs the transport over batched UDP, one VM per host. RDMA WRITE
goodput from one guest's memory into the other's over 8 RC QP pairs, MTU
9000, beside the transport alone between the same namespaces (core: host
buffers, no engine, no VMs) and raw batched UDP, interleaved in rounds so
that noise hits all alike; bandwidth is the median over the rounds.
Latency: one 8-byte WRITE at a time, half the round trip, beside a raw UDP
ping-pong.`

var wireGoals = []goal{
	atLeast("ratio", 0.8, "VM-to-VM / raw UDP at 1 MiB"),
	atMost("lat_ratio", 1.5, "VM-to-VM p50 / UDP p50"),
}

const lossMethod = `Two hosts as for wire, on a 500 Mb/s link (tbf) with 500 µs of delay
each way, MTU 1500, and random per-packet loss in both directions (data
and ACKs) from an eBPF program on each veth. One RC QP pair streams 1 MiB
WRITEs; goodput at each loss rate is a fraction of the lossless goodput
(the better of one measurement before and one after), selective repeat
and go-back-N each on a fresh pair of hosts.`

var lossGoals = []goal{
	atLeast("sack_frac_1024", 0.94, "selective repeat at 1/1024 loss"),
	fractionOf("gbn_frac_1024", 0.9, "sack_frac_1024", "go-back-N visibly worse"),
}

// hostPair is a UDP socket set on each of two hosts (pairSockets).
type hostPair struct {
	socks [2]*udp.Conn
	where string
}

func (hp *hostPair) close() {
	for _, s := range hp.socks {
		if s != nil {
			s.Close()
		}
	}
}

// placeSink copies WRITEs into a buffer, as placement into guest memory.
type placeSink struct{ mem []byte }

func (s *placeSink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	if m.RAddr+uint64(m.Len) > uint64(len(s.mem)) {
		return wire.NAKAccess, 0
	}
	return wire.NAKNone, 0
}
func (s *placeSink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	copy(s.mem[m.RAddr+off:], b)
	return true
}
func (s *placeSink) Commit(*transport.Inbound) wire.NAK { return wire.NAKNone }

type bytesSource []byte

func (b bytesSource) ReadAt(p []byte, off uint64) bool { copy(p, b[off:]); return true }

// link is a connection from host 0 to host 1 with its endpoints running.
type link struct {
	eps    [2]*endpoint.Endpoint
	socks  [2]*udp.Conn
	done   chan transport.Completion
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newLink starts endpoints on hp's sockets with one connection.
func newLink(ctx context.Context, hp *hostPair, cfg transport.Config, paths int) (*link, error) {
	ctx, cancel := context.WithCancel(ctx)
	l := &link{done: make(chan transport.Completion, 1<<12), cancel: cancel, socks: hp.socks}
	for i := range l.eps {
		l.eps[i] = endpoint.New(hp.socks[i], nil)
		c := cfg
		c.LocalConn, c.RemoteConn = uint32(1+i), uint32(2-i)
		c.LocalToken, c.RemoteToken = uint64(0x5eed+i), uint64(0x5eed+1-i)
		conn, err := transport.NewConn(c, &placeSink{mem: make([]byte, 64<<20)})
		if err != nil {
			cancel()
			return nil, err
		}
		var done func(transport.Completion)
		if i == 0 {
			done = func(c transport.Completion) { l.done <- c }
		}
		if err := l.eps[i].Add(uint32(1+i), conn, hp.socks[1-i].LocalAddr(0), paths, done); err != nil {
			cancel()
			return nil, err
		}
	}
	for _, e := range l.eps {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); e.Run(ctx) }()
	}
	return l, nil
}

func (l *link) close() {
	l.cancel()
	l.wg.Wait()
	// The endpoints interrupt their reads with a deadline in the past:
	// clear it for whoever uses the sockets next.
	for _, s := range l.socks {
		s.SetReadDeadline(time.Time{})
	}
}

// stream keeps inflight WRITEs of size bytes going from host 0 for d and
// returns the goodput (Gb/s of completed messages).
func (l *link) stream(ctx context.Context, size, inflight int, d time.Duration) (float64, error) {
	payload := bytesSource(make([]byte, size))
	slots := max(1, (64<<20)/size)
	post := func(i int) error {
		_, err := l.eps[0].Post(1, transport.Message{Op: wire.OpWrite, Len: uint32(size), Src: payload, RAddr: uint64(i%slots) * uint64(size), Token: uint64(i)})
		return err
	}
	posted, done := 0, 0
	for ; posted < inflight; posted++ {
		if err := post(posted); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	var bytes uint64
	timer := time.NewTimer(d + 10*time.Second)
	defer timer.Stop()
	for time.Since(start) < d || done == 0 { // at least one: a figure of nothing says nothing
		select {
		case c := <-l.done:
			if c.Status != transport.StatusOK {
				return 0, fmt.Errorf("WRITE %d: %v", c.Token, c.Status)
			}
			done++
			bytes += uint64(size)
			if err := post(posted); err != nil {
				return 0, err
			}
			posted++
		case <-timer.C:
			return 0, errors.New("stream stalled")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	el := time.Since(start)
	// Drain what is in flight so the next run starts clean.
	for ; done < posted; done++ {
		select {
		case <-l.done:
		case <-time.After(10 * time.Second):
			return 0, errors.New("drain stalled")
		}
	}
	return float64(bytes) * 8 / el.Seconds() / 1e9, nil
}

// pingPong measures n 8-byte WRITEs, one at a time, from post to
// completion (a round trip: data there, acknowledgement back).
func (l *link) pingPong(n int) ([]time.Duration, error) {
	payload := bytesSource(make([]byte, 8))
	rtts := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		if _, err := l.eps[0].Post(1, transport.Message{Op: wire.OpWrite, Len: 8, Src: payload, Token: uint64(i)}); err != nil {
			return nil, err
		}
		select {
		case c := <-l.done:
			if c.Status != transport.StatusOK {
				return nil, fmt.Errorf("WRITE: %v", c.Status)
			}
		case <-time.After(10 * time.Second):
			return nil, errors.New("ping-pong stalled")
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	return rtts, nil
}

func runWire(ctx context.Context, o options, r *report) error {
	sizes := []int{64 << 10, 256 << 10, 1 << 20, 4 << 20}
	d, pings, qps, rounds := time.Second, 20000, 8, 5
	if o.quick {
		sizes, d, pings = []int{64 << 10, 1 << 20}, 300*time.Millisecond, 5000
	}
	if o.tiny {
		sizes, d, pings, qps, rounds = []int{1 << 20}, 100*time.Millisecond, 200, 4, 1
	}
	const paths = 4 // the core link's and the UDP baseline's source ports
	vp, err := newVMPair(ctx, hostsim.PairOptions{Net: netlab.Options{Prefix: "vsbench", MTU: 9000}}, qps)
	if err != nil {
		return err
	}
	defer vp.close()
	hp, err := pairSockets(ctx, vp.p, paths)
	if err != nil {
		return err
	}
	defer hp.close()

	// The rounds interleave the baseline and what is compared with it,
	// so that a noisy neighbour (this machine is shared) hits both alike:
	// each round measures raw UDP first, while everything else idles (the
	// endpoints would take its datagrams), then the transport alone on
	// the same sockets, then VM to VM. Bandwidth figures are medians over
	// the rounds, and ratio the median of the rounds' own ratios; the
	// latency samples of all rounds are pooled. UDP datagrams are as
	// large as the MTU allows, like the transport's packets.
	const payload = 9000 - 28 - wire.HeaderLen - wire.DataLen // IPv4 and UDP headers
	dgram := wire.HeaderLen + wire.DataLen + payload
	var udpG, ratios []float64
	core, vm := make(map[int][]float64), make(map[int][]float64)
	var udpRTTs, coreRTTs, vmRTTs []time.Duration
	per := max(pings/rounds, 1)
	for range rounds {
		blast, err := udp.BlastThroughput(ctx, hp.socks[0], hp.socks[1], hp.socks[1].LocalAddr(0), dgram, d)
		if err != nil {
			return fmt.Errorf("udp blast: %w", err)
		}
		udpG = append(udpG, blast.Gbps)
		lat, err := udp.PingPong(ctx, hp.socks[0], hp.socks[1], per, 8)
		if err != nil {
			return fmt.Errorf("udp ping-pong: %w", err)
		}
		udpRTTs = append(udpRTTs, lat.RTTs...)

		l, err := newLink(ctx, hp, transport.Config{Tenant: 1, MaxPayload: payload}, paths)
		if err != nil {
			return err
		}
		for _, size := range sizes {
			g, err := l.stream(ctx, size, max(2, (8<<20)/size), d)
			if err != nil {
				l.close()
				return fmt.Errorf("core %s: %w", sizeName(uint64(size)), err)
			}
			core[size] = append(core[size], g)
		}
		rtts, err := l.pingPong(per)
		l.close()
		if err != nil {
			return fmt.Errorf("core: %w", err)
		}
		coreRTTs = append(coreRTTs, rtts...)

		for _, size := range sizes {
			g, err := vp.stream(ctx, size, qps, d)
			if err != nil {
				return fmt.Errorf("VM-to-VM %s: %w", sizeName(uint64(size)), err)
			}
			vm[size] = append(vm[size], g)
		}
		ratios = append(ratios, vm[1<<20][len(vm[1<<20])-1]/blast.Gbps)
		if rtts, err = vp.latency(ctx, per); err != nil {
			return fmt.Errorf("VM-to-VM latency: %w", err)
		}
		vmRTTs = append(vmRTTs, rtts...)
	}

	t := r.table(fmt.Sprintf("RDMA WRITE goodput, VM on host 1 -> VM on host 2 (median of %d rounds), %s", rounds, vp.p.Where),
		"size", "VM-to-VM Gb/s", "core Gb/s", "UDP Gb/s", "ratio")
	for _, size := range sizes {
		r.set("transport_gbps_"+sizeKey(uint64(size)), median(vm[size]))
		r.set("core_gbps_"+sizeKey(uint64(size)), median(core[size]))
		t.row(sizeName(uint64(size)), fmt.Sprintf("%.2f", median(vm[size])), fmt.Sprintf("%.2f", median(core[size])), "", "")
	}
	t.row(fmt.Sprintf("raw UDP, %d B", dgram), "", "", fmt.Sprintf("%.2f", median(udpG)), fmt.Sprintf("%.2f", median(ratios)))
	fig := r.lines("goodput", "WRITE goodput between two hosts (median of rounds)", "WRITE size (KiB)", "Gb/s")
	fig.logX = true
	for _, size := range sizes {
		fig.add("VM to VM", float64(size)/1024, median(vm[size]))
		fig.add("transport alone (core)", float64(size)/1024, median(core[size]))
	}
	fig.reference("raw batched UDP", float64(sizes[0])/1024, float64(sizes[len(sizes)-1])/1024, median(udpG))
	r.set("transport_gbps", median(vm[1<<20]))
	r.set("udp_gbps", median(udpG))
	r.set("ratio", median(ratios))
	r.set("ratio_min", slices.Min(ratios))
	r.set("core_ratio", median(core[1<<20])/median(udpG))

	for _, s := range [][]time.Duration{udpRTTs, coreRTTs, vmRTTs} {
		slices.Sort(s)
	}
	half := func(rtts []time.Duration, p float64) float64 { return us(percentile(rtts, p)) / 2 }
	lt := r.table("8-byte WRITE latency (half the round trip, as ib_write_lat reports it), µs", "", "p50", "p99")
	lt.row("VM-to-VM", fmt.Sprintf("%.1f", half(vmRTTs, 50)), fmt.Sprintf("%.1f", half(vmRTTs, 99)))
	lt.row("core", fmt.Sprintf("%.1f", half(coreRTTs, 50)), fmt.Sprintf("%.1f", half(coreRTTs, 99)))
	lt.row("raw UDP", fmt.Sprintf("%.1f", half(udpRTTs, 50)), fmt.Sprintf("%.1f", half(udpRTTs, 99)))
	r.set("lat_8b_p50_us", half(vmRTTs, 50))
	r.set("lat_8b_p99_us", half(vmRTTs, 99))
	r.set("core_lat_p50_us", half(coreRTTs, 50))
	r.set("udp_lat_p50_us", half(udpRTTs, 50))
	r.set("lat_ratio", half(vmRTTs, 50)/half(udpRTTs, 50))
	r.note("VM-to-VM: %d RC QP pairs, %d signalled WRITEs posted on each (the engine runs one request per QP at a time); MTU 9000, %d-byte packets; latency: one QP, 8-byte inline WRITE, post to completion", qps, vmPerQP, dgram)
	r.note("ratio: the median over the rounds of VM-to-VM at 1 MiB over raw UDP in the same round (ratio_min the worst round); lat_ratio: VM-to-VM p50 over UDP p50, samples pooled over the rounds")
	r.note("core: the transport alone between the same namespaces (host buffers, no engine, no VMs), %d paths", paths)
	if len(o.pairs) > 0 {
		return wireScaling(ctx, vp, o, r, qps, d, median(udpG))
	}
	return nil
}

// median returns the median of xs (not empty); it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func runLoss(ctx context.Context, o options, r *report) error {
	if err := netlab.Available(); err != nil {
		return fmt.Errorf("this suite needs network namespaces (run as root): %w", err)
	}
	rates := []int{16384, 4096, 1024, 256}
	d := 2 * time.Second
	if o.quick {
		d = 700 * time.Millisecond
	}
	if o.tiny {
		rates, d = []int{1024}, 300*time.Millisecond
	}
	const size, qps = 1 << 20, 1
	head := []string{"recovery", "lossless Gb/s"}
	for _, n := range rates {
		head = append(head, fmt.Sprintf("1/%d", n))
	}
	var t *table
	fig := r.lines("loss", "WRITE goodput under random loss", "loss probability per packet", "fraction of lossless")
	fig.logX = true
	for _, mode := range []string{"selective", "go-back-n"} {
		key := map[string]string{"selective": "sack", "go-back-n": "gbn"}[mode]
		fracs, sent, base, where, err := lossRun(ctx, mode, rates, size, qps, d)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if t == nil {
			t = r.table("RDMA WRITE goodput VM -> VM under random loss (both directions) as a fraction of lossless, 1 MiB WRITEs, "+where, head...)
		}
		r.set(key+"_gbps_0", base)
		row := []string{mode, fmt.Sprintf("%.3f", base)}
		for i, n := range rates {
			r.set(fmt.Sprintf("%s_frac_%d", key, n), fracs[i])
			r.set(fmt.Sprintf("%s_wire_%d", key, n), sent[i])
			row = append(row, fmt.Sprintf("%.3f (%.2f)", fracs[i], sent[i]))
			fig.add(map[string]string{"selective": "selective repeat", "go-back-n": "go-back-N"}[mode], 1/float64(n), fracs[i])
		}
		t.row(row...)
	}
	r.note("each point runs %v: %d RC QP pair(s) between a VM on each host, 1 MiB WRITEs, %d posted (one in flight: the engine runs one request per QP at a time); MTU 1500; a fresh pair of hosts per recovery mode", d, qps, vmPerQP)
	r.note("loss is random per packet, both directions (data and ACKs), from an eBPF program on each veth; %v one-way delay each way (netlab's delay line)", lossDelay)
	r.note("(in brackets, *_wire_* keys: datagrams the sender sent per datagram of goodput, ACKs and retransmissions included)")
	return nil
}

// lossRun builds two hosts with the given recovery on a lossRate link and
// returns the goodput at each loss rate as a fraction of lossless, the
// lossless goodput, and where it ran.
// lossDelay is the loss suite's one-way delay: a round trip of about a
// millisecond, as between racks of a large datacenter, makes the
// bandwidth-delay product (about 45 packets at 500 Mb/s) what decides how
// much a loss costs go-back-N; a bare veth's 30 µs would hide it.
const lossDelay = 500 * time.Microsecond

// lossRate is the loss suite's rate limit, well within what the delay
// line carries (about 1 Gb/s of full frames), so that the loss measured is
// the loss injected.
const lossRate = 500e6

// lossPayload is the transport's payload per packet at MTU 1500 over IPv4.
const lossPayload = 1500 - 28 - wire.HeaderLen - wire.DataLen

func lossRun(ctx context.Context, recovery string, rates []int, size, qps int, d time.Duration) (fracs, sent []float64, base float64, where string, _ error) {
	vp, err := newVMPair(ctx, hostsim.PairOptions{Net: netlab.Options{Prefix: "vsbench", MTU: 1500, Rate: lossRate, Delay: lossDelay}, Recovery: recovery}, qps)
	if err != nil {
		return nil, nil, 0, "", err
	}
	defer vp.close()
	if err := vp.setLoss(0); err != nil {
		return nil, nil, 0, "", err
	}
	// Warm up (the first run pays neighbour resolution and the RTT
	// estimator's start), then measure lossless.
	if _, err := vp.stream(ctx, size, qps, d/2); err != nil {
		return nil, nil, 0, "", fmt.Errorf("warm-up: %w", err)
	}
	base, err = vp.stream(ctx, size, qps, d)
	if err != nil {
		return nil, nil, 0, "", fmt.Errorf("lossless: %w", err)
	}
	gs := make([]float64, 0, len(rates))
	sent = make([]float64, 0, len(rates))
	for _, n := range rates {
		if err := vp.setLoss(1 / float64(n)); err != nil {
			return nil, nil, 0, "", err
		}
		before := vp.p.Hosts[0].Fabric().Stats().Sent
		t0 := time.Now()
		g, err := vp.stream(ctx, size, qps, d)
		if err != nil {
			return nil, nil, 0, "", fmt.Errorf("at 1/%d: %w", n, err)
		}
		// Datagrams the sender put on the wire per one the goodput needed.
		need := g * 1e9 * time.Since(t0).Seconds() / 8 / lossPayload
		sent = append(sent, float64(vp.p.Hosts[0].Fabric().Stats().Sent-before)/need)
		gs = append(gs, g)
	}
	// Lossless again: the baseline is the better of the two, so a slow
	// first measurement cannot flatter the lossy ones.
	if err := vp.setLoss(0); err != nil {
		return nil, nil, 0, "", err
	}
	again, err := vp.stream(ctx, size, qps, d)
	if err != nil {
		return nil, nil, 0, "", fmt.Errorf("lossless again: %w", err)
	}
	base = max(base, again)
	for i := range gs {
		gs[i] /= base
	}
	return gs, sent, base, vp.p.Where, nil
}
