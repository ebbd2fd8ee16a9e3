package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/netlab"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// The wire and loss suites measure the transport between two hosts: two
// network namespaces joined by a veth (transport/netlab), each with a UDP
// socket set and an endpoint running the sans-IO core. A guest's memory
// is stood in for by the sink's buffer the WRITEs land in (one copy per
// byte, as placement into guest RAM costs); the VMs and the engine are
// not in the path yet (docs/transport.md, "Not yet").

// hostPair is two hosts' sockets: in namespaces when the machine allows,
// else on loopback.
type hostPair struct {
	socks [2]*udp.Conn
	bed   *netlab.Bed
	where string
}

// newHostPair builds the two hosts. needBed refuses the loopback
// fallback (the loss suite needs the bed's loss injection).
func newHostPair(ctx context.Context, o netlab.Options, paths int, needBed bool) (*hostPair, error) {
	hp := &hostPair{}
	if err := netlab.Available(); err != nil {
		if needBed {
			return nil, fmt.Errorf("this suite needs network namespaces (run as root): %w", err)
		}
		hp.where = "loopback (no namespaces: " + err.Error() + ")"
		for i := range hp.socks {
			s, err := udp.Listen(ctx, udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Paths: paths, RecvBuffer: 16 << 20, SendBuffer: 16 << 20})
			if err != nil {
				hp.close()
				return nil, err
			}
			hp.socks[i] = s
		}
		return hp, nil
	}
	bed, err := netlab.TwoHost(ctx, o)
	if err != nil {
		return nil, err
	}
	hp.bed = bed
	hp.where = fmt.Sprintf("two network namespaces joined by a veth, MTU %d", o.MTU)
	if o.Rate > 0 {
		hp.where += fmt.Sprintf(", %.1f Gb/s (tbf)", float64(o.Rate)/1e9)
	}
	for i, h := range bed.Hosts() {
		err := h.Do(func() error {
			s, err := udp.Listen(ctx, udp.Config{Addr: netip.AddrPortFrom(h.Addr(), 0), Paths: paths, RecvBuffer: 16 << 20, SendBuffer: 16 << 20})
			hp.socks[i] = s
			return err
		})
		if err != nil {
			hp.close()
			return nil, err
		}
	}
	// Neighbours resolved before anything is measured.
	for i := range hp.socks {
		if _, err := udp.PingPong(ctx, hp.socks[i], hp.socks[1-i], 3, 8); err != nil {
			hp.close()
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	return hp, nil
}

func (hp *hostPair) close() {
	for _, s := range hp.socks {
		if s != nil {
			s.Close()
		}
	}
	if hp.bed != nil {
		hp.bed.Close()
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
	for time.Since(start) < d {
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
	d, pings := 2*time.Second, 20000
	if o.quick {
		sizes, d, pings = []int{64 << 10, 1 << 20}, 500*time.Millisecond, 3000
	}
	if o.tiny {
		sizes, d, pings = []int{1 << 20}, 100*time.Millisecond, 200
	}
	const paths = 4
	hp, err := newHostPair(ctx, netlab.Options{Prefix: "vsbench", MTU: 9000}, paths, false)
	if err != nil {
		return err
	}
	defer hp.close()
	l, err := newLink(ctx, hp, transport.Config{Tenant: 1, MaxPayload: 8892}, paths)
	if err != nil {
		return err
	}
	defer l.close()

	t := r.table("WRITE goodput between two hosts, transport vs raw batched UDP (8892-byte datagrams), "+hp.where, "size", "transport Gb/s", "UDP Gb/s", "ratio")
	var tp1m float64
	for _, size := range sizes {
		g, err := l.stream(ctx, size, max(2, (8<<20)/size), d)
		if err != nil {
			return fmt.Errorf("%s: %w", sizeName(uint64(size)), err)
		}
		if size == 1<<20 {
			tp1m = g
		}
		r.set("transport_gbps_"+sizeKey(uint64(size)), g)
		t.row(sizeName(uint64(size)), fmt.Sprintf("%.2f", g), "", "")
	}
	// The baseline: the same datagrams, blasted with the same batching,
	// while the endpoints idle.
	blast, err := udp.BlastThroughput(ctx, hp.socks[0], hp.socks[1], hp.socks[1].LocalAddr(0), wire.HeaderLen+wire.DataLen+8892, d)
	if err != nil {
		return fmt.Errorf("udp blast: %w", err)
	}
	t.row("raw UDP", "", fmt.Sprintf("%.2f", blast.Gbps), fmt.Sprintf("%.2f", tp1m/blast.Gbps))
	r.set("transport_gbps", tp1m)
	r.set("udp_gbps", blast.Gbps)
	r.set("ratio", tp1m/blast.Gbps)

	rtts, err := l.pingPong(pings)
	if err != nil {
		return err
	}
	l.close()
	udpLat, err := udp.PingPong(ctx, hp.socks[0], hp.socks[1], pings, 8)
	if err != nil {
		return fmt.Errorf("udp ping-pong: %w", err)
	}
	tp50, tp99 := percentile(rtts, 0.5)/2, percentile(rtts, 0.99)/2
	u50, u99 := udpLat.P50/2, udpLat.P99/2
	lt := r.table("8-byte WRITE latency (half the round trip, as ib_write_lat reports it), µs", "", "p50", "p99")
	lt.row("transport", fmt.Sprintf("%.1f", us(tp50)), fmt.Sprintf("%.1f", us(tp99)))
	lt.row("raw UDP", fmt.Sprintf("%.1f", us(u50)), fmt.Sprintf("%.1f", us(u99)))
	r.set("lat_8b_p50_us", us(tp50))
	r.set("udp_lat_p50_us", us(u50))
	r.set("lat_ratio", us(tp50)/us(u50))
	r.note("transport: one endpoint goroutine per host, %d paths, MaxPayload 8892; ratio = transport / UDP at 1 MiB", paths)
	r.note("the transport's WRITE lands in the receiver's buffer (one copy per byte, as into guest RAM); VMs and the engine are not in the path yet")
	r.note("goals: ratio >= 0.8, lat_ratio <= 1.5")
	return nil
}

func runLoss(ctx context.Context, o options, r *report) error {
	rates := []int{16384, 4096, 1024, 256}
	d := 2 * time.Second
	if o.quick {
		d = 700 * time.Millisecond
	}
	if o.tiny {
		rates, d = []int{1024}, 150*time.Millisecond
	}
	const rate = 1e9
	const paths = 1
	hp, err := newHostPair(ctx, netlab.Options{Prefix: "vsbench", MTU: 1500, Rate: rate}, paths, true)
	if err != nil {
		return err
	}
	defer hp.close()
	head := []string{"recovery", "lossless Gb/s"}
	for _, n := range rates {
		head = append(head, fmt.Sprintf("1/%d", n))
	}
	t := r.table("WRITE goodput under random loss (both directions) as a fraction of lossless, 1 MiB WRITEs, "+hp.where, head...)
	for _, mode := range []transport.Recovery{transport.Selective, transport.GoBackN} {
		key := map[transport.Recovery]string{transport.Selective: "sack", transport.GoBackN: "gbn"}[mode]
		l, err := newLink(ctx, hp, transport.Config{Tenant: 1, MaxPayload: 1392, Recovery: mode}, paths)
		if err != nil {
			return err
		}
		setLoss := func(p float64) error {
			for _, h := range hp.bed.Hosts() {
				if err := hp.bed.SetLoss(h, p); err != nil {
					return err
				}
			}
			return nil
		}
		if err := setLoss(0); err != nil {
			l.close()
			return err
		}
		// Warm up (the first run pays neighbour resolution and the RTT
		// estimator's start), then measure lossless.
		if _, err := l.stream(ctx, 1<<20, 4, d/2); err != nil {
			l.close()
			return fmt.Errorf("%s warm-up: %w", key, err)
		}
		base, err := l.stream(ctx, 1<<20, 4, d)
		if err != nil {
			l.close()
			return fmt.Errorf("%s lossless: %w", key, err)
		}
		fracs := make([]float64, 0, len(rates))
		for _, n := range rates {
			if err := setLoss(1 / float64(n)); err != nil {
				l.close()
				return err
			}
			g, err := l.stream(ctx, 1<<20, 4, d)
			if err != nil {
				l.close()
				return fmt.Errorf("%s at 1/%d: %w", key, n, err)
			}
			fracs = append(fracs, g)
		}
		// Lossless again: the baseline is the better of the two, so a
		// slow first measurement cannot flatter the lossy ones.
		if err := setLoss(0); err != nil {
			l.close()
			return err
		}
		again, err := l.stream(ctx, 1<<20, 4, d)
		l.close()
		if err != nil {
			return fmt.Errorf("%s lossless again: %w", key, err)
		}
		base = max(base, again)
		r.set(key+"_gbps_0", base)
		row := []string{mode.String(), fmt.Sprintf("%.3f", base)}
		for i, n := range rates {
			r.set(fmt.Sprintf("%s_frac_%d", key, n), fracs[i]/base)
			row = append(row, fmt.Sprintf("%.3f", fracs[i]/base))
		}
		t.row(row...)
	}
	r.note("each point runs %v with 4 WRITEs of 1 MiB in flight on one path, MaxPayload 1392; loss is random per packet, both directions (data and ACKs), from an eBPF program on each veth", d)
	r.note("goals: sack_frac_1024 >= 0.94, go-back-N visibly worse")
	return nil
}
