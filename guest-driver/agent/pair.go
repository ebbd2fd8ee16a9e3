package agent

import (
	"context"
	"fmt"
	"time"
)

// RunOptions tune the scenarios. Zero fields take the defaults.
type RunOptions struct {
	// Setup sizes both guests' objects (DefaultSetup by default); the
	// scenarios need a buffer of at least MinBuf bytes.
	Setup SetupArgs
	// Wait bounds each wait for a completion (default 30 s).
	Wait time.Duration
	// Pause runs while a WRITE stream from A to B is in flight, after
	// the stream wrote every slot once: the real-VM test stops and
	// resumes a VM there (QMP stop/cont). Nil lets the stream run for
	// 100 ms.
	Pause func(ctx context.Context) error
	// BandwidthSize and BandwidthTime are the WRITE size and duration of
	// the bandwidth loop (default 64 KiB for 1 s), BandwidthWindow the
	// WRITEs in flight (default 16).
	BandwidthSize   uint32
	BandwidthTime   time.Duration
	BandwidthWindow int
	// PingCount and PingWarmup are the measured and unmeasured round
	// trips of the latency loop (default 1000 and 100).
	PingCount, PingWarmup int
	// Strict fails a scenario that cannot run rather than skipping it:
	// in real VMs every one must run.
	Strict bool
}

// MinBuf is the smallest buffer the scenarios fit in.
const MinBuf = 1 << 20

func (o RunOptions) withDefaults() RunOptions {
	if o.Wait <= 0 {
		o.Wait = 30 * time.Second
	}
	if o.BandwidthSize == 0 {
		o.BandwidthSize = 64 << 10
	}
	if o.BandwidthTime <= 0 {
		o.BandwidthTime = time.Second
	}
	if o.BandwidthWindow <= 0 {
		o.BandwidthWindow = 16
	}
	if o.PingCount <= 0 {
		o.PingCount = 1000
	}
	if o.PingWarmup <= 0 {
		o.PingWarmup = 100
	}
	return o
}

// Pair is two guests' agents with connected QPs: A and B, and what
// Setup made in each (the endpoints and MRs they exchanged).
type Pair struct {
	A, B   *Client
	SA, SB SetupReply
	o      RunOptions
}

// NewPair sets up both guests from scratch (Reset, then Setup),
// exchanges their endpoints and connects each QP to the other's, as two
// verbs applications do over TCP.
func NewPair(ctx context.Context, a, b *Client, o RunOptions) (*Pair, error) {
	p := &Pair{A: a, B: b, o: o.withDefaults()}
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pair) connect(ctx context.Context) error {
	var err error
	for _, c := range []*Client{p.A, p.B} {
		if err := c.Reset(ctx); err != nil {
			return err
		}
	}
	if p.SA, err = p.A.Setup(ctx, p.o.Setup); err != nil {
		return err
	}
	if p.SB, err = p.B.Setup(ctx, p.o.Setup); err != nil {
		return err
	}
	for _, mr := range []MRInfo{p.SA.MR, p.SB.MR} {
		if mr.Len < MinBuf {
			return fmt.Errorf("agent: buffers of %d bytes, the scenarios need %d", mr.Len, MinBuf)
		}
	}
	if err := p.A.Connect(ctx, p.SB); err != nil {
		return err
	}
	return p.B.Connect(ctx, p.SA)
}

// Reconnect sets both guests up again and connects new QPs: after a
// scenario that leaves a QP in error.
func (p *Pair) Reconnect(ctx context.Context) error { return p.connect(ctx) }

// Close destroys what the pair set up in both guests.
func (p *Pair) Close(ctx context.Context) error {
	errA := p.A.Reset(ctx)
	errB := p.B.Reset(ctx)
	if errA != nil {
		return errA
	}
	return errB
}
