package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/api"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The regmr suite: REG_MR latency when the device pins on demand (PVDMA:
// registration only records the translation) against pinning at
// registration (pin mode "at-reg-mr", what ibv_reg_mr does on a host
// RNIC), and what on demand costs instead: the first DMA into a 2 MiB
// chunk that is not pinned yet.
//
// Each size registers and deregisters two buffers, A and B, in turn. In
// the baseline the device's pin budget is one MR's worth of chunks, so
// registering A first evicts (unpins) B's chunks and then pins A's: every
// registration pins the whole MR, as ibv_reg_mr does, and also does the
// unpinning ibv_dereg_mr would have done for the previous MR. (Without
// the budget the cache would keep a deregistered MR's chunks pinned and a
// second registration would pin nothing.) The guest has written every
// page of A and B first, as an application fills a buffer before it
// registers it (see guestWrote), so pinning costs the pin, not the page
// allocation.
//
// First touch: 4 KiB WRITEs on a loopback QP into never-touched 2 MiB
// chunks of a registered MR (cold: the engine pins the chunk), each
// followed by one into the same chunk (warm). first_touch_chunk_us is
// median(cold) - median(warm) for chunks whose pages the guest had
// written; chunks the guest never wrote are reported apart (the pin then
// also allocates and zeroes their pages, as the first guest write would).

const regmrMethod = `A 4 GiB guest registers and deregisters MRs of 1 MiB to 1 GiB, the device
pinning on demand (PVDMA: registration records spans and 2 MiB entries,
pins nothing). The baseline, in the same run, is a device in pin mode
at-reg-mr (every chunk pinned at REG_MR, like ibv_reg_mr on a host RNIC)
with a pin budget of one MR and two alternating buffers, so that each of
its registrations unpins the previous MR's chunks and pins its own. First
touch: a 4 KiB WRITE into a 2 MiB chunk not pinned yet (cold) against one
into the same chunk again (warm).`

var regmrGoals = []goal{
	below("regmr_1g_p50_ms", 1, "a 1 GiB MR registers in under 1 ms on demand"),
}

const (
	regmrGuest = 4 << 30 // its 2 GiB of low RAM hold A and B of every size
	touchWrite = 4 << 10
)

// regLat is one size's registration latencies, sorted.
type regLat struct {
	reg, dereg []time.Duration
	first      time.Duration // the first registration of A (baseline)
}

func runRegMR(ctx context.Context, o options, r *report) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	sizes := []uint64{1 << 20, 16 << 20, 256 << 20, 1 << 30}
	guest := uint64(regmrGuest)
	iters := 2000
	// The baseline pins every registration: fewer of the big ones.
	eagerIters := map[uint64]int{1 << 20: 1000, 16 << 20: 300, 256 << 20: 60, 1 << 30: 20}
	touches := 128
	switch {
	case o.tiny:
		sizes = []uint64{1 << 20, 1 << 30} // 1 GiB: the reported numbers
		guest = 2 << 30
		iters, touches = 20, 4
		eagerIters = map[uint64]int{1 << 20: 5, 1 << 30: 2}
	case o.quick:
		iters, touches = 300, 32
		eagerIters = map[uint64]int{1 << 20: 200, 16 << 20: 60, 256 << 20: 15, 1 << 30: 6}
	}
	avail, err := memAvailable()
	if err != nil {
		return err
	}
	// The baseline's biggest size pins (and the guest writes) A and B: 2
	// GiB at most, one VM at a time.
	if need := uint64(2<<30) + startupSlack; avail < need {
		return fmt.Errorf("regmr needs %s of available memory, MemAvailable is %s", gibName(need), gibName(avail))
	}
	host, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		return err
	}
	defer host.Close()

	lazy, touch, err := onDemandRegMR(ctx, host, guest, sizes, iters, touches)
	if err != nil {
		return fmt.Errorf("on demand: %w", err)
	}
	eager := map[uint64]regLat{}
	for _, size := range sizes {
		if eager[size], err = eagerRegMR(ctx, host, guest, size, eagerIters[size]); err != nil {
			return fmt.Errorf("at-reg-mr, %s MRs: %w", sizeName(size), err)
		}
	}

	t := r.table("REG_MR latency, on demand (PVDMA) vs pinning at registration (at-reg-mr), ms",
		"MR", "on-demand p50", "p99", "DEREG p50", "at-reg-mr p50", "p99", "first", "DEREG p50", "ratio p50", "regs")
	fig := r.lines("latency", "REG_MR latency (p50)", "MR size (MiB)", "ms")
	fig.logX, fig.logY = true, true
	for _, size := range sizes {
		l, e := lazy[size], eager[size]
		fig.add("on demand (PVDMA)", float64(size)/(1<<20), ms(percentile(l.reg, 50)))
		fig.add("pin at REG_MR", float64(size)/(1<<20), ms(percentile(e.reg, 50)))
		lp50, lp99 := percentile(l.reg, 50), percentile(l.reg, 99)
		ep50, ep99 := percentile(e.reg, 50), percentile(e.reg, 99)
		t.row(gibName(size), msf3(lp50), msf3(lp99), msf3(percentile(l.dereg, 50)),
			msf3(ep50), msf3(ep99), msf3(e.first), msf3(percentile(e.dereg, 50)),
			fmt.Sprintf("%.1f", ep50.Seconds()/lp50.Seconds()), fmt.Sprintf("%d/%d", len(l.reg), len(e.reg)))
		k := sizeKey(size)
		r.set("regmr_"+k+"_p50_ms", ms(lp50))
		r.set("regmr_"+k+"_p99_ms", ms(lp99))
		r.set("regmr_eager_"+k+"_p50_ms", ms(ep50))
		r.set("regmr_eager_"+k+"_p99_ms", ms(ep99))
		if size == 1<<30 {
			r.set("ratio", ep50.Seconds()/lp50.Seconds())
		}
	}

	ft := r.table("First touch: 4 KiB WRITE into a 2 MiB chunk not pinned yet (cold) vs pinned (warm), us",
		"chunk pages", "cold p50", "cold p99", "warm p50", "warm p99", "first touch", "chunks")
	for _, c := range []struct {
		name string
		s    touchSet
	}{{"guest-written", touch.written}, {"never written", touch.fresh}} {
		cp50, wp50 := percentile(c.s.cold, 50), percentile(c.s.warm, 50)
		ft.row(c.name, usf(cp50), usf(percentile(c.s.cold, 99)), usf(wp50), usf(percentile(c.s.warm, 99)),
			usf(cp50-wp50), fmt.Sprint(len(c.s.cold)))
	}
	cp50, wp50 := percentile(touch.written.cold, 50), percentile(touch.written.warm, 50)
	r.set("first_touch_cold_us", us(cp50))
	r.set("first_touch_warm_us", us(wp50))
	r.set("first_touch_chunk_us", us(cp50-wp50))
	r.set("first_touch_unwritten_chunk_us", us(percentile(touch.fresh.cold, 50)-percentile(touch.fresh.warm, 50)))

	r.note("ratio is at-reg-mr p50 / on-demand p50 at 1 GiB; at-reg-mr's device has a pin budget of one MR, so each of its registrations unpins the previous MR's chunks and pins its own (\"first\": the first registration, which only pins)")
	r.note("guest: %s, low RAM holds the MRs; on demand: %d registrations per size; first touch: %d chunks each; GOMAXPROCS=%d",
		gibName(guest), iters, touches, runtime.GOMAXPROCS(0))
	return nil
}

// touchSet is one kind of chunk's first-touch samples, sorted.
type touchSet struct{ cold, warm []time.Duration }

type touchResult struct{ written, fresh touchSet }

// onDemandRegMR runs the on-demand registration loops and the first-touch
// measurement on one VM.
func onDemandRegMR(ctx context.Context, host *hostsim.Host, guest uint64, sizes []uint64, iters, touches int) (res map[uint64]regLat, touch touchResult, err error) {
	v, err := host.AddVM(ctx, "regmr-on-demand", hostsim.VMOptions{MemSize: guest, Pin: &api.PinSpec{Mode: api.PinOnDemand}})
	if err != nil {
		return nil, touch, err
	}
	defer func() { err = errors.Join(err, host.RemoveVM(ctx, v)) }()
	l, err := openLoop(ctx, v)
	if err != nil {
		return nil, touch, err
	}
	// The WRITEs' source, before big takes the rest of low RAM.
	src, err := v.Driver.Alloc(touchWrite, 4096)
	if err != nil {
		return nil, touch, err
	}
	srcMR, err := l.pd.RegMR(ctx, src, abi.AccessLocalWrite|abi.AccessRemoteWrite)
	if err != nil {
		return nil, touch, err
	}
	big, err := largestBuffer(v)
	if err != nil {
		return nil, touch, err
	}
	res = map[uint64]regLat{}
	for _, size := range sizes {
		a, b, err := twoBuffers(big, size)
		if err != nil {
			return nil, touch, err
		}
		if res[size], err = regLoop(ctx, l.pd, a, b, iters); err != nil {
			return nil, touch, fmt.Errorf("%s MRs: %w", sizeName(size), err)
		}
	}

	// First touch, into the first 1 GiB (or what there is) of big: no
	// DMA has touched it, registering pins nothing.
	n := min(big.Len(), 1<<30) &^ (pvdma.ChunkSize - 1)
	if uint64(2*touches) > n/pvdma.ChunkSize {
		return nil, touch, fmt.Errorf("%d chunks to touch in a %s buffer", 2*touches, sizeName(n))
	}
	tb, err := big.Slice(0, n)
	if err != nil {
		return nil, touch, err
	}
	dst, err := l.pd.RegMR(ctx, tb, abi.AccessLocalWrite|abi.AccessRemoteWrite)
	if err != nil {
		return nil, touch, err
	}
	// Warm the source's chunk, the QP and the code paths.
	if _, err := l.write(ctx, srcMR, 0, srcMR, 0, 8); err != nil {
		return nil, touch, err
	}
	// Chunks of big start 2 MiB aligned in guest physical memory (the
	// buffer is), so chunk i of the MR is one pin chunk.
	half := n / pvdma.ChunkSize / 2
	for i := range uint64(touches) {
		for _, c := range []struct {
			set   *touchSet
			chunk uint64
			write bool
		}{{&touch.written, i, true}, {&touch.fresh, half + i, false}} {
			off := c.chunk * pvdma.ChunkSize
			if c.write {
				if err := guestWrote(tb.Bytes()[off : off+pvdma.ChunkSize]); err != nil {
					return nil, touch, err
				}
			}
			cold, err := l.write(ctx, srcMR, 0, dst, off, touchWrite)
			if err != nil {
				return nil, touch, err
			}
			warm, err := l.write(ctx, srcMR, 0, dst, off+pvdma.ChunkSize/2, touchWrite)
			if err != nil {
				return nil, touch, err
			}
			c.set.cold = append(c.set.cold, cold)
			c.set.warm = append(c.set.warm, warm)
		}
	}
	for _, s := range []*touchSet{&touch.written, &touch.fresh} {
		slices.Sort(s.cold)
		slices.Sort(s.warm)
	}
	return res, touch, dst.Dereg(ctx)
}

// eagerRegMR is the baseline for one size: a device that pins at
// registration with a budget of one MR (see the suite's comment).
func eagerRegMR(ctx context.Context, host *hostsim.Host, guest, size uint64, iters int) (res regLat, err error) {
	budget := (size + pvdma.ChunkSize - 1) &^ (pvdma.ChunkSize - 1)
	v, err := host.AddVM(ctx, "regmr-at-reg-mr-"+sizeKey(size), hostsim.VMOptions{MemSize: guest,
		Pin: &api.PinSpec{Mode: api.PinAtRegMR, Budget: budget}})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, host.RemoveVM(ctx, v)) }()
	pd, err := v.Driver.AllocPD(ctx)
	if err != nil {
		return res, err
	}
	big, err := largestBuffer(v)
	if err != nil {
		return res, err
	}
	a, b, err := twoBuffers(big, size)
	if err != nil {
		return res, err
	}
	for _, buf := range []guestdriver.Buffer{a, b} {
		if err := guestWrote(buf.Bytes()); err != nil {
			return res, err
		}
	}
	access := abi.AccessLocalWrite | abi.AccessRemoteWrite
	t0 := time.Now()
	mr, err := pd.RegMR(ctx, a, access)
	if err != nil {
		return res, err
	}
	first := time.Since(t0)
	if err := mr.Dereg(ctx); err != nil {
		return res, err
	}
	res, err = regLoop(ctx, pd, b, a, iters) // B first: it must evict A
	res.first = first
	return res, err
}

// regLoop registers and deregisters a and b in turn, iters times in all,
// and returns the latencies, sorted.
func regLoop(ctx context.Context, pd *guestdriver.PD, a, b guestdriver.Buffer, iters int) (regLat, error) {
	res := regLat{reg: make([]time.Duration, 0, iters), dereg: make([]time.Duration, 0, iters)}
	access := abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead
	for i := range iters {
		buf := a
		if i%2 == 1 {
			buf = b
		}
		t0 := time.Now()
		mr, err := pd.RegMR(ctx, buf, access)
		if err != nil {
			return res, fmt.Errorf("registration %d: %w", i, err)
		}
		t1 := time.Now()
		if err := mr.Dereg(ctx); err != nil {
			return res, fmt.Errorf("deregistration %d: %w", i, err)
		}
		res.reg = append(res.reg, t1.Sub(t0))
		res.dereg = append(res.dereg, time.Since(t1))
	}
	slices.Sort(res.reg)
	slices.Sort(res.dereg)
	return res, nil
}

// largestBuffer takes the rest of v's low RAM from the VMM's allocator
// (below the driver's, which hands out powers of two only), 2 MiB
// aligned, so that one buffer can hold two 1 GiB MRs but for a chunk.
func largestBuffer(v *hostsim.VM) (guestdriver.Buffer, error) {
	for n := uint64(2 << 30); n >= 64<<20; n -= pvdma.ChunkSize {
		gpa, err := v.VM.Alloc(n, pvdma.ChunkSize)
		if err != nil {
			continue
		}
		view, err := v.VM.Memory().Translate(gpa, n)
		if err != nil {
			return guestdriver.Buffer{}, err
		}
		return guestdriver.Buffer{GPA: gpa, View: view}, nil
	}
	return guestdriver.Buffer{}, errors.New("less than 64 MiB of guest low RAM left")
}

// twoBuffers returns size bytes at the start and at the end of big: two
// MRs apart, but for the chunk they share when big holds less than two.
func twoBuffers(big guestdriver.Buffer, size uint64) (a, b guestdriver.Buffer, err error) {
	if size > big.Len() {
		return a, b, fmt.Errorf("%s MRs in a %s buffer", sizeName(size), sizeName(big.Len()))
	}
	if a, err = big.Slice(0, size); err != nil {
		return a, b, err
	}
	// The end, rounded down to a chunk so that b is chunk aligned too.
	off := (big.Len() - size) &^ (pvdma.ChunkSize - 1)
	b, err = big.Slice(off, size)
	return a, b, err
}

// guestWrote makes b's pages as a guest's writes leave them: allocated
// and mapped writable in the VMM's mapping (KVM's EPT). It populates them
// in the kernel (MADV_POPULATE_WRITE) rather than by touching every page
// from Go, which costs 15 us a page fault on the nested-virtualised
// machines this runs on; the daemon's own mapping of the memfd stays
// unpopulated either way, as it is on a real host. b is page aligned.
func guestWrote(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err != nil {
		return fmt.Errorf("populating %s of guest memory: %w", sizeName(uint64(len(b))), err)
	}
	return nil
}

func msf3(d time.Duration) string { return fmt.Sprintf("%.3f", ms(d)) }

func usf(d time.Duration) string { return fmt.Sprintf("%.1f", us(d)) }
