package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/api"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The startup suite: how long a VM takes from the VMM's connect to a
// device an application can use, when the device pins all guest memory at
// SET_MEM_TABLE (pin mode "all", what VFIO/SR-IOV passthrough imposes)
// and when it pins on demand (PVDMA), for several guest memory sizes.
//
// "Ready" is: vmsim.New (guest RAM, vhost-user connect), DRIVER_OK (the
// memory table: pin-all pins here), the guest driver's probe, a PD, a CQ,
// an RC QP connected to itself, a 1 GiB MR registered, and one 4 KiB RDMA
// WRITE through it completed. The device itself is created through the
// management API first and not timed (it is reported apart).
//
// The two modes alternate, repetition by repetition, in one run, so that
// machine noise hits both; each cell is the median. Every VM is closed and
// its device destroyed before the next boots, so memory pinned by one run
// is back before the next starts.

const startupMethod = `Time from the VMM's connect (vmsim.New; the device is created through the
management API beforehand, untimed) to a ready device: DRIVER_OK, the
guest driver's probe, a PD, a CQ, an RC QP, a 1 GiB MR (512 MiB in a 1 GiB
guest) and one 4 KiB RDMA WRITE completed. Each guest size boots with the
device pinning all guest memory at SET_MEM_TABLE (pin mode all: what VFIO
passthrough does) and pinning on demand (PVDMA), alternating, in one run;
medians of 5 runs (3 above 4 GiB). Between runs the machine is left to
settle: after a pinned guest is freed the kernel keeps a core busy.`

var startupGoals = []goal{
	atLeast("ratio", 100, "pin-all / PVDMA at the largest guest, mem_gib; the issue sets it at 16 GiB"),
	atMost("pvdma_flatness", 1.5, "PVDMA flat from the smallest guest to the largest"),
}

const (
	startupMR    = 1 << 30 // the MR "ready" registers
	startupWrite = 4 << 10
	// startupSlack is memory a size needs beyond its guest RAM to be run
	// (the daemon, the Go heap, the page tables of a locked guest).
	startupSlack = 1 << 30
)

// startupResult is one boot to ready.
type startupResult struct {
	create time.Duration // device create through the API (untimed part)
	boot   hostsim.BootTimes
	setup  time.Duration // PD, CQ, QP + connect
	regMR  time.Duration
	write  time.Duration
	ready  time.Duration // boot + setup + regMR + write
}

func runStartup(ctx context.Context, o options, r *report) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	sizes := []uint64{1 << 30, 4 << 30, 16 << 30}
	if o.quick {
		sizes = []uint64{4 << 30}
	}
	if o.mem != "" {
		var err error
		if sizes, err = parseSizes(o.mem); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	// Repetitions per mode and size: pin-all of 16 GiB takes seconds and
	// locks the memory, so it runs fewer times.
	reps := func(size uint64) int {
		if size > 4<<30 {
			return 3
		}
		return 5
	}
	if o.tiny {
		sizes = []uint64{64 << 20, 128 << 20}
		reps = func(uint64) int { return 1 }
	}
	host, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		return err
	}
	defer host.Close()

	modes := []string{api.PinAll, api.PinOnDemand}
	// The tables' rows, added once every size ran (a table is filled
	// before the next is made).
	var rows, steps [][]string
	var ran []uint64
	unsettled := 0
	med := map[string]map[uint64]time.Duration{}
	for _, size := range sizes {
		avail, err := memAvailable()
		if err != nil {
			return err
		}
		if size+startupSlack > avail {
			r.note("skipped %s guests: pin-all needs %s plus %s slack, MemAvailable is %s",
				gibName(size), gibName(size), gibName(startupSlack), gibName(avail))
			continue
		}
		mr := startupMRSize(size)
		if mr != startupMR {
			r.note("the %s guest registers a %s MR: 1 GiB does not fit in its low RAM", gibName(size), sizeName(mr))
		}
		n := reps(size)
		res := map[string][]startupResult{}
		for rep := range n {
			for _, mode := range modes {
				name := fmt.Sprintf("startup-%s-%s-%d", mode, sizeKey(size), rep)
				sr, err := bootToReady(ctx, host, name, size, mr, mode)
				if err != nil {
					return fmt.Errorf("%s guest, pin %s: %w", gibName(size), mode, err)
				}
				res[mode] = append(res[mode], sr)
				if o.tiny {
					continue // tests: the numbers do not matter, other tests keep the machine busy
				}
				quiet, err := settle(ctx)
				if err != nil {
					return err
				}
				if !quiet {
					unsettled++
				}
			}
		}
		for _, mode := range modes {
			m := medianResult(res[mode])
			if med[mode] == nil {
				med[mode] = map[uint64]time.Duration{}
			}
			med[mode][size] = m.ready
			steps = append(steps, []string{gibName(size), mode, msf(m.create), msf(m.boot.Connect), msf(m.boot.DriverOK), msf(m.boot.Probe),
				msf(m.setup), msf(m.regMR), msf(m.write), msf(m.ready)})
		}
		all, pv := med[api.PinAll][size], med[api.PinOnDemand][size]
		rows = append(rows, []string{gibName(size), sizeName(mr), msf(all), msf(pv), fmt.Sprintf("%.1f", all.Seconds()/pv.Seconds()), fmt.Sprint(n)})
		r.set("pin_all_ms_"+sizeKey(size), ms(all))
		r.set("pvdma_ms_"+sizeKey(size), ms(pv))
		ran = append(ran, size)
	}
	if len(ran) == 0 {
		return errors.New("no guest size fits in this machine's available memory")
	}
	t := r.table("Start-up: VMM connect -> device ready (CQ, RC QP, MR, one 4 KiB WRITE), median",
		"guest", "MR", "pin_all ms", "pvdma ms", "ratio", "runs")
	for _, row := range rows {
		t.row(row...)
	}
	bt := r.table("Where pin_all and pvdma start-up goes, median ms (device create is untimed)",
		"guest", "mode", "create", "connect", "DRIVER_OK", "probe", "CQ+QP", "REG_MR", "WRITE", "ready")
	for _, row := range steps {
		bt.row(row...)
	}
	fig := r.lines("ready", "VMM connect to a ready device (median)", "guest memory (GiB)", "ms")
	fig.logX, fig.logY = true, true
	for _, size := range ran {
		gib := float64(size) / (1 << 30)
		fig.add("pin all (VFIO baseline)", gib, ms(med[api.PinAll][size]))
		fig.add("on demand (PVDMA)", gib, ms(med[api.PinOnDemand][size]))
	}
	lo, hi := ran[0], ran[len(ran)-1]
	all, pv := med[api.PinAll][hi], med[api.PinOnDemand][hi]
	r.set("pin_all_ms", ms(all))
	r.set("pvdma_ms", ms(pv))
	r.set("ratio", all.Seconds()/pv.Seconds())
	r.set("mem_gib", float64(hi)/(1<<30))
	r.set("pvdma_flatness", med[api.PinOnDemand][hi].Seconds()/med[api.PinOnDemand][lo].Seconds())
	r.note("pin_all_ms, pvdma_ms and ratio (pin_all/pvdma) are at the largest guest (mem_gib); pvdma_flatness is pvdma at the largest over pvdma at the smallest (%s)", gibName(lo))
	r.note("medians of %s runs per mode and size, modes alternating; GOMAXPROCS=%d", runsNote(ran, reps), runtime.GOMAXPROCS(0))
	if !o.tiny {
		r.note("between runs the machine is left to settle (below %.0f%% CPU for %v): after a pinned guest is freed the kernel keeps a core busy for seconds", 100*settleBusy, settleWindow)
	}
	if unsettled > 0 {
		r.note("%d runs were followed by a machine still busy after %v of settling", unsettled, settleMax)
	}
	return nil
}

// Settling: the system must stay this idle for one window.
const (
	settleWindow = 200 * time.Millisecond
	settleBusy   = 0.15 // of all CPUs
	settleMax    = 10 * time.Second
)

// settle waits until the machine is idle: freeing a pinned guest keeps a
// kernel thread busy for seconds after munmap returns (page freeing and,
// in a VM with free page reporting, handing the pages back to the
// hypervisor), which would otherwise slow whatever runs next on a small
// machine. It reports whether the machine went idle within settleMax.
func settle(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(settleMax)
	b0, t0, err := cpuTicks()
	if err != nil {
		return false, err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(settleWindow):
		}
		b1, t1, err := cpuTicks()
		if err != nil {
			return false, err
		}
		if t1 > t0 && float64(b1-b0) < settleBusy*float64(t1-t0) {
			return true, nil
		}
		b0, t0 = b1, t1
	}
	return false, nil
}

// cpuTicks is the machine's busy and total CPU time so far, in clock
// ticks, from /proc/stat.
func cpuTicks() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("reading CPU time: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest time is
	// already in user and nice.
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// startupMRSize is the MR a guest of size bytes registers: 1 GiB, or the
// largest power of two that fits beside the driver's rings in its low
// RAM (guest memory below the 2 GiB PCI hole, where the allocator works).
func startupMRSize(size uint64) uint64 {
	return min(startupMR, min(size, 2<<30)/2)
}

// bootToReady creates a device in mode, boots a VM of size bytes on it,
// brings it to ready, and removes both again.
func bootToReady(ctx context.Context, host *hostsim.Host, name string, size, mr uint64, mode string) (res startupResult, err error) {
	o := hostsim.VMOptions{MemSize: size, Pin: &api.PinSpec{Mode: mode}}
	t0 := time.Now()
	socket, err := host.CreateDevice(ctx, name, o)
	if err != nil {
		return res, err
	}
	res.create = time.Since(t0)
	t0 = time.Now()
	v, err := host.Boot(ctx, name, socket, o)
	if err != nil {
		return res, errors.Join(err, host.Client().DestroyDevice(context.WithoutCancel(ctx), name))
	}
	defer func() { err = errors.Join(err, host.RemoveVM(ctx, v)) }()
	res.boot = v.Boot
	t1 := time.Now()
	l, err := openLoop(ctx, v)
	if err != nil {
		return res, err
	}
	t2 := time.Now()
	buf, err := v.Driver.Alloc(mr, 2<<20)
	if err != nil {
		return res, err
	}
	m, err := l.pd.RegMR(ctx, buf, abi.AccessLocalWrite|abi.AccessRemoteWrite)
	if err != nil {
		return res, err
	}
	t3 := time.Now()
	// From the MR's start into its middle: the WRITE reads one 2 MiB
	// chunk and writes another, so on demand it pins two.
	if _, err := l.write(ctx, m, 0, m, mr/2, startupWrite); err != nil {
		return res, err
	}
	t4 := time.Now()
	res.setup, res.regMR, res.write = t2.Sub(t1), t3.Sub(t2), t4.Sub(t3)
	res.ready = t4.Sub(t0)
	return res, nil
}

// loop is a device opened to the point an application can do RDMA: a PD,
// a CQ, and an RC QP connected to itself (loopback on the same device).
type loop struct {
	pd  *guestdriver.PD
	cq  *guestdriver.CQ
	qp  *guestdriver.QP
	wcs []guestdriver.WC
}

func openLoop(ctx context.Context, v *hostsim.VM) (*loop, error) {
	d := v.Driver
	l := &loop{wcs: make([]guestdriver.WC, 4)}
	var err error
	if l.pd, err = d.AllocPD(ctx); err != nil {
		return nil, err
	}
	if l.cq, err = d.CreateCQ(ctx, 64); err != nil {
		return nil, err
	}
	l.qp, err = l.pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: l.cq, RecvCQ: l.cq,
		Cap: guestdriver.QPCap{SQSize: 16, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if err := l.qp.ConnectTo(ctx, l.qp.Endpoint()); err != nil {
		return nil, err
	}
	return l, nil
}

// write RDMA-WRITEs n bytes from src at srcOff into dst at dstOff, signalled,
// and polls the CQ until it completes; it returns the time from post to
// completion.
func (l *loop) write(ctx context.Context, src *guestdriver.MR, srcOff uint64, dst *guestdriver.MR, dstOff uint64, n uint32) (time.Duration, error) {
	wr := guestdriver.SendWR{
		Opcode:     abi.WRRDMAWrite,
		SGL:        []abi.SGE{src.SGE(srcOff, n)},
		RemoteAddr: dst.IOVA() + dstOff,
		RKey:       dst.RKey(),
		Signaled:   true,
	}
	t0 := time.Now()
	if err := l.qp.PostSend(wr); err != nil {
		return 0, err
	}
	for spins := 0; ; spins++ {
		if k := l.cq.Poll(l.wcs); k > 0 {
			d := time.Since(t0)
			if err := l.wcs[0].Err(); err != nil {
				return 0, fmt.Errorf("WRITE completion: %w", err)
			}
			return d, nil
		}
		if spins&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if time.Since(t0) > 10*time.Second {
				return 0, fmt.Errorf("WRITE of %d bytes did not complete in 10s", n)
			}
		}
		runtime.Gosched() // two cores: leave the engine room to run
	}
}

// medianResult is the run with the median ready time (so that its step
// times add up), with the median device create.
func medianResult(rs []startupResult) startupResult {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b startupResult) int { return int(a.ready - b.ready) })
	m := s[(len(s)-1)/2]
	c := make([]time.Duration, len(rs))
	for i, x := range rs {
		c[i] = x.create
	}
	slices.Sort(c)
	m.create = percentile(c, 50)
	return m
}

func runsNote(sizes []uint64, reps func(uint64) int) string {
	var parts []string
	for _, s := range sizes {
		parts = append(parts, fmt.Sprintf("%d (%s)", reps(s), gibName(s)))
	}
	return strings.Join(parts, ", ")
}

// parseSizes parses a --mem list such as "1G,4G,16G" (suffixes M and G,
// binary; sizes are multiples of 2 MiB).
func parseSizes(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := uint64(1)
		switch {
		case strings.HasSuffix(f, "G"), strings.HasSuffix(f, "g"):
			mult = 1 << 30
		case strings.HasSuffix(f, "M"), strings.HasSuffix(f, "m"):
			mult = 1 << 20
		default:
			return nil, fmt.Errorf("--mem %q: size %q needs a unit, M or G", s, f)
		}
		n, err := strconv.ParseUint(f[:len(f)-1], 10, 32)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("--mem %q: bad size %q", s, f)
		}
		if v := n * mult; v%(2<<20) != 0 || v < 16<<20 {
			return nil, fmt.Errorf("--mem %q: %s is not a multiple of 2 MiB of at least 16 MiB", s, f)
		}
		out = append(out, n*mult)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// memAvailable is /proc/meminfo's MemAvailable in bytes.
func memAvailable() (uint64, error) { return procKB("/proc/meminfo", "MemAvailable:") }

// gibName names a memory size for tables: "16 GiB", "512 MiB", "1.5 GiB".
func gibName(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return sizeName(n)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// msf formats d in milliseconds with 3 significant-ish digits.
func msf(d time.Duration) string {
	v := ms(d)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
