package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The loops run inside the guest so that the RPC is not in what they
// measure. One runs at a time: it owns the send queue and its CQ, and
// PostSend and Poll of the send CQ are refused meanwhile.

// startLoop claims the loop slot for name (a stream's state with it),
// with a context that ends after limit (or when Reset stops it).
func (s *Service) startLoop(ctx context.Context, name string, limit time.Duration, st *stream) (*loop, context.Context, error) {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.loop != nil {
		return nil, nil, fmt.Errorf("busy: %s running", s.loop.name)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	l := &loop{name: name, cancel: cancel, done: make(chan struct{}), stream: st}
	s.loop = l
	return l, ctx, nil
}

// endLoop marks l stopped and frees the slot.
func (s *Service) endLoop(l *loop) {
	l.cancel()
	close(l.done)
	s.release(l)
}

// release frees the slot if l holds it.
func (s *Service) release(l *loop) {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.loop == l {
		s.loop = nil
	}
}

// stopLoop stops the running loop, waits for it and frees the slot.
func (s *Service) stopLoop() {
	s.loopMu.Lock()
	l := s.loop
	s.loopMu.Unlock()
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
	s.release(l)
}

// idle refuses while a loop owns the send queue.
func (s *Service) idle() error {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.loop != nil {
		return fmt.Errorf("busy: %s running", s.loop.name)
	}
	return nil
}

// maxLoopCount bounds the iterations a loop may be asked for.
const maxLoopCount = 1 << 24

// bandwidth answers WriteBandwidth.
func (s *Service) bandwidth(ctx context.Context, a BandwidthArgs) (BandwidthReply, error) {
	var r BandwidthReply
	dur, err := s.wait("duration", a.DurationMs, false)
	switch {
	case err != nil:
		return r, err
	case a.Count < 0 || a.Count > maxLoopCount:
		return r, fmt.Errorf("%d WRITEs (0..%d)", a.Count, maxLoopCount)
	case a.Count == 0 && dur == 0:
		return r, errors.New("neither a count nor a duration")
	case a.Size == 0:
		return r, errors.New("WRITEs of 0 bytes")
	case a.Window < 1 || a.Window > maxPoll:
		return r, fmt.Errorf("window of %d (1..%d)", a.Window, maxPoll)
	}
	limit := s.o.MaxWait
	if dur > 0 {
		limit = dur + s.o.CommandTimeout // room to drain the last window
	}
	err = s.use(func(o *objects) error {
		if _, err := o.span(a.LocalOff, uint64(a.Size)); err != nil {
			return err
		}
		l, ctx, err := s.startLoop(ctx, "bandwidth", limit, nil)
		if err != nil {
			return err
		}
		defer s.endLoop(l)
		wr := guestdriver.SendWR{Opcode: abi.WRRDMAWrite, Signaled: true,
			SGL: []abi.SGE{o.mr.SGE(a.LocalOff, a.Size)}, RemoteAddr: a.RemoteAddr, RKey: a.RKey}
		wcs := make([]guestdriver.WC, 64)
		posted, done := 0, 0
		t0 := time.Now()
		for {
			more := (a.Count == 0 || posted < a.Count) && (dur == 0 || time.Since(t0) < dur)
			for more && posted-done < a.Window {
				wr.WRID = uint64(posted)
				if err := o.qp.PostSend(wr); err != nil {
					if errors.Is(err, guestdriver.ErrQueueFull) {
						break
					}
					return fmt.Errorf("WRITE %d: %w", posted, err)
				}
				posted++
				more = a.Count == 0 || posted < a.Count
			}
			if !more && done == posted {
				break
			}
			k := o.scq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if err := wc.Err(); err != nil {
					return fmt.Errorf("WRITE %d: %w", wc.WRID, err)
				}
			}
			done += k
			if k == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("after %d of %d WRITEs: %w", done, posted, err)
				}
				runtime.Gosched() // leave the engine room to run
			}
		}
		el := time.Since(t0)
		r = BandwidthReply{Writes: done, Bytes: uint64(done) * uint64(a.Size), Micros: micros(el)}
		r.Gbps = float64(r.Bytes) * 8 / float64(max(el.Nanoseconds(), 1))
		return nil
	})
	return r, err
}

// slot8 checks an 8-byte ping-pong slot of the buffer.
func (o *objects) slot8(off uint64) error {
	if off%8 != 0 {
		return fmt.Errorf("offset %#x is not 8-byte aligned", off)
	}
	_, err := o.span(off, 8)
	return err
}

// write8 WRITEs v, inline and unsignalled, to the peer's 8 bytes.
func write8(ctx context.Context, qp *guestdriver.QP, addr uint64, rkey uint32, v uint64) error {
	var b [8]byte
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	for {
		err := qp.PostSend(guestdriver.SendWR{Opcode: abi.WRRDMAWrite, Inline: b[:], RemoteAddr: addr, RKey: rkey})
		if !errors.Is(err, guestdriver.ErrQueueFull) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		runtime.Gosched()
	}
}

// await spins until the 8 bytes at off hold v. Now and then it checks
// ctx and the send CQ: the WRITEs are unsignalled, so any completion
// there is a failed one.
func await(ctx context.Context, o *objects, off, v uint64) error {
	var wc [1]guestdriver.WC
	for spins := 0; o.buf.View.LoadUint64Acquire(off) != v; spins++ {
		if spins&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("waiting for %d (holding %d): %w", v, o.buf.View.LoadUint64Acquire(off), err)
			}
			if o.scq.Poll(wc[:]) == 1 {
				return fmt.Errorf("WRITE failed: %v", wc[0].Status)
			}
		}
		runtime.Gosched()
	}
	return nil
}

func (s *Service) checkPing(count, timeoutMs int) (time.Duration, error) {
	if count < 1 || count > maxLoopCount {
		return 0, fmt.Errorf("%d round trips (1..%d)", count, maxLoopCount)
	}
	return s.wait("timeout", timeoutMs, true)
}

// pingPong answers PingPong.
func (s *Service) pingPong(ctx context.Context, a PingArgs) (PingReply, error) {
	var r PingReply
	if a.Warmup < 0 || a.Warmup > maxLoopCount {
		return r, fmt.Errorf("%d warm-up round trips (0..%d)", a.Warmup, maxLoopCount)
	}
	timeout, err := s.checkPing(a.Count, a.TimeoutMs)
	if err != nil {
		return r, err
	}
	err = s.use(func(o *objects) error {
		if err := o.slot8(a.LocalOff); err != nil {
			return err
		}
		l, ctx, err := s.startLoop(ctx, "ping-pong", timeout, nil)
		if err != nil {
			return err
		}
		defer s.endLoop(l)
		rtts := make([]time.Duration, 0, a.Count)
		for i := 1; i <= a.Warmup+a.Count; i++ {
			v := a.Base + uint64(i)
			t0 := time.Now()
			if err := write8(ctx, o.qp, a.RemoteAddr, a.RKey, v); err != nil {
				return fmt.Errorf("round trip %d: %w", i, err)
			}
			if err := await(ctx, o, a.LocalOff, v); err != nil {
				return fmt.Errorf("round trip %d: %w", i, err)
			}
			if i > a.Warmup {
				rtts = append(rtts, time.Since(t0))
			}
		}
		r = latencies(rtts)
		return nil
	})
	return r, err
}

// latencies summarises round trips as one-way latencies (half each).
func latencies(rtts []time.Duration) PingReply {
	slices.Sort(rtts)
	n := len(rtts)
	half := func(d time.Duration) float64 { return micros(d) / 2 }
	// Nearest rank.
	pct := func(p int) float64 { return half(rtts[max((p*n+99)/100-1, 0)]) }
	var sum time.Duration
	for _, d := range rtts {
		sum += d
	}
	return PingReply{Samples: n, MinUs: half(rtts[0]), P50Us: pct(50), P90Us: pct(90), P99Us: pct(99),
		MaxUs: half(rtts[n-1]), MeanUs: half(sum / time.Duration(n))}
}

// echo answers Echo.
func (s *Service) echo(ctx context.Context, a EchoArgs) (EchoReply, error) {
	var r EchoReply
	timeout, err := s.checkPing(a.Count, a.TimeoutMs)
	if err != nil {
		return r, err
	}
	err = s.use(func(o *objects) error {
		if err := o.slot8(a.LocalOff); err != nil {
			return err
		}
		l, ctx, err := s.startLoop(ctx, "echo", timeout, nil)
		if err != nil {
			return err
		}
		defer s.endLoop(l)
		for i := 1; i <= a.Count; i++ {
			v := a.Base + uint64(i)
			if err := await(ctx, o, a.LocalOff, v); err != nil {
				return fmt.Errorf("value %d: %w", i, err)
			}
			if err := write8(ctx, o.qp, a.RemoteAddr, a.RKey, v); err != nil {
				return fmt.Errorf("value %d: %w", i, err)
			}
			r.Echoed = i
		}
		return nil
	})
	return r, err
}
