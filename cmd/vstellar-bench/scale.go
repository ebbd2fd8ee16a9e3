package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// The verbs suite's scaling table (--pairs): K pairs of VMs on one
// daemon, each writer on a goroutine of its own keeping writeWindow
// 1 MiB WRITEs in flight, all K at once. The baseline is K memcpys at
// once, each between its own two buffers: what the host's memory and
// cores give K copies, which is where the data path must stop growing.

// maxPairs bounds --pairs: 2K VMs of 1 GiB each (memfd, touched only
// where written).
const maxPairs = 16

// scaleSize is the WRITE size of the scaling table.
const scaleSize = 1 << 20

func verbsScaling(ctx context.Context, host *hostsim.Host, o options, r *report) error {
	k := slices.Max(o.pairs)
	// Writers first, so that the least-loaded placement of engine.Cores
	// gives the first writers threads of their own.
	senders := make([]*verbsSide, k)
	receivers := make([]*verbsSide, k)
	for i := range k {
		s, err := newVerbsSide(ctx, host, fmt.Sprintf("scale-a%d", i))
		if err != nil {
			return err
		}
		senders[i] = s
	}
	for i := range k {
		s, err := newVerbsSide(ctx, host, fmt.Sprintf("scale-b%d", i))
		if err != nil {
			return err
		}
		receivers[i] = s
		if err := senders[i].qp.ConnectTo(ctx, s.qp.Endpoint()); err != nil {
			return err
		}
		if err := s.qp.ConnectTo(ctx, senders[i].qp.Endpoint()); err != nil {
			return err
		}
	}
	var bufs []*guestmem.Mapping
	defer func() {
		for _, b := range bufs {
			b.Unmap()
		}
	}()
	for range 2 * k {
		b, err := memfdBuffer(scaleSize)
		if err != nil {
			return err
		}
		bufs = append(bufs, b)
	}
	perPair := uint64(512 << 20)
	if o.quick {
		perPair = 64 << 20
	}
	if o.tiny {
		perPair = 0
	}
	n := int(max(perPair/scaleSize, 64))

	t := r.table(fmt.Sprintf("RDMA WRITE %s from K VM pairs at once on one daemon, vs K memcpys at once (best of %d)", sizeName(scaleSize), bwRounds),
		"K pairs", "WRITE Gb/s", "x K=1", "memcpy Gb/s", "ratio", "CPU s / GB")
	fig := r.lines("pairs", "Aggregate RDMA WRITE (1 MiB) against VM pairs writing at once", "VM pairs", "Gb/s")
	var base float64
	for _, kk := range o.pairs {
		bestW, bestM, cpu, err := bestOfRounds(
			func() time.Duration { return parallelMemcpy(bufs[:2*kk], n) },
			func() (time.Duration, error) { return parallelWrites(ctx, senders[:kk], receivers[:kk], n) })
		if err != nil {
			return fmt.Errorf("%d pairs: %w", kk, err)
		}
		total := uint64(kk) * uint64(n) * scaleSize
		wg, mg := gbps(total, bestW), gbps(total, bestM)
		if base == 0 {
			base = wg
		}
		cpuPerGB := cpu.Seconds() / (float64(total) * bwRounds / 1e9)
		t.row(fmt.Sprint(kk), fmt.Sprintf("%.1f", wg), fmt.Sprintf("%.2f", wg/base), fmt.Sprintf("%.1f", mg), fmt.Sprintf("%.2f", wg/mg), fmt.Sprintf("%.3f", cpuPerGB))
		fig.add("RDMA WRITE", float64(kk), wg)
		fig.add("memcpy", float64(kk), mg)
		r.set(fmt.Sprintf("pairs_%d_write_gbps", kk), wg)
		r.set(fmt.Sprintf("pairs_%d_ratio", kk), wg/mg)
	}
	r.note("scaling: %d CPUs; each pair's writer polls its CQ from a goroutine of its own", runtime.NumCPU())
	return nil
}

// parallelWrites runs writeBandwidth on every pair at once and returns
// the time until the last finished.
func parallelWrites(ctx context.Context, senders, receivers []*verbsSide, n int) (time.Duration, error) {
	errs := make([]error, len(senders))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range senders {
		wg.Go(func() {
			<-start
			_, errs[i] = senders[i].writeBandwidth(ctx, receivers[i], scaleSize, n)
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	d := time.Since(t0)
	for i, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("pair %d: %w", i, err)
		}
	}
	return d, nil
}

// parallelMemcpy copies scaleSize bytes n times in each pair of bufs at
// once and returns the time until the last finished.
func parallelMemcpy(bufs []*guestmem.Mapping, n int) time.Duration {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i+1 < len(bufs); i += 2 {
		src, dst := bufs[i].View().Bytes(), bufs[i+1].View().Bytes()
		wg.Go(func() {
			<-start
			memcpyRate(src, dst, scaleSize, n)
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t0)
}

// wireScaling is the wire suite's scaling table (--pairs): K VMs on each
// host, VM i on host 1 streaming 1 MiB WRITEs into VM i on host 2 over
// qps QP pairs of its own, all K at once for d; the aggregate goodput
// against K = 1, and the single raw UDP flow of the suite as the
// reference. Every VM's device has an engine of its own; the hosts'
// fabrics (one socket and endpoint each) are shared.
func wireScaling(ctx context.Context, vp *vmPair, o options, r *report, qps int, d time.Duration, udpGbps float64) error {
	pairs := []*vmPair{vp}
	for i := 1; i < slices.Max(o.pairs); i++ {
		a, err := newVMSide(ctx, vp.p.Hosts[0], fmt.Sprintf("bench-xa%d", i), qps)
		if err != nil {
			return fmt.Errorf("host 1 VM %d: %w", i, err)
		}
		b, err := newVMSide(ctx, vp.p.Hosts[1], fmt.Sprintf("bench-xb%d", i), qps)
		if err != nil {
			return fmt.Errorf("host 2 VM %d: %w", i, err)
		}
		if err := connectSides(ctx, a, b); err != nil {
			return err
		}
		pairs = append(pairs, &vmPair{p: vp.p, a: a, b: b})
	}
	t := r.table(fmt.Sprintf("RDMA WRITE 1 MiB goodput from K VMs on host 1 to K on host 2 at once (%d QP pairs each; best of %d)", qps, bwRounds),
		"K pairs", "aggregate Gb/s", "x K=1", "/ raw UDP", "CPU s / GB")
	fig := r.lines("wire-pairs", "Aggregate VM-to-VM goodput (1 MiB WRITEs) against VM pairs streaming at once", "VM pairs", "Gb/s")
	var base float64
	for _, k := range o.pairs {
		var best, cpu float64
		for range bwRounds {
			c0, err := cpuTime()
			if err != nil {
				return err
			}
			g, err := parallelStreams(ctx, pairs[:k], qps, d)
			if err != nil {
				return fmt.Errorf("%d pairs: %w", k, err)
			}
			c1, err := cpuTime()
			if err != nil {
				return err
			}
			// CPU time per GB moved over the round's own duration.
			cpu += (c1 - c0).Seconds() / (g * d.Seconds() / 8)
			best = max(best, g)
		}
		if base == 0 {
			base = best
		}
		t.row(fmt.Sprint(k), fmt.Sprintf("%.2f", best), fmt.Sprintf("%.2f", best/base), fmt.Sprintf("%.2f", best/udpGbps), fmt.Sprintf("%.3f", cpu/bwRounds))
		fig.add("VM to VM", float64(k), best)
		r.set(fmt.Sprintf("pairs_%d_gbps", k), best)
	}
	fig.reference("raw batched UDP, one flow", float64(o.pairs[0]), float64(slices.Max(o.pairs)), udpGbps)
	return nil
}

// parallelStreams runs stream on every pair at once for d and returns
// their summed goodput.
func parallelStreams(ctx context.Context, pairs []*vmPair, qps int, d time.Duration) (float64, error) {
	gs := make([]float64, len(pairs))
	errs := make([]error, len(pairs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range pairs {
		wg.Go(func() {
			<-start
			gs[i], errs[i] = p.stream(ctx, scaleSize, qps, d)
		})
	}
	close(start)
	wg.Wait()
	sum := 0.0
	for i := range pairs {
		if errs[i] != nil {
			return 0, fmt.Errorf("pair %d: %w", i, errs[i])
		}
		sum += gs[i]
	}
	return sum, nil
}
