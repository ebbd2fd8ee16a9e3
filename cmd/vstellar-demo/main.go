// Command vstellar-demo runs vStellar end to end on one machine with no VMM
// and no NIC: it starts a vstellard device manager in-process (or uses a
// running vstellard with --api), creates devices through its management
// API, boots simulated VMs against them (memfd guest RAM, QEMU's exact
// vhost-user message order, a virtio driver in the guest), and walks each
// device through its life: probe, config space, QUERY_DEVICE, doorbells,
// RDMA between the first two VMs (SEND/RECV with a gather list, WRITE,
// READ, FETCH_ADD, and a forged rkey refused), suspend and resume, reset,
// a VMM reconnect, and the daemon's shutdown. Then it does the same RDMA
// between VMs on two hosts: two vstellards in two network namespaces
// (loopback without root), joined by the cross-host transport.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	vms     int
	memSize uint64
	api     string
	verbose bool
	json    bool
	realVM  bool
	tools   bool
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vstellar-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var memGiB float64
	fs.IntVar(&o.vms, "vms", 2, "simulated VMs, each with its own vStellar device")
	fs.Float64Var(&memGiB, "mem", 4, "guest RAM per VM in GiB (memfd, populated only where touched)")
	fs.StringVar(&o.api, "api", "", "management socket of a running vstellard (default: start one in-process)")
	fs.BoolVar(&o.verbose, "v", false, "log the daemon's and the VMM's events")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON")
	fs.BoolVar(&o.realVM, "real-vm", false, "run the verbs between two real VMs (QEMU, a Linux guest) under each QEMU that internal/realvm/prepare.sh prepared; needs root")
	fs.BoolVar(&o.tools, "rdma-tools", false, "with --real-vm: build vstellar.ko and libvstellar and run ibv_rc_pingpong and ib_write_bw, unmodified, between the two VMs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.vms < 1 || o.vms > 64 || memGiB <= 0 || memGiB > 1024 {
		fmt.Fprintln(stderr, "vstellar-demo: --vms must be 1..64 and --mem 0..1024 GiB")
		return 2
	}
	o.memSize = uint64(memGiB*(1<<30)) &^ (1<<21 - 1)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.tools && !o.realVM {
		fmt.Fprintln(stderr, "vstellar-demo: --rdma-tools needs --real-vm")
		return 2
	}
	if o.realVM {
		runVMs := runRealVMs
		if o.tools {
			runVMs = runRealVMTools
		}
		if err := runVMs(ctx, o, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "vstellar-demo: %v\n", err)
			return 1
		}
		return 0
	}
	d := &demo{o: o, out: stdout}
	if o.json {
		d.out = io.Discard
	}
	if err := d.run(ctx, stderr); err != nil {
		fmt.Fprintf(stderr, "vstellar-demo: %v\n", err)
		return 1
	}
	if o.json {
		b, _ := json.MarshalIndent(output{VMs: d.results, Verbs: d.verbsResult, CrossHost: d.crossResult}, "", "  ")
		fmt.Fprintln(stdout, string(b))
	}
	return 0
}

type demo struct {
	o       options
	out     io.Writer
	log     *slog.Logger
	results []result
	// verbsResult is the verbs walk-through between the first two VMs.
	verbsResult *verbsResult
	// crossResult is the same between VMs on two hosts.
	crossResult *crossResult
}

// crossResult is what the two-host walk-through saw.
type crossResult struct {
	Network string       `json:"network"`
	Verbs   *verbsResult `json:"verbs"`
}

// output is the --json document.
type output struct {
	VMs       []result     `json:"vms"`
	Verbs     *verbsResult `json:"verbs,omitempty"`
	CrossHost *crossResult `json:"cross_host,omitempty"`
}

// result is what one VM saw.
type result struct {
	VM            string  `json:"vm"`
	Socket        string  `json:"socket"`
	MemGiB        float64 `json:"mem_gib"`
	BootMs        float64 `json:"boot_ms"`
	Doorbells     string  `json:"doorbells"`
	NodeGUID      string  `json:"node_guid"`
	MaxQP         uint32  `json:"max_qp"`
	QueryUs       float64 `json:"query_device_us"`
	ResumeMs      float64 `json:"suspend_resume_ms"`
	ResetMs       float64 `json:"reset_ms"`
	ReconnectMs   float64 `json:"reconnect_ms"`
	ShutdownNotes int     `json:"shutdown_notices"`
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.out, "  "+format+"\n", args...)
}

func (d *demo) run(ctx context.Context, stderr io.Writer) error {
	level := slog.LevelWarn
	if d.o.verbose {
		level = slog.LevelDebug
	}
	d.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	host, err := hostsim.New(ctx, hostsim.Options{API: d.o.api, Log: d.log})
	if err != nil {
		return err
	}
	defer host.Close()
	if d.o.api != "" {
		fmt.Fprintf(d.out, "daemon: using vstellard at %s\n", d.o.api)
	} else {
		fmt.Fprintf(d.out, "daemon: vstellard running in-process, run dir %s\n", host.RunDir())
	}
	client := host.Client()

	type vmState struct {
		name string
		vm   *vmsim.VM
		drv  *guestdriver.Device
		res  *result
	}
	var vms []*vmState
	for i := range d.o.vms {
		name := fmt.Sprintf("demo-vm%d", i)
		o := hostsim.VMOptions{MemSize: d.o.memSize}
		socket, err := host.CreateDevice(ctx, name, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(d.out, "%s: device created at %s\n", name, socket)
		// The host owns the VM from here (host.Close closes it).
		hv, err := host.Boot(ctx, name, socket, o)
		if err != nil {
			return err
		}
		v := &vmState{name: name, vm: hv.VM, drv: hv.Driver,
			res: &result{VM: name, Socket: socket, MemGiB: float64(d.o.memSize) / (1 << 30), BootMs: ms(hv.Boot.Total())}}
		vms = append(vms, v)
		if err := d.probed(ctx, v.drv, v.res); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := d.isolation(vms[0].drv, vms[len(vms)-1].drv, len(vms)); err != nil {
		return err
	}
	if len(vms) >= 2 {
		vr, err := d.verbs(ctx, vms[0].name, vms[1].name, vms[0].drv, vms[1].drv, "the daemon's in-process fabric")
		if err != nil {
			return fmt.Errorf("verbs: %w", err)
		}
		d.verbsResult = vr
	}
	for _, v := range vms {
		fmt.Fprintf(d.out, "%s: life cycle\n", v.name)
		if err := d.lifecycle(ctx, v.vm, v.drv, v.res); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
	}

	if d.o.api != "" {
		fmt.Fprintln(d.out, "daemon: destroying the demo's devices")
		for _, v := range vms {
			if err := client.DestroyDevice(ctx, v.name); err != nil {
				return fmt.Errorf("destroying %s: %w", v.name, err)
			}
		}
	} else {
		fmt.Fprintln(d.out, "daemon: shutting down")
		if err := host.Shutdown(); err != nil {
			return fmt.Errorf("daemon: %w", err)
		}
	}
	for _, v := range vms {
		v.res.ShutdownNotes = drain(v.vm.ConfigChanges(), time.Second)
		d.step("%s: front-end told its device is going away (%d config-change notice)", v.name, v.res.ShutdownNotes)
		d.results = append(d.results, *v.res)
	}
	d.table()
	if d.o.api == "" {
		return d.crossHost(ctx)
	}
	return nil
}

// crossHost runs the verbs walk-through between VMs on two hosts: two
// in-process vstellards, each with its cross-host fabric, in two network
// namespaces joined by a veth (loopback when namespaces cannot be made).
func (d *demo) crossHost(ctx context.Context) error {
	fmt.Fprintln(d.out, "two hosts: a vstellard each, joined by the cross-host transport")
	p, err := hostsim.NewPair(ctx, hostsim.PairOptions{Net: netlab.Options{Prefix: "vsdemo", MTU: 9000}, Log: d.log})
	if err != nil {
		return fmt.Errorf("two hosts: %w", err)
	}
	defer p.Close()
	d.step("network: %s", p.Where)
	mem := min(d.o.memSize, 1<<30)
	var vms [2]*hostsim.VM
	for i, h := range p.Hosts {
		name := fmt.Sprintf("demo-host%d-vm", i+1)
		if vms[i], err = h.AddVM(ctx, name, hostsim.VMOptions{MemSize: mem, Tenant: 1}); err != nil {
			return fmt.Errorf("host %d: %w", i+1, err)
		}
		g := vms[i].Driver.GID()
		d.step("host %d: %s booted, GID %s, fabric on %v", i+1, name, net.IP(g[:]), h.Fabric().Addr())
	}
	vr, err := d.verbs(ctx, vms[0].Name, vms[1].Name, vms[0].Driver, vms[1].Driver, "the cross-host transport ("+p.Where+")")
	if err != nil {
		return fmt.Errorf("cross-host verbs: %w", err)
	}
	for i, h := range p.Hosts {
		st := h.Fabric().Stats()
		d.step("host %d fabric: %d connection, %d datagrams sent, %d received, %d refused", i+1, st.Connections, st.Sent, st.Received, st.Refused)
	}
	d.crossResult = &crossResult{Network: p.Where, Verbs: vr}
	return nil
}

// probed reports what the driver of a freshly booted VM found: config
// space and QUERY_DEVICE.
func (d *demo) probed(ctx context.Context, drv *guestdriver.Device, res *result) error {
	cfg0 := drv.Config()
	res.NodeGUID = abi.FormatGUID(cfg0.NodeGUID)
	res.MaxQP = cfg0.Limits.MaxQP
	res.Doorbells = "guest RAM (fallback)"
	if cfg0.Status&abi.ConfigStatusDoorbellShmem != 0 {
		res.Doorbells = fmt.Sprintf("shmem region %d, %d KiB", abi.DoorbellShmID, cfg0.Doorbell.Size()>>10)
	}
	d.step("booted %.1f GiB guest to DRIVER_OK and probed in %.2f ms", res.MemGiB, res.BootMs)
	d.step("config space: ABI %d.%d, node GUID %s, %d ports, max_qp %d, doorbells in %s",
		cfg0.ABIVersion>>16, cfg0.ABIVersion&0xffff, res.NodeGUID, cfg0.PhysPortCnt, res.MaxQP, res.Doorbells)
	t1 := time.Now()
	attr, err := drv.QueryDevice(ctx)
	if err != nil {
		return fmt.Errorf("QUERY_DEVICE: %w", err)
	}
	res.QueryUs = float64(time.Since(t1).Nanoseconds()) / 1e3
	d.step("QUERY_DEVICE over the control queue in %.0f us: fw %d.%d.%d, vendor %#x part %#x, max_qp %d max_cq %d max_mr %d max_sge %d",
		res.QueryUs, attr.FWVersion>>32, attr.FWVersion>>16&0xffff, attr.FWVersion&0xffff,
		attr.VendorID, attr.VendorPartID, attr.MaxQP, attr.MaxCQ, attr.MaxMR, attr.MaxSGE)
	return nil
}

// isolation writes a doorbell record in the first VM's region and shows the
// last VM's region (another memfd) does not see it.
func (d *demo) isolation(a, b *guestdriver.Device, n int) error {
	va, err := a.Doorbells()
	if err != nil {
		return fmt.Errorf("doorbells: %w", err)
	}
	off := uint64(a.Config().Doorbell.RecordsOffset)
	va.PutUint64(off, 0x5354454c4c4152) // "STELLAR"
	if n < 2 {
		return nil
	}
	vb, err := b.Doorbells()
	if err != nil {
		return fmt.Errorf("doorbells: %w", err)
	}
	fmt.Fprintln(d.out, "doorbells: each device has its own memfd")
	d.step("first VM wrote %#x to its doorbell record 0; last VM's record 0 reads %#x", va.Uint64(off), vb.Uint64(off))
	if vb.Uint64(off) != 0 {
		return errors.New("doorbell pages are shared between devices")
	}
	return nil
}

// lifecycle takes a device through suspend/resume, reset and reconnect,
// checking after each that it still answers.
func (d *demo) lifecycle(ctx context.Context, vm *vmsim.VM, drv *guestdriver.Device, res *result) error {
	check := func(what string, t0 time.Time) (float64, error) {
		if _, err := drv.QueryDevice(ctx); err != nil {
			return 0, fmt.Errorf("QUERY_DEVICE after %s: %w", what, err)
		}
		return ms(time.Since(t0)), nil
	}
	var err error
	t0 := time.Now()
	if err := vm.Stop(ctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if err := vm.Start(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if res.ResumeMs, err = check("resume", t0); err != nil {
		return err
	}
	d.step("suspend (GET_VRING_BASE, SET_STATUS 0) and resume: device state kept, rings resumed, %.2f ms", res.ResumeMs)

	t0 = time.Now()
	// A guest reset ends its driver (and its event pump, which would
	// otherwise wait on the same interrupt as the new one); the re-probe
	// is a new driver.
	drv.Close()
	if err := vm.Reset(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if err := vm.Start(ctx); err != nil {
		return fmt.Errorf("start after reset: %w", err)
	}
	drv, err = guestdriver.Open(ctx, vmsim.NewTransport(vm))
	if err != nil {
		return fmt.Errorf("probe after reset: %w", err)
	}
	defer drv.Close()
	if res.ResetMs, err = check("reset", t0); err != nil {
		return err
	}
	d.step("guest reset and re-probe (RESET_STATE): fresh rings, %.2f ms", res.ResetMs)

	t0 = time.Now()
	if err := vm.Reconnect(ctx); err != nil {
		return fmt.Errorf("reconnect: %w", err)
	}
	if res.ReconnectMs, err = check("reconnect", t0); err != nil {
		return err
	}
	if _, err := drv.Doorbells(); err != nil {
		return fmt.Errorf("doorbells after reconnect: %w", err)
	}
	d.step("VMM reconnect (socket dropped, handshake replayed): doorbells re-mapped, %.2f ms", res.ReconnectMs)
	return nil
}

func (d *demo) table() {
	fmt.Fprintln(d.out)
	w := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "vm\tguest GiB\tboot ms\tQUERY_DEVICE us\tresume ms\treset ms\treconnect ms\t")
	for _, r := range d.results {
		fmt.Fprintf(w, "%s\t%.1f\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t\n", r.VM, r.MemGiB, r.BootMs, r.QueryUs, r.ResumeMs, r.ResetMs, r.ReconnectMs)
	}
	w.Flush()
}

func drain(ch <-chan struct{}, wait time.Duration) int {
	n := 0
	timeout := time.After(wait)
	for {
		select {
		case <-ch:
			n++
			timeout = time.After(50 * time.Millisecond)
		case <-timeout:
			return n
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
