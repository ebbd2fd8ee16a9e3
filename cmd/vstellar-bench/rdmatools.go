package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// The rdmatools suite: what a user would run otherwise. Per QEMU of the
// real-VM harness, two exec-mode VMs (internal/realvm: the kernel driver,
// the rdma-core provider, Debian's rdma-core and perftest) on one
// in-process vstellard, each with a vStellar device and soft-RoCE (rxe)
// on its virtio-net link; the same unmodified perftest binaries over
// vstellar0 and over rxe0, alternately.

const rdmatoolsMethod = `Per QEMU of the real-VM harness (--quick: QEMU 11.1.3 only): two real
1 GiB VMs booting Debian's 6.12 kernel under TCG (1 vCPU each) on one in-process vstellard, each
with a vStellar device driven by the kernel driver (guest-driver/linux) and the rdma-core provider
(guest-driver/rdma-core), and joined by a virtio-net link on which each guest adds the kernel's
soft-RoCE (rdma_rxe: rdma link add rxe0 type rxe netdev eth0), what a user would run otherwise.
Debian sid's unmodified perftest runs between them over vstellar0 (GID index 0) and over rxe0 (its
IPv4 RoCE v2 GID), the server in VM a and the client in VM b: ib_write_bw at 64 KiB and 1 MiB
for a fixed time (-D, measured between margins of a second; the client's average) and ib_write_lat at
8 bytes (a fixed number of round trips; the client's typical and 99th-percentile latency, which
perftest reports as half the round trip). vStellar and rxe alternate test by test, the best of
the rounds is kept, and every ratio is vStellar / rxe (above 1 favours vStellar for bandwidth,
below 1 for latency). The guests run under TCG, so rxe's data path (the guest kernel's network
stack and ICRC) is emulated while vStellar's runs natively in the host's daemon: the ratios say
more about that than they would between KVM guests.`

// rdmatoolsAccel is how the harness runs its guests.
const rdmatoolsAccel = "tcg"

// rdmatoolsGoals: vStellar's point is to beat what a user would run
// otherwise on the same two VMs.
var rdmatoolsGoals = []goal{
	atLeast("stock_write_gbps_1m_ratio", 1, "vStellar / rxe ib_write_bw at 1 MiB, QEMU 11.1.3"),
	atLeast("patched_write_gbps_1m_ratio", 1, "vStellar / rxe ib_write_bw at 1 MiB, QEMU 10.2.2"),
	atMost("stock_lat_8b_us_ratio", 1, "vStellar / rxe typical ib_write_lat at 8 B, QEMU 11.1.3"),
	atMost("patched_lat_8b_us_ratio", 1, "vStellar / rxe typical ib_write_lat at 8 B, QEMU 10.2.2"),
}

// rdmatoolsSizes are ib_write_bw's message sizes; rdmatoolsLatSize is
// ib_write_lat's.
var rdmatoolsSizes = []uint64{64 << 10, 1 << 20}

const rdmatoolsLatSize = 8

// rdmatoolsPlan is how much the suite measures.
type rdmatoolsPlan struct {
	qemus     []string // harness QEMU names; empty: all of them
	rounds    int
	bwSeconds int // ib_write_bw's measured time: -D is a second more either side (-f 1)
	latIters  int // ib_write_lat -n
}

func planRDMATools(o options) rdmatoolsPlan {
	switch {
	case o.tiny:
		return rdmatoolsPlan{qemus: []string{realvm.StockQEMU}, rounds: 1, bwSeconds: 1, latIters: 100}
	case o.quick:
		return rdmatoolsPlan{qemus: []string{realvm.StockQEMU}, rounds: 1, bwSeconds: 2, latIters: 300}
	}
	return rdmatoolsPlan{rounds: 3, bwSeconds: 4, latIters: 1000}
}

// toolsDevice is one RDMA device's figures in a pair of VMs.
type toolsDevice struct {
	ibdev string
	gid   [2]int             // perftest's -x in VM a and VM b
	gbps  map[uint64]float64 // best ib_write_bw average per size
	// latUs and latP99Us are from the ib_write_lat run with the lowest
	// typical latency.
	latUs, latP99Us float64
	// err says why the device cannot run at all; failed holds the tests
	// that failed (not run again), by name.
	err    error
	failed map[string]error
}

// problem says what of the device was not measured (nil: all of it).
func (d *toolsDevice) problem() error {
	if d.err != nil {
		return d.err
	}
	var errs []error
	for _, name := range toolsTests() {
		if err := d.failed[name]; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && (len(d.gbps) != len(rdmatoolsSizes) || !(d.latUs > 0)) {
		errs = append(errs, errors.New("no figures")) // a plan of no rounds
	}
	return errors.Join(errs...)
}

// toolsTests names the suite's tests, in order.
func toolsTests() []string {
	var names []string
	for _, size := range rdmatoolsSizes {
		names = append(names, bwTest(size))
	}
	return append(names, latTest)
}

func bwTest(size uint64) string { return "ib_write_bw " + sizeName(size) }

var latTest = fmt.Sprintf("ib_write_lat %d B", rdmatoolsLatSize)

// toolsQEMU is one QEMU's pair of VMs: vStellar beside rxe.
type toolsQEMU struct {
	qemu     realvm.QEMU
	vst, rxe toolsDevice
}

// toolsVersions are the guest's software, for the notes.
type toolsVersions struct {
	kernel, rdmaCore, perftest string
}

// partialError is a suite's failure after it recorded part of its
// figures: the command prints what it has before the error.
type partialError struct{ err error }

func (e *partialError) Error() string { return e.err.Error() }
func (e *partialError) Unwrap() error { return e.err }

func runRDMATools(ctx context.Context, o options, r *report) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root, as the real-VM harness does (uid %d); prepare the harness with: %s", os.Geteuid(), realvm.PrepareCommand)
	}
	env, err := realvm.Load(realvm.HarnessDir())
	if err != nil {
		return fmt.Errorf("%w; prepare it with: %s", err, realvm.PrepareCommand)
	}
	repo, err := realvm.RepoRoot()
	if err != nil {
		return fmt.Errorf("%w (run it inside the repository: it builds the guest driver)", err)
	}
	plan := planRDMATools(o)
	names := plan.qemus
	if len(names) == 0 {
		names = env.QEMUNames()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "vstellar-bench-rdmatools-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Without the driver the rxe half still runs, in VMs without it.
	var vstErr error
	b, err := env.BuildRDMA(ctx, repo)
	if err != nil {
		vstErr = fmt.Errorf("building vstellar.ko and libvstellar: %s", clip(err.Error(), 1500))
		if b, err = stubRDMABuild(dir, env.RDMA.ProviderABI); err != nil {
			return err
		}
	}
	initrd, err := env.BuildExecImage(ctx, dir, b)
	if err != nil {
		return err
	}
	var figs []toolsQEMU
	for _, name := range names {
		q, err := env.QEMU(name)
		if err != nil {
			return err
		}
		f, err := measureTools(ctx, env, q, initrd, dir, plan, vstErr)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		figs = append(figs, f)
	}
	recordRDMATools(r, figs, plan, toolsVersions{
		kernel:   fmt.Sprintf("%s (%s)", env.Kernel.Version, env.Kernel.Package),
		rdmaCore: env.RDMA.RDMACore,
		perftest: env.RDMA.Perftest,
	})
	var errs []error
	for _, f := range figs {
		if err := f.vst.problem(); err != nil {
			errs = append(errs, fmt.Errorf("%s: vStellar half not measured: %w", f.qemu.Name, err))
		}
	}
	if len(errs) > 0 {
		return &partialError{errors.Join(errs...)}
	}
	return nil
}

// stubRDMABuild stands in for a driver that does not build: a module
// the guest fails to load and no provider, so that rxe still runs.
func stubRDMABuild(dir, abi string) (realvm.RDMABuild, error) {
	b := realvm.RDMABuild{
		Module:     filepath.Join(dir, "stub", "vstellar.ko"),
		Provider:   filepath.Join(dir, "stub", "libvstellar-rdmav"+abi+".so"),
		DriverFile: filepath.Join(dir, "stub", "vstellar.driver"),
	}
	if err := os.MkdirAll(filepath.Dir(b.Module), 0o755); err != nil {
		return b, err
	}
	for _, p := range []string{b.Module, b.Provider, b.DriverFile} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return b, err
		}
	}
	return b, nil
}

// measureTools boots the pair of VMs on q, adds rxe in both and runs the
// tools over both devices. An error is the rxe half's or the VMs'; the
// vStellar half's goes to f.vst.err (vstErr: known before the VMs boot).
func measureTools(ctx context.Context, env *realvm.Env, q realvm.QEMU, initrd, dir string, plan rdmatoolsPlan, vstErr error) (f toolsQEMU, err error) {
	f.qemu = q
	f.vst = toolsDevice{ibdev: "vstellar0", gbps: map[uint64]float64{}, failed: map[string]error{}, err: vstErr}
	f.rxe = toolsDevice{ibdev: "rxe0", gbps: map[uint64]float64{}, failed: map[string]error{}}
	host, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		return f, err
	}
	defer func() { err = errors.Join(err, host.Close()) }()
	var devs [2]hotplug.Spec
	for i, name := range []string{"a", "b"} {
		socket, err := host.CreateDevice(ctx, name, hostsim.VMOptions{})
		if err != nil {
			return f, err
		}
		devs[i] = hotplug.Spec{Socket: socket}
	}
	vmDir, err := os.MkdirTemp(dir, q.Name+"-")
	if err != nil {
		return f, err
	}
	gs, err := env.BootExecPair(ctx, q.Name, initrd, vmDir, devs, nil)
	if err != nil {
		return f, err
	}
	// Stopped before the host closes (deferred later, run earlier).
	defer func() {
		for _, g := range gs {
			err = errors.Join(err, g.Close(context.WithoutCancel(ctx)))
		}
	}()
	for i, g := range gs {
		if f.rxe.gid[i], err = addRxe(ctx, g); err != nil {
			return f, fmt.Errorf("rxe in VM %s: %w", g.Addr, err)
		}
	}
	if f.vst.err == nil {
		f.vst.err = vstellarMissing(ctx, gs)
	}
	// A test that fails for vStellar is not run again; for rxe it ends
	// the suite.
	failed := func(d *toolsDevice, test string, err error) error {
		err = fmt.Errorf("%s: %w", test, err)
		d.failed[test] = err
		if d == &f.rxe {
			return err
		}
		return nil
	}
	both := []*toolsDevice{&f.vst, &f.rxe}
	for range plan.rounds {
		for _, size := range rdmatoolsSizes {
			test := bwTest(size)
			for _, d := range both {
				if d.err != nil || d.failed[test] != nil {
					continue
				}
				g, err := toolBandwidth(ctx, gs, d, size, plan.bwSeconds)
				if err != nil {
					if err := failed(d, test, err); err != nil {
						return f, err
					}
					continue
				}
				d.gbps[size] = max(d.gbps[size], g)
			}
		}
		for _, d := range both {
			if d.err != nil || d.failed[latTest] != nil {
				continue
			}
			typ, p99, err := toolLatency(ctx, gs, d, plan.latIters)
			if err != nil {
				if err := failed(d, latTest, err); err != nil {
					return f, err
				}
				continue
			}
			if d.latUs == 0 || typ < d.latUs {
				d.latUs, d.latP99Us = typ, p99
			}
		}
	}
	return f, nil
}

// guestSh runs a shell command line in g; a failure is an error with the
// command's output.
func guestSh(ctx context.Context, g *realvm.ExecGuest, cmdline string) (string, error) {
	rep, err := g.Run(ctx, time.Minute, "sh", "-c", cmdline)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmdline, err)
	}
	if err := rep.Err(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", cmdline, err, strings.TrimSpace(rep.Output()))
	}
	return rep.Stdout, nil
}

// addRxe adds rxe0 on the interface holding g's address and returns the
// index of its IPv4 RoCE v2 GID, which appears once rxe has seen the
// address.
func addRxe(ctx context.Context, g *realvm.ExecGuest) (int, error) {
	out, err := guestSh(ctx, g, "ip -o -4 addr show")
	if err != nil {
		return 0, err
	}
	netdev, ok := netdevOf(out, g.Addr)
	if !ok {
		return 0, fmt.Errorf("no interface has %s:\n%s", g.Addr, out)
	}
	if _, err := guestSh(ctx, g, "rdma link add rxe0 type rxe netdev "+netdev); err != nil {
		return 0, err
	}
	const list = `cd /sys/class/infiniband/rxe0/ports/1 && for i in $(ls gids); do echo "$i $(cat gids/$i) $(cat gid_attrs/types/$i 2>/dev/null)"; done`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := guestSh(ctx, g, list)
		if err != nil {
			return 0, err
		}
		if i, ok := roceV2GID(out, g.Addr); ok {
			return i, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("rxe0 has no RoCE v2 GID for %s after 10 s:\n%s", g.Addr, out)
		}
	}
}

// netdevOf is the interface that `ip -o -4 addr show` lists with addr.
func netdevOf(out, addr string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" && strings.HasPrefix(f[i+1], addr+"/") {
				return f[1], true
			}
		}
	}
	return "", false
}

// roceV2GID finds, in lines of "INDEX GID TYPE", the RoCE v2 GID that
// is the IPv4 address addr.
func roceV2GID(out, addr string) (int, bool) {
	want := net.ParseIP(addr)
	if want == nil || want.To4() == nil {
		return 0, false
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[2] != "RoCE" || f[3] != "v2" {
			continue
		}
		i, err := strconv.Atoi(f[0])
		if ip := net.ParseIP(f[1]); err == nil && ip != nil && ip.Equal(want) {
			return i, true
		}
	}
	return 0, false
}

// vstellarMissing says why the vStellar half cannot run: a guest where
// libibverbs does not list vstellar0, with what the guest's init and
// kernel said of the driver.
func vstellarMissing(ctx context.Context, gs [2]*realvm.ExecGuest) error {
	for _, g := range gs {
		rep, err := g.Run(ctx, time.Minute, "sh", "-c", "ibv_devinfo -l")
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(rep.Stdout), "vstellar0") {
			continue
		}
		sys, _ := g.Run(ctx, time.Minute, "sh", "-c", "ls /sys/class/infiniband")
		why := "libibverbs finds no provider for it (guest-driver/rdma-core)"
		if !slices.Contains(strings.Fields(sys.Stdout), "vstellar0") {
			why = "the kernel driver (guest-driver/linux) registered no vstellar0"
		}
		var said []string
		for _, l := range strings.Split(g.VM.Log(), "\n") {
			if strings.Contains(l, "module vstellar") {
				said = append(said, strings.TrimSpace(l))
			}
		}
		kmsg, _ := g.Run(ctx, time.Minute, "sh", "-c", "dmesg | grep -i vstellar | grep -vi 'command line:'")
		k := strings.Split(strings.TrimSpace(kmsg.Stdout), "\n")
		said = append(said, k[max(0, len(k)-5):]...)
		return fmt.Errorf("VM %s: ibv_devinfo -l does not list vstellar0: %s; ibv_devinfo -l said %q; the guest said %q",
			g.Addr, why, strings.TrimSpace(rep.Output()), strings.Join(said, " / "))
	}
	return nil
}

// perftest runs tool with args over d, server in VM a and client in VM
// b, and returns the client's result row.
func perftest(ctx context.Context, gs [2]*realvm.ExecGuest, d *toolsDevice, tool, args string, limit time.Duration) (map[string]float64, error) {
	cmd := func(i int) string { return fmt.Sprintf("%s -d %s -x %d %s", tool, d.ibdev, d.gid[i], args) }
	s, c, err := realvm.ServerClient(ctx, gs[0], gs[1], cmd(0), cmd(1), limit)
	if err != nil {
		return nil, err
	}
	// The client's failure first: a server mostly fails for lack of it.
	var errs []error
	if err := c.Err(); err != nil {
		errs = append(errs, fmt.Errorf("client (VM b) %s: %w\n%s", cmd(1), err, clip(c.Output(), 1500)))
	}
	if err := s.Err(); err != nil {
		errs = append(errs, fmt.Errorf("server (VM a) %s: %w\n%s", cmd(0), err, clip(s.Output(), 1500)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return realvm.PerftestColumns(c.Stdout)
}

// toolBandwidth is ib_write_bw's average at size over d, in Gb/s.
func toolBandwidth(ctx context.Context, gs [2]*realvm.ExecGuest, d *toolsDevice, size uint64, seconds int) (float64, error) {
	// perftest measures -D less the margin (-f) at either end.
	cols, err := perftest(ctx, gs, d, "ib_write_bw", fmt.Sprintf("-s %d -D %d -f 1 -F", size, seconds+2),
		time.Duration(seconds+2)*time.Second+2*time.Minute)
	if err != nil {
		return 0, err
	}
	if err := checkBytes(cols, size); err != nil {
		return 0, err
	}
	return bwGbps(cols)
}

// toolLatency is ib_write_lat's typical and 99th-percentile latency at
// 8 bytes over d, in microseconds.
func toolLatency(ctx context.Context, gs [2]*realvm.ExecGuest, d *toolsDevice, iters int) (typ, p99 float64, err error) {
	cols, err := perftest(ctx, gs, d, "ib_write_lat", fmt.Sprintf("-s %d -n %d -F", rdmatoolsLatSize, iters),
		2*time.Minute+time.Duration(iters)*5*time.Millisecond)
	if err != nil {
		return 0, 0, err
	}
	if err := checkBytes(cols, rdmatoolsLatSize); err != nil {
		return 0, 0, err
	}
	return latencies(cols)
}

// checkBytes checks that the row is for size-byte messages.
func checkBytes(cols map[string]float64, size uint64) error {
	if b, ok := cols["#bytes"]; !ok || b != float64(size) {
		return fmt.Errorf("perftest's row is for %v bytes, want %d", cols["#bytes"], size)
	}
	return nil
}

// bwGbps is the row's average bandwidth in Gb/s (10^9 bits).
func bwGbps(cols map[string]float64) (float64, error) {
	for name, v := range cols {
		unit, ok := strings.CutPrefix(name, "BW average[")
		if !ok {
			continue
		}
		var g float64
		switch unit {
		case "MiB/sec]":
			g = v * (1 << 20) * 8 / 1e9
		case "Gb/sec]":
			g = v
		default:
			return 0, fmt.Errorf("perftest's %q: unknown unit", name)
		}
		if !(g > 0) || math.IsInf(g, 0) {
			return 0, fmt.Errorf("perftest's %s is %v", name, v)
		}
		return g, nil
	}
	return 0, fmt.Errorf("no BW average in perftest's columns %v", cols)
}

// latencies are the row's typical and 99th-percentile latency in us.
func latencies(cols map[string]float64) (typ, p99 float64, err error) {
	typ, ok1 := cols["t_typical[usec]"]
	p99, ok2 := cols["99% percentile[usec]"]
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("no t_typical or 99%% percentile in perftest's columns %v", cols)
	}
	if !(typ > 0) || math.IsInf(p99, 0) || !(p99 >= typ) {
		return 0, 0, fmt.Errorf("perftest's latency: typical %v us, 99%% %v us", typ, p99)
	}
	return typ, p99, nil
}

// clip shortens s to about n bytes, keeping its end (where tools say
// what went wrong).
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// recordRDMATools fills the report: per QEMU a table of vStellar beside
// rxe with the ratio, the same in the summary as <qemu>_vstellar_<figure>,
// <qemu>_rxe_<figure> and <qemu>_<figure>_ratio. A vStellar figure not
// measured has "-" in the table and no keys, and a note says why.
func recordRDMATools(r *report, figs []toolsQEMU, plan rdmatoolsPlan, v toolsVersions) {
	r.set("accel_tcg", 1)
	for _, f := range figs {
		k := qemuKey(f.qemu.Name)
		t := r.table(fmt.Sprintf("%s, virtio id %d, accel: %s: perftest between two VMs, vStellar (vstellar0) vs soft-RoCE (rxe0 on virtio-net)",
			f.qemu.Name, f.qemu.VirtioID, rdmatoolsAccel), "figure", "vStellar", "rxe", "vStellar/rxe")
		row := func(what, key string, vs, rx float64) {
			cells := []string{what, "-", fmt.Sprintf("%.4g", rx), "-"}
			r.set(k+"_rxe_"+key, rx)
			if vs > 0 {
				cells[1], cells[3] = fmt.Sprintf("%.4g", vs), fmt.Sprintf("%.3g", vs/rx)
				r.set(k+"_vstellar_"+key, vs)
				r.set(k+"_"+key+"_ratio", vs/rx)
			}
			t.row(cells...)
		}
		for _, size := range rdmatoolsSizes {
			row(fmt.Sprintf("ib_write_bw %s, Gb/s", sizeName(size)), "write_gbps_"+sizeKey(size), f.vst.gbps[size], f.rxe.gbps[size])
		}
		row(fmt.Sprintf("ib_write_lat %d B typical, us", rdmatoolsLatSize), fmt.Sprintf("lat_%db_us", rdmatoolsLatSize), f.vst.latUs, f.rxe.latUs)
		row(fmt.Sprintf("ib_write_lat %d B p99, us", rdmatoolsLatSize), fmt.Sprintf("lat_%db_p99_us", rdmatoolsLatSize), f.vst.latP99Us, f.rxe.latP99Us)
		r.note("%s: %s; rxe0's IPv4 RoCE v2 GID index %d in VM a, %d in VM b", f.qemu.Name, f.qemu.Version, f.rxe.gid[0], f.rxe.gid[1])
		if err := f.vst.problem(); err != nil {
			r.note("%s: vStellar NOT MEASURED (a dash above): %v", f.qemu.Name, err)
		}
	}
	r.note("guests: kernel %s, rdma-core %s, perftest %s (Debian sid), 1 vCPU and 1 GiB each.", v.kernel, v.rdmaCore, v.perftest)
	r.note("accel: %s. The guests run under QEMU's TCG (this machine's KVM cannot run them): rxe's data path is the emulated guest kernel's, vStellar's the host daemon's.", rdmatoolsAccel)
	rounds := fmt.Sprintf("best of %d rounds, vStellar and rxe alternately", plan.rounds)
	if plan.rounds == 1 {
		rounds = "one round, vStellar and rxe one after the other"
	}
	r.note("ib_write_bw -D %d -f 1 (%d s measured between margins of 1 s; default TX depth, one QP); ib_write_lat -n %d; %s; the client's figures.",
		plan.bwSeconds+2, plan.bwSeconds, plan.latIters, rounds)
}
