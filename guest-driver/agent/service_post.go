package agent

import (
	"context"
	"fmt"
	"runtime"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Work requests and completions.

// sgl turns buffer segments into SGEs of the buffer's MR.
func (o *objects) sgl(segs []Segment) ([]abi.SGE, error) {
	if len(segs) > MaxSGL {
		return nil, fmt.Errorf("%d SGEs (at most %d)", len(segs), MaxSGL)
	}
	if len(segs) == 0 {
		return nil, nil
	}
	out := make([]abi.SGE, len(segs))
	for i, g := range segs {
		if _, err := o.span(g.Off, uint64(g.Len)); err != nil {
			return nil, fmt.Errorf("SGE %d: %w", i, err)
		}
		out[i] = o.mr.SGE(g.Off, g.Len)
	}
	return out, nil
}

func (s *Service) postSend(a PostSendArgs) error {
	if len(a.WRs) == 0 || len(a.WRs) > MaxBatch {
		return fmt.Errorf("%d work requests (1..%d)", len(a.WRs), MaxBatch)
	}
	if err := s.idle(); err != nil {
		return err
	}
	return s.use(func(o *objects) error {
		wrs := make([]guestdriver.SendWR, len(a.WRs))
		for i, w := range a.WRs {
			sgl, err := o.sgl(w.SGL)
			if err != nil {
				return fmt.Errorf("work request %d: %w", i, err)
			}
			if len(w.Inline) > MaxIO {
				return fmt.Errorf("work request %d: %d inline bytes (at most %d)", i, len(w.Inline), MaxIO)
			}
			wrs[i] = guestdriver.SendWR{
				WRID: w.WRID, Opcode: w.Opcode, SGL: sgl, Inline: w.Inline,
				Signaled: w.Signaled, Solicited: w.Solicited, Fence: w.Fence, Imm: w.Imm,
				RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap,
			}
		}
		return o.qp.PostSend(wrs...)
	})
}

func (s *Service) postRecv(a PostRecvArgs) error {
	if len(a.WRs) == 0 || len(a.WRs) > MaxBatch {
		return fmt.Errorf("%d work requests (1..%d)", len(a.WRs), MaxBatch)
	}
	return s.use(func(o *objects) error {
		wrs := make([]guestdriver.RecvWR, len(a.WRs))
		for i, w := range a.WRs {
			sgl, err := o.sgl(w.SGL)
			if err != nil {
				return fmt.Errorf("work request %d: %w", i, err)
			}
			wrs[i] = guestdriver.RecvWR{WRID: w.WRID, SGL: sgl}
		}
		return o.qp.PostRecv(wrs...)
	})
}

// maxPoll bounds the completions one Poll returns.
const maxPoll = 1024

func (s *Service) poll(ctx context.Context, a PollArgs) (PollReply, error) {
	var r PollReply
	switch {
	case a.Max < 1 || a.Max > maxPoll:
		return r, fmt.Errorf("poll of %d completions (1..%d)", a.Max, maxPoll)
	case a.Min < 0 || a.Min > a.Max:
		return r, fmt.Errorf("poll waiting for %d of %d completions", a.Min, a.Max)
	case a.Queue != SendQueue && a.Queue != RecvQueue:
		return r, fmt.Errorf("queue %q (%q or %q)", a.Queue, SendQueue, RecvQueue)
	}
	timeout, err := s.wait("poll timeout", a.TimeoutMs, false)
	if err != nil {
		return r, err
	}
	if a.Queue == SendQueue {
		if err := s.idle(); err != nil {
			return r, err
		}
	}
	err = s.use(func(o *objects) error {
		cq := o.rcq
		if a.Queue == SendQueue {
			cq = o.scq
		}
		wcs := make([]guestdriver.WC, a.Max)
		n, err := pollUntil(ctx, cq, wcs, a.Min, timeout)
		r.WCs = make([]Completion, n)
		for i, wc := range wcs[:n] {
			r.WCs[i] = Completion{WRID: wc.WRID, Status: wc.Status, Opcode: wc.Opcode, ByteLen: wc.ByteLen,
				Imm: wc.Imm, WithImm: wc.WithImm(), QPN: wc.QPN, SrcQP: wc.SrcQP}
		}
		if n > 0 {
			return nil // what was taken off the CQ must reach the host
		}
		return err
	})
	return r, err
}

// pollUntil polls cq into wcs until it holds want completions or timeout
// passed, spinning first (the device completes in microseconds) and
// then sleeping a little. It returns how many it took; the error says
// why it stopped short (the CQ failed, ctx ended), nil for a timeout.
func pollUntil(ctx context.Context, cq *guestdriver.CQ, wcs []guestdriver.WC, want int, timeout time.Duration) (int, error) {
	n := cq.Poll(wcs)
	deadline := time.Now().Add(timeout)
	for spins := 0; n < want; spins++ {
		if err := cq.Err(); err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if time.Now().After(deadline) {
			return n, nil
		}
		if spins < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
		n += cq.Poll(wcs[n:])
	}
	return n, nil
}
