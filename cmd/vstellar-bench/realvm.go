package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/agentsim"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// The realvm suite: per QEMU of the harness (internal/realvm), two real
// VMs booting Debian's kernel with the guest program (cmd/vstellar-guest)
// as /init on one in-process vstellard, driven through their verbs
// agents, beside two simulated guests (agentsim) serving the same agent,
// measured in the same run. The measurements go through the agent's API
// alike for both, so the ratio is the cost of the real VM; under TCG that
// is the emulation's, not the device's.

const realvmMethod = `Per QEMU of the real-VM harness (internal/realvm/prepare.sh: Debian's
QEMU 11.1.3 with shared-memory doorbells under a stand-in virtio id, and
QEMU 10.2.2 patched to name virtio id 42, doorbells in guest RAM): two real
1 GiB VMs booting Debian's 6.12 kernel under TCG with the guest program as
/init on one in-process vstellard, booted one after the other; each opens
its device with the Go verbs library over virtio-pci and serves the verbs
agent on a serial port. Beside them, two simulated guests (agentsim) on
their own in-process vstellard serve the same agent with the same doorbell
mode, and every figure is taken through the agent alike for both: device
ready (from QEMU's start, or the simulated VM's, to the agent's first
answer; and the guest program's own start to its first completed device
command), WRITE bandwidth (guest A keeps 16 signalled WRITEs in flight into
B's MR for a fixed time on the guest's clock, then B's bytes are checked;
real and simulated rounds alternate, best round kept) and 8-byte inline
WRITE ping-pong latency (half the round trip, on the guest's clock). The
guests run under TCG: the real-VM figures measure emulation, not the
device.`

// realvmAccel is how the harness runs its guests (realvm.Config.args).
const realvmAccel = "tcg"

// realvmGoals: at 1 MiB the host's engine moves the bytes for real and
// simulated guests alike, so an emulated guest should cost little there;
// and a device must be ready well within a second of the guest program's
// start, emulated or not.
var realvmGoals = []goal{
	atLeast("stock_write_gbps_1m_ratio", 0.5, "real VM / simulated WRITE at 1 MiB, QEMU 11.1.3"),
	atLeast("patched_write_gbps_1m_ratio", 0.5, "real VM / simulated WRITE at 1 MiB, QEMU 10.2.2"),
	below("stock_guest_ready_ms", 1000, "guest program start to first command under TCG, QEMU 11.1.3"),
	below("patched_guest_ready_ms", 1000, "guest program start to first command under TCG, QEMU 10.2.2"),
}

// realvmSizes are the WRITE sizes the suite measures.
var realvmSizes = []uint64{64 << 10, 1 << 20}

// realvmPlan is how much the suite measures.
type realvmPlan struct {
	qemus  []string // harness QEMU names; empty: all of them
	rounds int      // bandwidth rounds per size, real and simulated alternately
	bwTime time.Duration
	pings  int
	warmup int
}

func planRealVM(o options) realvmPlan {
	switch {
	case o.tiny:
		return realvmPlan{qemus: []string{realvm.StockQEMU}, rounds: 1, bwTime: 200 * time.Millisecond, pings: 100, warmup: 20}
	case o.quick:
		return realvmPlan{rounds: 1, bwTime: 500 * time.Millisecond, pings: 300, warmup: 50}
	}
	return realvmPlan{rounds: 3, bwTime: time.Second, pings: 1000, warmup: 100}
}

// pairFigures are one pair of guests' numbers, real or simulated.
type pairFigures struct {
	doorbells string
	// ready is from the VM's start to its agent's first answer, and
	// guestReady the guest program's own start to its first completed
	// device command; one per guest, A then B.
	ready      [2]time.Duration
	guestReady [2]time.Duration
	gbps       map[uint64]float64 // best round per WRITE size
	lat        agent.PingReply
}

// qemuFigures are one QEMU's real VMs beside the simulated guests.
type qemuFigures struct {
	qemu      realvm.QEMU
	real, sim pairFigures
}

func runRealVM(ctx context.Context, o options, r *report) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root, as the real-VM harness does (uid %d); prepare the harness with: %s", os.Geteuid(), realvm.PrepareCommand)
	}
	env, err := realvm.Load(realvm.HarnessDir())
	if err != nil {
		return fmt.Errorf("%w; prepare it with: %s", err, realvm.PrepareCommand)
	}
	plan := planRealVM(o)
	names := plan.qemus
	if len(names) == 0 {
		names = env.QEMUNames()
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "vstellar-bench-realvm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	initrd, err := env.BuildGuestImage(ctx, dir)
	if err != nil {
		return err
	}
	var figs []qemuFigures
	for _, name := range names {
		q, err := env.QEMU(name)
		if err != nil {
			return err
		}
		f, err := measureQEMU(ctx, env, q, initrd, plan)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		figs = append(figs, f)
	}
	recordRealVM(r, figs, plan)
	return nil
}

// measureQEMU boots two real VMs on q and two simulated guests and
// measures both pairs.
func measureQEMU(ctx context.Context, env *realvm.Env, q realvm.QEMU, initrd string, plan realvmPlan) (f qemuFigures, err error) {
	f.qemu = q
	host, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		return f, err
	}
	defer func() { err = errors.Join(err, host.Close()) }()
	var real [2]*realvm.Guest
	// Stopped before the host closes (deferred later, run earlier).
	defer func() {
		for _, g := range real {
			if g != nil {
				err = errors.Join(err, g.Close(context.WithoutCancel(ctx)))
			}
		}
	}()
	for i, name := range []string{"a", "b"} {
		socket, err := host.CreateDevice(ctx, name, hostsim.VMOptions{})
		if err != nil {
			return f, err
		}
		cfg, err := env.GuestConfig(q.Name, initrd, hotplug.Spec{Socket: socket})
		if err != nil {
			return f, err
		}
		if real[i], err = bootGuest(ctx, cfg, 3*time.Minute); err != nil {
			return f, fmt.Errorf("VM %s: %w", name, err)
		}
		f.real.ready[i] = real[i].Ready
		f.real.guestReady[i] = time.Duration(real[i].Info.ReadyMicros * 1e3)
	}

	t0 := time.Now()
	sim, err := agentsim.Start(ctx, agentsim.Options{GuestRAM: !q.SharedMemory, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return f, fmt.Errorf("simulated guests: %w", err)
	}
	defer func() { err = errors.Join(err, sim.Close()) }()
	// agentsim boots both guests at once: each is given half of it,
	// to its agent's first answer.
	for i, g := range []*agentsim.Guest{sim.A, sim.B} {
		info, err := g.Client.Info(ctx)
		if err != nil {
			return f, err
		}
		f.sim.guestReady[i] = time.Duration(info.ReadyMicros * 1e3)
	}
	simStart := time.Since(t0) / 2
	f.sim.ready = [2]time.Duration{simStart, simStart}

	rp, err := agent.NewPair(ctx, real[0].Agent, real[1].Agent, agent.RunOptions{})
	if err != nil {
		return f, fmt.Errorf("real VMs: %w", err)
	}
	defer func() { err = errors.Join(err, rp.Close(context.WithoutCancel(ctx))) }()
	sp, err := agent.NewPair(ctx, sim.A.Client, sim.B.Client, agent.RunOptions{})
	if err != nil {
		return f, fmt.Errorf("simulated guests: %w", err)
	}
	defer func() { err = errors.Join(err, sp.Close(context.WithoutCancel(ctx))) }()
	// After Setup: a guest-RAM doorbell area exists from the first CQ on.
	if f.real.doorbells, err = pairDoorbells(ctx, rp); err != nil {
		return f, err
	}
	if f.sim.doorbells, err = pairDoorbells(ctx, sp); err != nil {
		return f, err
	}

	f.real.gbps, f.sim.gbps = map[uint64]float64{}, map[uint64]float64{}
	for round := range plan.rounds {
		for _, size := range realvmSizes {
			for _, side := range []struct {
				p   *agent.Pair
				fig *pairFigures
				who string
			}{{rp, &f.real, "real VMs"}, {sp, &f.sim, "simulated guests"}} {
				g, err := agentBandwidth(ctx, side.p, size, plan.bwTime, uint64(round))
				if err != nil {
					return f, fmt.Errorf("%s: WRITE %s: %w", side.who, sizeName(size), err)
				}
				side.fig.gbps[size] = max(side.fig.gbps[size], g)
			}
		}
	}
	if f.real.lat, err = pingPongAgents(ctx, rp, plan); err != nil {
		return f, fmt.Errorf("real VMs: ping-pong: %w", err)
	}
	if f.sim.lat, err = pingPongAgents(ctx, sp, plan); err != nil {
		return f, fmt.Errorf("simulated guests: ping-pong: %w", err)
	}
	return f, nil
}

// bootGuest is realvm.BootGuest with the boot bounded by within: the VM
// lives as long as ctx.
func bootGuest(ctx context.Context, cfg realvm.Config, within time.Duration) (*realvm.Guest, error) {
	vm, err := realvm.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	c, info, err := realvm.DialAgent(bctx, vm)
	if err != nil {
		vm.Kill()
		vm.Wait()
		return nil, err
	}
	return &realvm.Guest{VM: vm, Agent: c, Info: info, Ready: time.Since(vm.Started())}, nil
}

// pairDoorbells is both guests' doorbell mode, which must agree.
func pairDoorbells(ctx context.Context, p *agent.Pair) (string, error) {
	a, err := p.A.Info(ctx)
	if err != nil {
		return "", err
	}
	b, err := p.B.Info(ctx)
	if err != nil {
		return "", err
	}
	if a.DoorbellMode != b.DoorbellMode {
		return "", fmt.Errorf("guests disagree on the doorbells: %q and %q", a.DoorbellMode, b.DoorbellMode)
	}
	return a.DoorbellMode, nil
}

// agentBandwidth runs A's WRITE loop of size-byte WRITEs into B for d
// (guest clock) and checks B's bytes after it.
func agentBandwidth(ctx context.Context, p *agent.Pair, size uint64, d time.Duration, round uint64) (float64, error) {
	seed := 0x5eed0000 + size + round // fresh bytes each run
	if err := p.A.Fill(ctx, 0, size, seed); err != nil {
		return 0, err
	}
	bw, err := p.A.WriteBandwidth(ctx, agent.BandwidthArgs{LocalOff: 0, Size: uint32(size), Window: writeWindow,
		DurationMs: int(d.Milliseconds()), RemoteAddr: p.SB.MR.Addr, RKey: p.SB.MR.RKey})
	if err != nil {
		return 0, err
	}
	got, err := p.B.Digest(ctx, 0, size)
	if err != nil {
		return 0, err
	}
	if want := agent.PatternSHA256(seed, size); got != want {
		return 0, fmt.Errorf("B's %d bytes differ from A's after %d WRITEs", size, bw.Writes)
	}
	if bw.Writes == 0 || !(bw.Gbps > 0) {
		return 0, fmt.Errorf("no WRITE completed in %v", d)
	}
	return bw.Gbps, nil
}

// pingOff is where in each guest's buffer the ping-pong's 8 bytes are:
// past what the bandwidth loop writes.
const pingOff = agent.MinBuf - 64

// pingPongAgents runs the 8-byte WRITE ping-pong, A initiating, B
// echoing.
func pingPongAgents(ctx context.Context, p *agent.Pair, plan realvmPlan) (agent.PingReply, error) {
	base := uint64(time.Now().UnixNano()) // values no earlier run left
	total := plan.pings + plan.warmup
	timeout := int((time.Minute + time.Duration(total)*time.Millisecond).Milliseconds())
	type echoed struct {
		r   agent.EchoReply
		err error
	}
	done := make(chan echoed, 1)
	go func() {
		e, err := p.B.Echo(ctx, agent.EchoArgs{LocalOff: pingOff, RemoteAddr: p.SA.MR.Addr + pingOff, RKey: p.SA.MR.RKey,
			Base: base, Count: total, TimeoutMs: timeout})
		done <- echoed{e, err}
	}()
	lat, err := p.A.PingPong(ctx, agent.PingArgs{LocalOff: pingOff, RemoteAddr: p.SB.MR.Addr + pingOff, RKey: p.SB.MR.RKey,
		Base: base, Count: plan.pings, Warmup: plan.warmup, TimeoutMs: timeout})
	if err != nil {
		// B waits for values that will not come: a Reset (the pair's
		// Close) stops it.
		return lat, err
	}
	e := <-done
	if e.err != nil || e.r.Echoed != total {
		return lat, fmt.Errorf("echo: %d of %d: %v", e.r.Echoed, total, e.err)
	}
	if lat.Samples != plan.pings {
		return lat, fmt.Errorf("%d samples, want %d", lat.Samples, plan.pings)
	}
	return lat, nil
}

// qemuKey names a QEMU in the summary's keys.
func qemuKey(name string) string {
	switch name {
	case realvm.StockQEMU:
		return "stock"
	case realvm.PatchedQEMU:
		return "patched"
	}
	return strings.NewReplacer("-", "_", ".", "_").Replace(name)
}

func meanDuration(d [2]time.Duration) time.Duration { return (d[0] + d[1]) / 2 }

// recordRealVM fills the report from the measurements: per QEMU a table
// of real beside simulated with the ratio, the same in the summary as
// <qemu>_<figure> (real), <qemu>_sim_<figure> and <qemu>_<figure>_ratio.
func recordRealVM(r *report, figs []qemuFigures, plan realvmPlan) {
	r.set("accel_tcg", 1)
	bars := r.barChart("bandwidth", "RDMA WRITE between two guests: real VMs (TCG) vs simulated", "Gb/s")
	for _, f := range figs {
		k := qemuKey(f.qemu.Name)
		t := r.table(fmt.Sprintf("%s, virtio id %d, doorbells %s, accel: %s: two real VMs beside two simulated guests",
			f.qemu.Name, f.qemu.VirtioID, f.real.doorbells, realvmAccel), "figure", "real VM", "simulated", "real/sim")
		row := func(what, key, format string, real, sim float64) {
			t.row(what, fmt.Sprintf(format, real), fmt.Sprintf(format, sim), fmt.Sprintf("%.3g", real/sim))
			r.set(k+"_"+key, real)
			r.set(k+"_sim_"+key, sim)
			r.set(k+"_"+key+"_ratio", real/sim)
		}
		row("device ready: VM start to agent up, ms", "ready_ms", "%.1f", ms(meanDuration(f.real.ready)), ms(meanDuration(f.sim.ready)))
		row("device ready: guest program start to first command, ms", "guest_ready_ms", "%.2f",
			ms(meanDuration(f.real.guestReady)), ms(meanDuration(f.sim.guestReady)))
		for _, size := range realvmSizes {
			row(fmt.Sprintf("WRITE %s, Gb/s", sizeName(size)), "write_gbps_"+sizeKey(size), "%.2f", f.real.gbps[size], f.sim.gbps[size])
			cat := fmt.Sprintf("%s %s", f.qemu.Name, sizeName(size))
			bars.bar("real VMs (TCG)", cat, f.real.gbps[size])
			bars.bar("simulated guests", cat, f.sim.gbps[size])
		}
		row("8-byte WRITE latency p50, us", "lat_8b_p50_us", "%.2f", f.real.lat.P50Us, f.sim.lat.P50Us)
		row("8-byte WRITE latency p99, us", "lat_8b_p99_us", "%.2f", f.real.lat.P99Us, f.sim.lat.P99Us)
		r.note("%s: %s; real VMs ready %.0f and %.0f ms after QEMU started (guest program: %.1f and %.1f ms), simulated doorbells %s",
			f.qemu.Name, f.qemu.Version, ms(f.real.ready[0]), ms(f.real.ready[1]), ms(f.real.guestReady[0]), ms(f.real.guestReady[1]), f.sim.doorbells)
	}
	r.note("accel: %s. The real guests run under QEMU's TCG (this machine's KVM cannot run them): their figures measure the emulation of the guest's CPU, not the device; the simulated guests run natively in this process.", realvmAccel)
	rounds := fmt.Sprintf("best of %d rounds, real and simulated alternately", plan.rounds)
	if plan.rounds == 1 {
		rounds = "one round, real and simulated one after the other"
	}
	r.note("bandwidth: %d signalled WRITEs in flight for %v per round, %s; latency: %d round trips after %d unmeasured, half the round trip; both on the guest's clock.",
		writeWindow, plan.bwTime, rounds, plan.pings, plan.warmup)
	r.note("simulated device ready: both guests boot in one agentsim.Start, each given half of it; their own figure is the simulated VM's connect, DRIVER_OK and probe.")
}
