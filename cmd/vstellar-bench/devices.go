package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/api"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
)

// The devices suite: how one daemon scales with the number of devices it
// serves. The daemon is vstellard's (hostsim.New: daemon.Manager with
// daemon.StellarDevice in a temporary run directory, its management API
// on a unix socket), and every create and destroy is an HTTP call on that
// socket, made by clients of their own.
//
// Phases, in one process:
//  1. empty daemon: devSeq creates, each destroyed at once, one client,
//     one at a time: the baseline latency. Then the process's resources
//     (fds, goroutines, mappings) are the leak check's reference.
//  2. count devices created by devClients concurrent clients; each call
//     records its latency and how many devices existed when it started.
//     At count bare devices: RSS, goroutines, idle CPU, and devSeq more
//     sequential creates and destroys (the baseline at count).
//  3. a simulated VM (vmsim: memfd RAM, QEMU's vhost-user sequence) on
//     every device, its driver with a CQ, so that the device's engine
//     runs and is idle: "1000 devices per host" serve 1000 VMs. RSS,
//     goroutines and idle CPU again; the VMs are in this process, so
//     these figures include their side.
//  4. the VMs shut down (driver, then VMM), then all devices destroyed
//     concurrently; after it the process's resources against phase 1's.

const devicesMethod = `One in-process vstellard (daemon.Manager with the Stellar device
factory, a temporary run directory) and its management API on a unix
socket; every create and destroy is an HTTP call on it (POST and DELETE
/v1/devices). Baseline: creates into the empty daemon, one at a time,
each destroyed at once. Then count devices are created by 16 concurrent
clients, and a simulated VM (memfd RAM, QEMU's vhost-user sequence, the
guest driver with a CQ, so the device's engine runs and sleeps) is booted
on each; RSS (VmRSS), goroutines and idle CPU (getrusage over 2 s after a
GC, % of one core) are read with bare devices and with the VMs, which run
in the same process and are included. The VMs shut down, all devices are
destroyed concurrently, and the process's fds, goroutines and mappings
are compared with the empty daemon's.`

var devicesGoals = []goal{
	atMost("create_p50_ms", 10, "per API call, 16 concurrent clients, up to count devices"),
	below("idle_cpu_pct", 2, "% of one core, count idle devices with their VMs"),
	atMost("leak", 0, "fds, goroutines and memfd mappings back to the empty daemon's after destroying all"),
}

const (
	devicesDefault = 1000
	devicesQuick   = 200
	devicesMax     = 5000
	// devClients is how many API clients create and destroy at once.
	devClients = 16
	// devVMMem is each VM's RAM: a memfd, touched only where the rings
	// and the driver's buffers are.
	devVMMem = 16 << 20
	// devLatencyBins is how many groups of calls the latency figure
	// splits the creates into, by the devices present.
	devLatencyBins = 10
)

// Leak tolerances after destroying all devices: a device or VM left
// behind holds fds and goroutines and maps memfds (guest RAM, doorbell
// pages), so even one shows; the slack is for the runtime's own drift (an
// idle HTTP connection closing late). Anonymous mappings are reported, not
// judged: the Go heap and its huge-page advice add and split them.
const (
	devLeakFDs        = 2
	devLeakGoroutines = 2
	devLeakFileMaps   = 0
)

type devicesPlan struct {
	count   int
	seq     int           // sequential creates (and destroys) per baseline
	idle    time.Duration // idle CPU window
	settle  time.Duration // before reading a steady state
	rssTick time.Duration // RSS sampling while creating and attaching
}

func devicesPlanFor(o options) (devicesPlan, error) {
	pl := devicesPlan{count: devicesDefault, seq: 50, idle: 2 * time.Second, settle: 300 * time.Millisecond, rssTick: 20 * time.Millisecond}
	if o.quick {
		pl.count = devicesQuick
	}
	if o.tiny {
		pl.count, pl.seq, pl.idle, pl.settle = 20, 5, 300*time.Millisecond, 100*time.Millisecond
	}
	if o.count != 0 { // 0: not given
		if o.count < 1 || o.count > devicesMax {
			return pl, fmt.Errorf("--count %d: not a device count in 1..%d", o.count, devicesMax)
		}
		pl.count = o.count
	}
	return pl, nil
}

// apiCall is one create or destroy through the API.
type apiCall struct {
	lat     time.Duration
	present int // devices that existed when it started
}

// apiLatencies sorts the calls' latencies.
func apiLatencies(calls []apiCall) []time.Duration {
	out := make([]time.Duration, len(calls))
	for i, c := range calls {
		out[i] = c.lat
	}
	slices.Sort(out)
	return out
}

// benchVM is a simulated VM on one device, its driver holding a CQ.
type benchVM struct {
	vm  *vmsim.VM
	drv *guestdriver.Device
}

// bootIdleVM boots a VM on the device socket and opens the device with
// the guest driver; a CQ makes the device's engine start (and then sleep,
// nothing being posted).
func bootIdleVM(ctx context.Context, socket string) (*benchVM, error) {
	vm, err := vmsim.New(ctx, vmsim.DeviceConfig(socket, devVMMem))
	if err != nil {
		return nil, err
	}
	v := &benchVM{vm: vm}
	if err := vm.Start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("DRIVER_OK: %w", err), vm.Close())
	}
	if v.drv, err = guestdriver.Open(ctx, vmsim.NewTransport(vm)); err != nil {
		return nil, errors.Join(fmt.Errorf("probe: %w", err), vm.Close())
	}
	if _, err := v.drv.CreateCQ(ctx, 16); err != nil {
		return nil, errors.Join(fmt.Errorf("CQ: %w", err), v.close())
	}
	return v, nil
}

func (v *benchVM) close() error { return errors.Join(v.drv.Close(), v.vm.Close()) }

// parallelCalls runs op on every name with clients concurrent API
// clients of their own, and returns each call's latency and the devices
// present when it started (present, moved by delta after each success).
func parallelCalls(ctx context.Context, sock string, names []string, clients int, present *atomic.Int64, delta int64,
	op func(ctx context.Context, c *api.Client, i int) error) ([]apiCall, time.Duration, error) {
	calls := make([]apiCall, len(names))
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	for range min(clients, len(names)) {
		wg.Go(func() {
			c := api.NewClient(sock)
			defer c.Close()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) || ctx.Err() != nil {
					return
				}
				p := present.Load()
				s := time.Now()
				if err := op(ctx, c, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", names[i], err)
					}
					mu.Unlock()
					cancel()
					return
				}
				calls[i] = apiCall{lat: time.Since(s), present: int(p)}
				present.Add(delta)
			}
		})
	}
	wg.Wait()
	return calls, time.Since(t0), firstErr
}

// seqResult is n devices created one at a time with one client, each
// destroyed at once: both latencies, sorted, and the process's CPU time
// per create (both ends of the HTTP call are in this process).
type seqResult struct {
	create, destroy []time.Duration
	createCPU       time.Duration
}

func seqCreateDestroy(ctx context.Context, sock, prefix string, n int) (res seqResult, err error) {
	c := api.NewClient(sock)
	defer c.Close()
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		c0, err := cpuTime()
		if err != nil {
			return res, err
		}
		t0 := time.Now()
		if _, err := c.CreateDevice(ctx, api.DeviceSpec{Name: name}); err != nil {
			return res, fmt.Errorf("creating %s: %w", name, err)
		}
		t1 := time.Now()
		c1, err := cpuTime()
		if err != nil {
			return res, err
		}
		res.createCPU += c1 - c0
		if err := c.DestroyDevice(ctx, name); err != nil {
			return res, fmt.Errorf("destroying %s: %w", name, err)
		}
		res.create, res.destroy = append(res.create, t1.Sub(t0)), append(res.destroy, time.Since(t1))
	}
	slices.Sort(res.create)
	slices.Sort(res.destroy)
	res.createCPU /= time.Duration(max(n, 1))
	return res, nil
}

// rssSample is the process's RSS when n devices (or VMs) were there.
type rssSample struct {
	n   int
	rss uint64
}

// sampleRSS records the RSS against n every tick until stop is closed.
func sampleRSS(n *atomic.Int64, tick time.Duration, stop <-chan struct{}) <-chan []rssSample {
	out := make(chan []rssSample, 1)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		var ss []rssSample
		read := func() {
			if rss, err := readRSS(); err == nil {
				ss = append(ss, rssSample{int(n.Load()), rss})
			}
		}
		read()
		for {
			select {
			case <-stop:
				read()
				out <- ss
				return
			case <-t.C:
				read()
			}
		}
	}()
	return out
}

// devState is the process at one point of the run.
type devState struct {
	name         string
	devices, vms int
	proc         procState
	idleCPU      float64 // % of one core; -1: not measured
	// addedFrom, added: the state before, and how many devices or VMs
	// were added since, for the RSS each added.
	addedFrom *procState
	added     int
}

func runDevices(ctx context.Context, o options, r *report) (err error) {
	pl, err := devicesPlanFor(o)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	fdLimit, err := raiseFDLimit(uint64(pl.count*(devFDs+devVMFDs) + devFDSlack))
	if err != nil {
		return err
	}
	if need := uint64(pl.count*devFDs + devFDSlack); fdLimit < need {
		return fmt.Errorf("%d devices need about %d fds, the limit is %d", pl.count, need, fdLimit)
	}
	h, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	sock := h.API()

	// 1. The empty daemon.
	base, err := seqCreateDestroy(ctx, sock, "empty", pl.seq)
	baseC, baseD := base.create, base.destroy
	if err != nil {
		return fmt.Errorf("empty daemon: %w", err)
	}
	empty, err := settledProc(ctx, pl.settle)
	if err != nil {
		return err
	}
	emptyCPU, err := idleCPU(ctx, pl.idle)
	if err != nil {
		return err
	}

	// 2. count devices, created concurrently.
	names := make([]string, pl.count)
	sockets := make([]string, pl.count)
	for i := range names {
		names[i] = fmt.Sprintf("dev-%04d", i)
	}
	var present atomic.Int64
	stopRSS := make(chan struct{})
	rssCreate := sampleRSS(&present, pl.rssTick, stopRSS)
	cpu0, err := cpuTime()
	if err != nil {
		return err
	}
	created, createWall, err := parallelCalls(ctx, sock, names, devClients, &present, 1, func(ctx context.Context, c *api.Client, i int) error {
		info, err := c.CreateDevice(ctx, api.DeviceSpec{Name: names[i]})
		sockets[i] = info.Socket
		return err
	})
	close(stopRSS)
	createRSS := <-rssCreate
	if err != nil {
		return fmt.Errorf("creating %d devices: %w", pl.count, err)
	}
	cpu1, err := cpuTime()
	if err != nil {
		return err
	}
	createCPU := (cpu1 - cpu0) / time.Duration(pl.count)
	bare, err := settledProc(ctx, pl.settle)
	if err != nil {
		return err
	}
	bareCPU, err := idleCPU(ctx, pl.idle)
	if err != nil {
		return err
	}
	at, err := seqCreateDestroy(ctx, sock, "extra", pl.seq)
	atC, atD := at.create, at.destroy
	if err != nil {
		return fmt.Errorf("at %d devices: %w", pl.count, err)
	}

	// 3. A VM on every device, or on as many as the fd limit holds: here
	// both ends of a VM's connection are in this process.
	vmCount := min(pl.count, int((int64(fdLimit)-int64(bare.fds)-devFDSlack)/devVMFDs))
	if vmCount < 1 {
		return fmt.Errorf("the fd limit (%d) leaves no room for a VM beside %d devices", fdLimit, pl.count)
	}
	var vms []*benchVM
	defer func() {
		for _, v := range vms {
			err = errors.Join(err, v.close())
		}
	}()
	var attached atomic.Int64
	stopRSS = make(chan struct{})
	rssAttach := sampleRSS(&attached, pl.rssTick, stopRSS)
	boots := make([]time.Duration, 0, vmCount)
	t0 := time.Now()
	for i := range vmCount {
		s := time.Now()
		v, err := bootIdleVM(ctx, sockets[i])
		if err != nil {
			close(stopRSS)
			<-rssAttach
			return fmt.Errorf("VM on %s (%d VMs up): %w", names[i], len(vms), err)
		}
		boots = append(boots, time.Since(s))
		vms = append(vms, v)
		attached.Add(1)
	}
	attachWall := time.Since(t0)
	close(stopRSS)
	attachRSS := <-rssAttach
	slices.Sort(boots)
	full, err := settledProc(ctx, pl.settle)
	if err != nil {
		return err
	}
	fullCPU, err := idleCPU(ctx, pl.idle)
	if err != nil {
		return err
	}

	// 4. Shut the VMs down, destroy every device concurrently.
	t0 = time.Now()
	for len(vms) > 0 {
		v := vms[len(vms)-1]
		vms = vms[:len(vms)-1]
		if err := v.close(); err != nil {
			return fmt.Errorf("closing a VM: %w", err)
		}
	}
	closeWall := time.Since(t0)
	destroyed, destroyWall, err := parallelCalls(ctx, sock, names, devClients, &present, -1, func(ctx context.Context, c *api.Client, i int) error {
		return c.DestroyDevice(ctx, names[i])
	})
	if err != nil {
		return fmt.Errorf("destroying %d devices: %w", pl.count, err)
	}
	if devs, err := h.Client().Devices(ctx); err != nil || len(devs) != 0 {
		return fmt.Errorf("after destroying all, the daemon lists %d devices (%v)", len(devs), err)
	}
	h.Client().Close()
	after, err := settledAgain(ctx, pl.settle, empty)
	if err != nil {
		return err
	}

	// Latency table.
	cLat, dLat := apiLatencies(created), apiLatencies(destroyed)
	n := pl.count
	lt := r.table(fmt.Sprintf("Create and destroy through the management API (unix-socket HTTP), %d devices", n),
		"phase", "devices present", "clients", "calls", "create p50 ms", "p99", "CPU ms/create", "destroy p50 ms", "p99", "creates/s")
	lt.row("empty daemon, one at a time", "0", "1", fmt.Sprint(pl.seq), msf(percentile(baseC, 50)), msf(percentile(baseC, 99)), msf(base.createCPU),
		msf(percentile(baseD, 50)), msf(percentile(baseD, 99)), "")
	lt.row("concurrent", fmt.Sprintf("0..%d", n), fmt.Sprint(devClients), fmt.Sprint(n), msf(percentile(cLat, 50)), msf(percentile(cLat, 99)), msf(createCPU),
		msf(percentile(dLat, 50)), msf(percentile(dLat, 99)), fmt.Sprintf("%.0f", float64(n)/createWall.Seconds()))
	lt.row(fmt.Sprintf("at %d, one at a time", n), fmt.Sprint(n), "1", fmt.Sprint(pl.seq), msf(percentile(atC, 50)), msf(percentile(atC, 99)), msf(at.createCPU),
		msf(percentile(atD, 50)), msf(percentile(atD, 99)), "")
	r.set("count", float64(n))
	r.set("vm_count", float64(vmCount))
	r.set("create_p50_ms", ms(percentile(cLat, 50)))
	r.set("create_p99_ms", ms(percentile(cLat, 99)))
	r.set("destroy_p50_ms", ms(percentile(dLat, 50)))
	r.set("destroy_p99_ms", ms(percentile(dLat, 99)))
	r.set("create_empty_p50_ms", ms(percentile(baseC, 50)))
	r.set("destroy_empty_p50_ms", ms(percentile(baseD, 50)))
	r.set("create_seq_p50_ms", ms(percentile(atC, 50)))
	r.set("destroy_seq_p50_ms", ms(percentile(atD, 50)))
	r.set("create_ratio", percentile(cLat, 50).Seconds()/percentile(baseC, 50).Seconds())
	r.set("create_seq_ratio", percentile(atC, 50).Seconds()/percentile(baseC, 50).Seconds())
	r.set("creates_per_s", float64(n)/createWall.Seconds())
	r.set("create_cpu_ms", ms(createCPU))
	r.set("create_empty_cpu_ms", ms(base.createCPU))
	r.set("destroys_per_s", float64(n)/destroyWall.Seconds())
	r.set("boot_p50_ms", ms(percentile(boots, 50)))

	// Steady states.
	st := r.table("Process at each step (VmRSS, goroutines, fds, mappings of files and memfds; idle CPU over "+pl.idle.String()+" after a GC)",
		"state", "devices", "VMs", "RSS MiB", "+MiB each", "goroutines", "fds", "file maps", "idle CPU %")
	vmState := "a VM on each, idle"
	if vmCount < n {
		vmState = fmt.Sprintf("a VM on %d of them, idle", vmCount)
	}
	for _, s := range []devState{
		{name: "empty daemon", proc: empty, idleCPU: emptyCPU},
		{name: "bare devices", devices: n, proc: bare, idleCPU: bareCPU, addedFrom: &empty, added: n},
		{name: vmState, devices: n, vms: vmCount, proc: full, idleCPU: fullCPU, addedFrom: &bare, added: vmCount},
		{name: "all destroyed", proc: after, idleCPU: -1},
	} {
		per, cpu := "", ""
		if s.addedFrom != nil {
			per = fmt.Sprintf("%.3f", mib(s.proc.rss-min(s.proc.rss, s.addedFrom.rss))/float64(s.added))
		}
		if s.idleCPU >= 0 {
			cpu = fmt.Sprintf("%.2f", s.idleCPU)
		}
		st.row(s.name, fmt.Sprint(s.devices), fmt.Sprint(s.vms), fmt.Sprintf("%.1f", mib(s.proc.rss)), per,
			fmt.Sprint(s.proc.goroutines), fmt.Sprint(s.proc.fds), fmt.Sprint(s.proc.fileMaps), cpu)
	}
	r.set("rss_mb", mib(full.rss))
	r.set("rss_empty_mb", mib(empty.rss))
	r.set("rss_bare_mb", mib(bare.rss))
	r.set("rss_mb_per_device", mib(bare.rss-min(bare.rss, empty.rss))/float64(n))
	r.set("rss_mb_per_vm", mib(full.rss-min(full.rss, bare.rss))/float64(vmCount))
	r.set("goroutines", float64(full.goroutines))
	r.set("goroutines_bare", float64(bare.goroutines))
	r.set("goroutines_empty", float64(empty.goroutines))
	r.set("idle_cpu_pct", fullCPU)
	r.set("idle_cpu_bare_pct", bareCPU)
	r.set("idle_cpu_empty_pct", emptyCPU)

	// Leaks.
	lk := r.table("After destroying all: the process against the empty daemon's", "resource", "empty daemon", "after", "delta", "tolerance", "verdict")
	leak := false
	for _, c := range []struct {
		name       string
		before, at int
		tol        int
	}{
		{"fds", empty.fds, after.fds, devLeakFDs},
		{"goroutines", empty.goroutines, after.goroutines, devLeakGoroutines},
		{"file mappings", empty.fileMaps, after.fileMaps, devLeakFileMaps},
		{"all mappings", empty.maps, after.maps, -1},
	} {
		d := c.at - c.before
		v, tol := "ok", fmt.Sprint(c.tol)
		switch {
		case c.tol < 0:
			v, tol = "(the heap's)", ""
		case d > c.tol:
			v, leak = "LEAK", true
		}
		lk.row(c.name, fmt.Sprint(c.before), fmt.Sprint(c.at), fmt.Sprintf("%+d", d), tol, v)
	}
	r.set("leak_fds", float64(after.fds-empty.fds))
	r.set("leak_goroutines", float64(after.goroutines-empty.goroutines))
	r.set("leak_file_maps", float64(after.fileMaps-empty.fileMaps))
	r.set("leak_maps", float64(after.maps-empty.maps))
	r.set("leak", b2f(leak))

	// Figures: create latency as devices accumulate, RSS as they and
	// their VMs are added.
	lf := r.lines("create-latency", fmt.Sprintf("Device create latency, %d concurrent clients", devClients), "devices present", "ms")
	for _, b := range latencyBins(created, devLatencyBins) {
		lf.add("create p50", b.x, ms(b.p50))
		lf.add("create p99", b.x, ms(b.p99))
	}
	lf.reference("empty daemon, one at a time, p50", 0, float64(n), ms(percentile(baseC, 50)))
	rf := r.lines("rss", "Process RSS", "devices", "MiB")
	for _, s := range createRSS {
		rf.add("creating bare devices", float64(s.n), mib(s.rss))
	}
	for _, s := range attachRSS {
		rf.add("then booting a VM on each", float64(s.n), mib(s.rss))
	}

	r.note("every call is an HTTP request on the API's unix socket; concurrent: %d clients, each its own connection, took the %d creates (%v) and, after the VMs shut down, the %d destroys (%v)",
		devClients, n, createWall.Round(time.Millisecond), n, destroyWall.Round(time.Millisecond))
	r.note("create_ratio: concurrent create p50 over the empty daemon's one-at-a-time p50; create_seq_ratio: one at a time at %d devices over one at a time into the empty daemon", n)
	r.note("CPU ms/create: the process's CPU time (user + system, both ends of the HTTP call) per create; with %d clients in flight a create waits its turn for the %d cores: %d x %s ms / %d = %s ms (Little's law)",
		devClients, runtime.NumCPU(), devClients, msf(createCPU), runtime.NumCPU(), msf(devClients*createCPU/time.Duration(runtime.NumCPU())))
	r.note("VMs: %d, one per device, %s of memfd RAM each, booted one after the other in %v (boot p50 %s ms: connect, DRIVER_OK, probe, a CQ), shut down in %v; they run in this process, so RSS, goroutines and fds include their side",
		vmCount, sizeName(devVMMem), attachWall.Round(time.Millisecond), msf(percentile(boots, 50)), closeWall.Round(time.Millisecond))
	if vmCount < n {
		r.note("VMs on %d of the %d devices only: the fd limit is %d (raising the hard limit needs CAP_SYS_RESOURCE) and a VM costs about %d fds here, both ends of its connection being in this process; a real VMM holds its end in its own process",
			vmCount, n, fdLimit, devVMFDs)
	}
	r.note("+MiB each: the RSS added over the row before per device, then per VM; every row is read after a GC that returns the free heap to the system")
	r.note("leak: fds, goroutines or file mappings (memfds: guest RAM, doorbells) above the empty daemon's by more than the tolerance; anonymous mappings follow the Go heap and are not judged (leak_* keys: the deltas)")
	return nil
}

// devSettleMax bounds how long the leak check waits for the process to
// come back to the empty daemon's state: goroutines of closed connections
// end a moment after the close, later on a busy machine.
const devSettleMax = 5 * time.Second

// settledAgain reads the settled process until its fds, goroutines and
// file mappings are back within the leak tolerances of ref, or
// devSettleMax passed, and returns the last reading.
func settledAgain(ctx context.Context, d time.Duration, ref procState) (procState, error) {
	deadline := time.Now().Add(devSettleMax)
	for {
		p, err := settledProc(ctx, d)
		if err != nil || time.Now().After(deadline) ||
			p.fds-ref.fds <= devLeakFDs && p.goroutines-ref.goroutines <= devLeakGoroutines && p.fileMaps-ref.fileMaps <= devLeakFileMaps {
			return p, err
		}
	}
}

// latencyBin is the calls whose devices present fell in one range.
type latencyBin struct {
	x        float64 // the range's middle
	p50, p99 time.Duration
}

// latencyBins splits calls into n ranges of devices present.
func latencyBins(calls []apiCall, n int) []latencyBin {
	hi := 0
	for _, c := range calls {
		hi = max(hi, c.present)
	}
	width := max(1, (hi+n)/n)
	groups := make([][]time.Duration, (hi/width)+1)
	for _, c := range calls {
		groups[c.present/width] = append(groups[c.present/width], c.lat)
	}
	var out []latencyBin
	for i, g := range groups {
		if len(g) == 0 {
			continue
		}
		slices.Sort(g)
		out = append(out, latencyBin{x: (float64(i) + 0.5) * float64(width), p50: percentile(g, 50), p99: percentile(g, 99)})
	}
	return out
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
