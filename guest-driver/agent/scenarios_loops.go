package agent

import (
	"context"
	"fmt"
	"time"
)

// The scenarios that run the guest-side loops: a WRITE stream across a
// pause, WRITE bandwidth and 8-byte latency.

// Stream geometry: 16 slots of 16 KiB, 8 in flight.
const (
	streamSize   = 16 << 10
	streamSlots  = 16
	streamWindow = 8
)

// streamPause: A streams WRITEs into B; once every slot was written the
// Pause hook runs (the real-VM test stops and resumes a VM there), the
// stream must go on after it, and when stopped every WRITE posted has
// completed and B's bytes equal A's.
func streamPause(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	area := uint64(streamSize * streamSlots)
	if err := p.A.StreamStart(ctx, StreamArgs{LocalOff: 0, Size: streamSize, Slots: streamSlots, Window: streamWindow,
		Seed: seedStream, RemoteAddr: p.SB.MR.Addr, RKey: p.SB.MR.RKey, MaxDurationMs: int(10 * p.o.Wait.Milliseconds())}); err != nil {
		return r, err
	}
	res, err := p.pauseStream(ctx)
	if err != nil {
		p.A.StreamStop(ctx) // best effort: the error says what went wrong
		return r, err
	}
	if res.Err != "" || res.Posted != res.Completed || res.Completed < 2*streamSlots {
		return r, fmt.Errorf("stream: %d posted, %d completed: %s", res.Posted, res.Completed, res.Err)
	}
	if err := expect(ctx, p.B, "stream target", 0, area, res.LocalSHA256); err != nil {
		return r, err
	}
	r.Bytes = res.Bytes
	r.Metrics = map[string]float64{"writes": float64(res.Completed), "max_gap_us": res.MaxGapUs, "guest_us": res.Micros}
	r.Detail = fmt.Sprintf("%d WRITEs of 16 KiB across the pause, all completed, longest gap %.0f us, B equals A",
		res.Completed, res.MaxGapUs)
	return r, nil
}

// pauseStream waits for a full round of slots, runs the pause, waits
// for another round and stops the stream.
func (p *Pair) pauseStream(ctx context.Context) (StreamResult, error) {
	before, err := p.streamAt(ctx, streamSlots)
	if err != nil {
		return StreamResult{}, err
	}
	if p.o.Pause != nil {
		if err := p.o.Pause(ctx); err != nil {
			return StreamResult{}, fmt.Errorf("pause: %w", err)
		}
	} else {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := p.streamAt(ctx, before.Completed+streamSlots); err != nil {
		return StreamResult{}, fmt.Errorf("after the pause: %w", err)
	}
	return p.A.StreamStop(ctx)
}

// streamAt waits until the stream completed n WRITEs.
func (p *Pair) streamAt(ctx context.Context, n uint64) (StreamStatus, error) {
	deadline := time.Now().Add(p.o.Wait)
	for {
		st, err := p.A.StreamStatus(ctx)
		switch {
		case err != nil:
			return st, err
		case st.Err != "":
			return st, fmt.Errorf("stream: %s", st.Err)
		case st.Completed >= n:
			return st, nil
		case !st.Running || time.Now().After(deadline):
			return st, fmt.Errorf("stream at %d of %d WRITEs (running %v)", st.Completed, n, st.Running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bandwidth: A's WRITE bandwidth loop into B, then B's bytes equal A's.
func bandwidth(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	size := uint64(p.o.BandwidthSize)
	if size > p.SA.MR.Len || size > p.SB.MR.Len {
		return r, fmt.Errorf("WRITEs of %d bytes into a buffer of %d", size, min(p.SA.MR.Len, p.SB.MR.Len))
	}
	if err := p.A.Fill(ctx, 0, size, seedWrite); err != nil {
		return r, err
	}
	bw, err := p.A.WriteBandwidth(ctx, BandwidthArgs{LocalOff: 0, Size: uint32(size), Window: p.o.BandwidthWindow,
		DurationMs: int(p.o.BandwidthTime.Milliseconds()), RemoteAddr: p.SB.MR.Addr, RKey: p.SB.MR.RKey})
	if err != nil {
		return r, err
	}
	if err := expect(ctx, p.B, "bandwidth target", 0, size, PatternSHA256(seedWrite, size)); err != nil {
		return r, err
	}
	r.Bytes = bw.Bytes
	r.Metrics = map[string]float64{"gbps": bw.Gbps, "writes": float64(bw.Writes), "size": float64(size), "guest_us": bw.Micros}
	r.Detail = fmt.Sprintf("%.2f Gb/s: %d WRITEs of %d KiB in %.0f ms (guest clock), %d in flight",
		bw.Gbps, bw.Writes, size>>10, bw.Micros/1e3, p.o.BandwidthWindow)
	return r, nil
}

// latency: 8-byte inline WRITE ping-pong, A initiating, B echoing.
func latency(ctx context.Context, p *Pair) (Result, error) {
	var r Result
	base := uint64(time.Now().UnixNano()) // new values each run
	total := p.o.PingCount + p.o.PingWarmup
	timeout := int(p.o.Wait.Milliseconds()) + total // a millisecond per round trip at worst
	type echoed struct {
		r   EchoReply
		err error
	}
	done := make(chan echoed, 1)
	go func() {
		e, err := p.B.Echo(ctx, EchoArgs{LocalOff: offPing, RemoteAddr: p.SA.MR.Addr + offPing, RKey: p.SA.MR.RKey,
			Base: base, Count: total, TimeoutMs: timeout})
		done <- echoed{e, err}
	}()
	lat, err := p.A.PingPong(ctx, PingArgs{LocalOff: offPing, RemoteAddr: p.SB.MR.Addr + offPing, RKey: p.SB.MR.RKey,
		Base: base, Count: p.o.PingCount, Warmup: p.o.PingWarmup, TimeoutMs: timeout})
	if err != nil {
		// B's Echo waits for values that will not come until its
		// timeout, or until a Reset (the runner's reconnect) stops it.
		return r, err
	}
	e := <-done

	if e.err != nil || e.r.Echoed != total {
		return r, fmt.Errorf("echo: %d of %d: %v", e.r.Echoed, total, e.err)
	}
	r.Bytes = uint64(16 * total)
	r.Metrics = map[string]float64{"samples": float64(lat.Samples), "p50_us": lat.P50Us, "p90_us": lat.P90Us,
		"p99_us": lat.P99Us, "min_us": lat.MinUs, "max_us": lat.MaxUs, "mean_us": lat.MeanUs}
	r.Detail = fmt.Sprintf("p50 %.2f us, p99 %.2f us over %d round trips (half the round trip, guest clock)",
		lat.P50Us, lat.P99Us, lat.Samples)
	return r, nil
}
