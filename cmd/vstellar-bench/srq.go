package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The srq suite: receive throughput and receive-ring memory with N QPs
// taking their receives from one shared receive queue, against the same
// N QPs with a receive queue each (the baseline, in the same run). VM a
// SENDs msgs messages round-robin over its N QPs, srqWindow in flight in
// all; VM b reposts each receive buffer as its completion arrives, to the
// SRQ or to the QP it completed on.

const srqMethod = `Two simulated VMs on one in-process vstellard (hostsim), N RC QP pairs
(1, 64, 1024). VM a SENDs 4 KiB messages round-robin over its QPs, 64 in
flight in all; VM b takes them into receive buffers it reposts as each
completion arrives. With an SRQ, b's QPs share one SRQ of 1024 WQEs; the
baseline, measured alternately in the same run, gives each of b's QPs its
own RQ of twice its share of the messages in flight, at least 16 WQEs
(128 for one QP, 16 from 8 QPs on). Memory is the guest RAM of b's
receive rings.`

var srqGoals = []goal{
	atLeast("srq_rq_ratio_1024", 0.8, "SRQ / per-QP RQ receive throughput at 1024 QPs"),
	atLeast("srq_mem_saved_1024", 10, "per-QP RQ / SRQ receive-ring memory at 1024 QPs"),
}

const (
	srqMsg    = 4 << 10
	srqWindow = 64   // SENDs in flight from a, over all QPs
	srqDepth  = 1024 // the SRQ's WQEs
)

// rqDepth is each QP's own RQ in the baseline, for n QPs.
func rqDepth(n int) int { return max(16, 2*srqWindow/n) }

// srqRig is one configuration: a's QPs, b's QPs, and where b receives.
type srqRig struct {
	a, b       *hostsim.VM
	pdA, pdB   *guestdriver.PD
	cqA, cqB   *guestdriver.CQ
	qa, qb     []*guestdriver.QP
	srq        *guestdriver.SRQ // nil: per-QP RQs
	src, dst   *guestdriver.MR
	bufs       int   // receive buffers b keeps posted
	ringMemory int64 // bytes of b's receive rings
}

func runSRQ(ctx context.Context, o options, r *report) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	counts := []int{1, 64, 1024}
	msgs, rounds := 40000, 3
	if o.quick {
		msgs, rounds = 10000, 2
	}
	if o.tiny {
		counts, msgs, rounds = []int{1, 1024}, 2000, 1
	}
	host, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		return err
	}
	defer host.Close()

	t := r.table(fmt.Sprintf("Receive throughput, %s SENDs, %d in flight: N QPs on one SRQ vs an RQ each (best of %d)", sizeName(srqMsg), srqWindow, rounds),
		"QPs", "SRQ msg/s", "RQ msg/s", "ratio", "SRQ ring KiB", "RQ rings KiB", "memory saved")
	for _, n := range counts {
		var best [2]time.Duration
		var mem [2]int64
		for round := range rounds {
			for i, shared := range []bool{true, false} {
				d, m, err := srqRound(ctx, host, n, shared, msgs, fmt.Sprintf("srq%d-%d-%d", n, round, i))
				if err != nil {
					return fmt.Errorf("%d QPs, shared %v: %w", n, shared, err)
				}
				if round == 0 || d < best[i] {
					best[i] = d
				}
				mem[i] = m
			}
		}
		rate := func(d time.Duration) float64 { return float64(msgs) / d.Seconds() }
		ratio, saved := rate(best[0])/rate(best[1]), float64(mem[1])/float64(mem[0])
		t.row(fmt.Sprint(n), fmt.Sprintf("%.0f", rate(best[0])), fmt.Sprintf("%.0f", rate(best[1])), fmt.Sprintf("%.2f", ratio),
			fmt.Sprint(mem[0]>>10), fmt.Sprint(mem[1]>>10), fmt.Sprintf("%.3gx", saved))
		r.set(fmt.Sprintf("srq_msgs_per_s_%d", n), rate(best[0]))
		r.set(fmt.Sprintf("rq_msgs_per_s_%d", n), rate(best[1]))
		r.set(fmt.Sprintf("srq_rq_ratio_%d", n), ratio)
		r.set(fmt.Sprintf("srq_mem_saved_%d", n), saved)
	}
	r.note("%d messages per run; GOMAXPROCS=%d; receive WQEs of one 16-byte SGE (32-byte slots). "+
		"Reposting to an RQ runs the wake-up protocol after each post (spec §6.6); to an SRQ it needs none (§6.7).", msgs, runtime.GOMAXPROCS(0))
	return nil
}

// srqRound builds a fresh pair of VMs with n QP pairs, sends msgs
// messages and returns the time and b's receive-ring memory.
func srqRound(ctx context.Context, host *hostsim.Host, n int, shared bool, msgs int, name string) (_ time.Duration, _ int64, err error) {
	rg, err := newSRQRig(ctx, host, n, shared, name)
	defer func() {
		for _, vm := range []*hostsim.VM{rg.a, rg.b} {
			if vm != nil {
				err = errors.Join(err, host.RemoveVM(ctx, vm))
			}
		}
	}()
	if err != nil {
		return 0, 0, err
	}
	d, err := rg.run(ctx, msgs)
	return d, rg.ringMemory, err
}

func newSRQRig(ctx context.Context, host *hostsim.Host, n int, shared bool, name string) (*srqRig, error) {
	rg := &srqRig{}
	var err error
	if rg.a, err = host.AddVM(ctx, name+"a", hostsim.VMOptions{MemSize: 256 << 20}); err != nil {
		return rg, err
	}
	if rg.b, err = host.AddVM(ctx, name+"b", hostsim.VMOptions{MemSize: 256 << 20}); err != nil {
		return rg, err
	}
	da, db := rg.a.Driver, rg.b.Driver
	if rg.pdA, err = da.AllocPD(ctx); err != nil {
		return rg, err
	}
	if rg.pdB, err = db.AllocPD(ctx); err != nil {
		return rg, err
	}
	if rg.cqA, err = da.CreateCQ(ctx, 2*srqWindow); err != nil {
		return rg, err
	}
	rg.bufs = srqDepth
	if !shared {
		rg.bufs = n * rqDepth(n)
	}
	if rg.cqB, err = db.CreateCQ(ctx, rg.bufs); err != nil {
		return rg, err
	}
	stride := int64(abi.RecvWQEStride(1))
	if shared {
		if rg.srq, err = rg.pdB.CreateSRQ(ctx, guestdriver.SRQInit{MaxWR: srqDepth, MaxSGE: 1}); err != nil {
			return rg, err
		}
		rg.ringMemory = srqDepth * stride
	} else {
		rg.ringMemory = int64(n*rqDepth(n)) * stride
	}
	for range n {
		qa, err := rg.pdA.CreateQP(ctx, guestdriver.QPInit{SendCQ: rg.cqA, RecvCQ: rg.cqA,
			Cap: guestdriver.QPCap{SQSize: srqWindow, RQSize: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return rg, err
		}
		qb, err := rg.pdB.CreateQP(ctx, guestdriver.QPInit{SendCQ: rg.cqB, RecvCQ: rg.cqB, SRQ: rg.srq,
			Cap: guestdriver.QPCap{SQSize: 1, RQSize: uint32(rqDepth(n)), MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return rg, err
		}
		if err := qa.ConnectTo(ctx, qb.Endpoint()); err != nil {
			return rg, err
		}
		if err := qb.ConnectTo(ctx, qa.Endpoint()); err != nil {
			return rg, err
		}
		rg.qa, rg.qb = append(rg.qa, qa), append(rg.qb, qb)
	}
	src, err := da.Alloc(srqMsg, 4096)
	if err != nil {
		return rg, err
	}
	dst, err := db.Alloc(uint64(rg.bufs)*srqMsg, 2<<20)
	if err != nil {
		return rg, err
	}
	if rg.src, err = rg.pdA.RegMR(ctx, src, abi.AccessLocalWrite); err != nil {
		return rg, err
	}
	rg.dst, err = rg.pdB.RegMR(ctx, dst, abi.AccessLocalWrite)
	return rg, err
}

// recv posts receive buffer i: to the SRQ, or to QP q's RQ.
func (rg *srqRig) recv(i int, q *guestdriver.QP) error {
	wr := guestdriver.RecvWR{WRID: uint64(i), SGL: []abi.SGE{rg.dst.SGE(uint64(i)*srqMsg, srqMsg)}}
	if rg.srq != nil {
		return rg.srq.PostRecv(wr)
	}
	return q.PostRecv(wr)
}

// run sends msgs messages from a round-robin over its QPs and returns the
// time until b has received the last.
func (rg *srqRig) run(ctx context.Context, msgs int) (time.Duration, error) {
	byQPN := map[uint32]*guestdriver.QP{}
	depth := rqDepth(len(rg.qb))
	for i, q := range rg.qb {
		byQPN[q.Num()] = q
		if rg.srq != nil {
			continue
		}
		for j := range depth {
			if err := rg.recv(i*depth+j, q); err != nil {
				return 0, err
			}
		}
	}
	if rg.srq != nil {
		for i := range srqDepth {
			if err := rg.recv(i, nil); err != nil {
				return 0, err
			}
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- rg.receive(ctx, msgs, byQPN) }()
	wr := guestdriver.SendWR{Opcode: abi.WRSend, SGL: []abi.SGE{rg.src.SGE(0, srqMsg)}, Signaled: true}
	wcs := make([]guestdriver.WC, 64)
	t0 := time.Now()
	posted, done := 0, 0
	for done < msgs {
		for posted < msgs && posted-done < srqWindow {
			wr.WRID = uint64(posted)
			if err := rg.qa[posted%len(rg.qa)].PostSend(wr); err != nil {
				if errors.Is(err, guestdriver.ErrQueueFull) {
					break
				}
				return 0, err
			}
			posted++
		}
		k := rg.cqA.Poll(wcs)
		for i := range k {
			if err := wcs[i].Err(); err != nil {
				return 0, fmt.Errorf("send %d: %w", wcs[i].WRID, err)
			}
		}
		done += k
		if k == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			runtime.Gosched()
		}
	}
	if err := <-errc; err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// receive polls b's CQ for msgs receives, reposting each buffer.
func (rg *srqRig) receive(ctx context.Context, msgs int, byQPN map[uint32]*guestdriver.QP) error {
	wcs := make([]guestdriver.WC, 64)
	for got := 0; got < msgs; {
		k := rg.cqB.Poll(wcs)
		for i := range k {
			wc := &wcs[i]
			if err := wc.Err(); err != nil {
				return fmt.Errorf("receive %d: %w", wc.WRID, err)
			}
			if err := rg.recv(int(wc.WRID), byQPN[wc.QPN]); err != nil {
				return err
			}
		}
		got += k
		if k == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			runtime.Gosched()
		}
	}
	return nil
}
