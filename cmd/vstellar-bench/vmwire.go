package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The VM-to-VM side of the wire and loss suites: two hosts (hostsim.Pair,
// each an in-process vstellard with its cross-host fabric), one VM on
// each, and qps RC QP pairs between them. The engine runs one request per
// QP at a time (stop-and-wait), so a stream keeps a few WRITEs posted on
// each of several QPs to keep the wire busy.

const (
	// vmBuf is each VM's registered buffer: the largest WRITE.
	vmBuf = 4 << 20
	// vmPerQP is how many WRITEs each QP keeps posted: the next one is
	// ready when the engine finishes the current.
	vmPerQP = 2
)

type vmSide struct {
	vm  *hostsim.VM
	pd  *guestdriver.PD
	cq  *guestdriver.CQ
	qps []*guestdriver.QP
	buf guestdriver.Buffer
	mr  *guestdriver.MR
	// spin is how long next polls before it waits for an event.
	spin time.Duration
}

// How long a poller spins before it arms the CQ and blocks. Measured on
// two cores: a stream does best with a short spin (completions come
// often; blocking at once costs the event path each time), latency with
// one longer than the round trip (a blocked poller adds the event path,
// about 200 µs, to most samples). Spinning for ever is worse than either:
// see next.
const (
	streamSpin  = 30 * time.Microsecond
	latencySpin = 200 * time.Microsecond
)

// vmPair is two VMs on the two hosts of a Pair, their QPs connected
// pairwise; a sends, b is written into.
type vmPair struct {
	p    *hostsim.Pair
	a, b *vmSide
}

func newVMPair(ctx context.Context, o hostsim.PairOptions, qps int) (_ *vmPair, err error) {
	p, err := hostsim.NewPair(ctx, o)
	if err != nil {
		return nil, err
	}
	vp := &vmPair{p: p}
	defer func() {
		if err != nil {
			vp.close()
		}
	}()
	if vp.a, err = newVMSide(ctx, p.Hosts[0], "bench-xa", qps); err != nil {
		return nil, fmt.Errorf("host 1 VM: %w", err)
	}
	if vp.b, err = newVMSide(ctx, p.Hosts[1], "bench-xb", qps); err != nil {
		return nil, fmt.Errorf("host 2 VM: %w", err)
	}
	if err := connectSides(ctx, vp.a, vp.b); err != nil {
		return nil, err
	}
	return vp, nil
}

// connectSides connects a's QPs to b's, pairwise, both ways.
func connectSides(ctx context.Context, a, b *vmSide) error {
	for i := range a.qps {
		if err := a.qps[i].ConnectTo(ctx, b.qps[i].Endpoint()); err != nil {
			return fmt.Errorf("QP pair %d: %w", i, err)
		}
		if err := b.qps[i].ConnectTo(ctx, a.qps[i].Endpoint()); err != nil {
			return fmt.Errorf("QP pair %d: %w", i, err)
		}
	}
	return nil
}

func newVMSide(ctx context.Context, h *hostsim.Host, name string, qps int) (*vmSide, error) {
	vm, err := h.AddVM(ctx, name, hostsim.VMOptions{MemSize: 64 << 20, Tenant: 1})
	if err != nil {
		return nil, err
	}
	s := &vmSide{vm: vm}
	d := vm.Driver
	if s.pd, err = d.AllocPD(ctx); err != nil {
		return nil, err
	}
	if s.cq, err = d.CreateCQ(ctx, 256); err != nil {
		return nil, err
	}
	for range qps {
		qp, err := s.pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: s.cq, RecvCQ: s.cq,
			Cap: guestdriver.QPCap{SQSize: 16, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
		if err != nil {
			return nil, err
		}
		s.qps = append(s.qps, qp)
	}
	if s.buf, err = d.Alloc(vmBuf, 2<<20); err != nil {
		return nil, err
	}
	b := s.buf.Bytes()
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // fault the pages in: the first stream should not pay it
	}
	s.mr, err = s.pd.RegMR(ctx, s.buf, abi.AccessLocalWrite|abi.AccessRemoteWrite|abi.AccessRemoteRead)
	return s, err
}

func (vp *vmPair) close() {
	vp.p.Close()
}

// setLoss sets the random loss on both hosts' veth ends.
func (vp *vmPair) setLoss(p float64) error {
	if vp.p.Bed == nil {
		return errors.New("no network namespaces: cannot inject loss")
	}
	for _, h := range vp.p.Bed.Hosts() {
		if err := vp.p.Bed.SetLoss(h, p); err != nil {
			return fmt.Errorf("loss %g on %s: %w", p, h.Name(), err)
		}
	}
	return nil
}

// stream keeps vmPerQP signalled WRITEs of size bytes posted on each of
// the first qps QPs from a into b for d, and returns the goodput: Gb/s of
// WRITEs completed, from the start to the last of them.
func (vp *vmPair) stream(ctx context.Context, size, qps int, d time.Duration) (float64, error) {
	a, b := vp.a, vp.b
	a.spin = streamSpin
	qps = min(qps, len(a.qps))
	post := func(q int, seq uint64) error {
		return a.qps[q].PostSend(guestdriver.SendWR{
			WRID:       uint64(q)<<32 | seq&0xffffffff,
			Opcode:     abi.WRRDMAWrite,
			SGL:        []abi.SGE{a.mr.SGE(0, uint32(size))},
			RemoteAddr: b.mr.IOVA(),
			RKey:       b.mr.RKey(),
			Signaled:   true,
		})
	}
	outstanding := 0
	for q := range qps {
		for i := range vmPerQP {
			if err := post(q, uint64(i)); err != nil {
				return 0, fmt.Errorf("posting on QP %d: %w", q, err)
			}
			outstanding++
		}
	}
	wcs := make([]guestdriver.WC, 64)
	var bytes uint64
	start := time.Now()
	last := start // the last completion, to tell a stall
	end := start  // the last completion counted
	var seq uint64 = vmPerQP
	for outstanding > 0 {
		k, err := a.next(ctx, wcs)
		if err != nil {
			return 0, err
		}
		now := time.Now()
		// A run lasts d, and at least until every QP completed a WRITE
		// (a slow machine, -race): a figure of nothing says nothing.
		running := now.Sub(start) < d || bytes < uint64(qps*size)
		for _, wc := range wcs[:k] {
			outstanding--
			if err := wc.Err(); err != nil {
				return 0, fmt.Errorf("WRITE %#x: %w", wc.WRID, err)
			}
			if !running {
				continue // draining: the next run starts clean
			}
			bytes += uint64(size)
			end = now
			seq++
			if err := post(int(wc.WRID>>32), seq); err != nil {
				return 0, fmt.Errorf("posting on QP %d: %w", wc.WRID>>32, err)
			}
			outstanding++
		}
		if k > 0 {
			last = now
			continue
		}
		if now.Sub(last) > 10*time.Second {
			return 0, fmt.Errorf("stream stalled: %d WRITEs outstanding, none completed for 10 s", outstanding)
		}
	}
	return gbps(bytes, end.Sub(start)), nil
}

// latency measures n 8-byte inline signalled WRITEs on QP 0, one at a
// time, from post to completion (data there, acknowledgement back), after
// a warm-up; the durations come back sorted.
func (vp *vmPair) latency(ctx context.Context, n int) ([]time.Duration, error) {
	a, b := vp.a, vp.b
	a.spin = latencySpin
	warm := min(200, n/4)
	var v [8]byte
	wcs := make([]guestdriver.WC, 4)
	rtts := make([]time.Duration, 0, n)
	for i := range warm + n {
		v[0] = byte(i)
		t0 := time.Now()
		err := a.qps[0].PostSend(guestdriver.SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Inline: v[:],
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey(), Signaled: true})
		if err != nil {
			return nil, err
		}
		for {
			k, err := a.next(ctx, wcs)
			if err != nil {
				return nil, err
			}
			if k > 0 {
				if err := wcs[0].Err(); err != nil {
					return nil, fmt.Errorf("WRITE %d: %w", i, err)
				}
				break
			}
			if time.Since(t0) > 10*time.Second {
				return nil, fmt.Errorf("8-byte WRITE %d: no completion in 10 s", i)
			}
		}
		if i >= warm {
			rtts = append(rtts, time.Since(t0))
		}
	}
	slices.Sort(rtts)
	return rtts, nil
}

// next returns the completions on s's CQ: it polls for s.spin, then
// waits for them by armed notification rather than spinning on: with two
// cores, a poller that
// yields in a loop keeps the Go scheduler's run queue non-empty, so the
// scheduler stops polling the network (only sysmon does, every 10 ms)
// and the I/O loops' packets wait. It may return none (a stale
// notification, or a second without one): the caller calls again.
func (s *vmSide) next(ctx context.Context, wcs []guestdriver.WC) (int, error) {
	if k := s.cq.Poll(wcs); k > 0 {
		return k, nil
	}
	if s.spin > 0 {
		for t0 := time.Now(); time.Since(t0) < s.spin; {
			runtime.Gosched()
			if k := s.cq.Poll(wcs); k > 0 {
				return k, nil
			}
		}
	}
	if err := s.cq.ReqNotify(false); err != nil {
		return 0, err
	}
	// A completion that landed before the arm raises no event.
	if k := s.cq.Poll(wcs); k > 0 {
		return k, nil
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.cq.Wait(wctx); err != nil && wctx.Err() == nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.cq.Poll(wcs), nil
}

// pairSockets opens a UDP socket set on each host of p, inside its
// namespace (or on loopback), for the raw UDP baseline and the
// transport-only rows, and resolves the neighbours.
func pairSockets(ctx context.Context, p *hostsim.Pair, paths int) (*hostPair, error) {
	hp := &hostPair{where: p.Where}
	cfg := func(a netip.Addr) udp.Config {
		return udp.Config{Addr: netip.AddrPortFrom(a, 0), Paths: paths, RecvBuffer: 16 << 20, SendBuffer: 16 << 20}
	}
	for i := range hp.socks {
		var err error
		if p.Bed == nil {
			hp.socks[i], err = udp.Listen(ctx, cfg(netip.MustParseAddr("127.0.0.1")))
		} else {
			h := p.Bed.Hosts()[i]
			err = h.Do(func() error {
				s, err := udp.Listen(ctx, cfg(h.Addr()))
				hp.socks[i] = s
				return err
			})
		}
		if err != nil {
			hp.close()
			return nil, fmt.Errorf("UDP socket on host %d: %w", i+1, err)
		}
	}
	for i := range hp.socks {
		if _, err := udp.PingPong(ctx, hp.socks[i], hp.socks[1-i], 3, 8); err != nil {
			hp.close()
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	return hp, nil
}
