package hostsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/fabric/remote"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
)

// Host is an in-process daemon and the VMs attached to it.
type Host struct {
	log    *slog.Logger
	api    string
	client *api.Client
	dir    string // the in-process daemon's run dir
	ownDir bool   // dir is ours: removed on Close
	// base is New's context without its cancellation, for the teardown
	// at Close.
	base   context.Context
	cancel context.CancelFunc
	done   chan error
	vms    []*VM
	mgr    *daemon.Manager // the in-process daemon (nil for an external one)
}

// Options configure a Host.
type Options struct {
	// API is the management socket of a running vstellard; empty starts
	// one in-process in a temporary run directory.
	API string
	Log *slog.Logger
	// Fabric, for an in-process daemon, joins its devices to other hosts'
	// (daemon.Config.Fabric); ListenIn opens the fabric's socket where it
	// belongs, such as the host's network namespace
	// (daemon.Config.ListenIn). See Pair for two hosts made so.
	Fabric   *daemon.FabricSpec
	ListenIn func(open func() error) error
	// DataCores, for an in-process daemon, are the CPUs its data path
	// polls from (daemon.Config.DataCores; empty: the default threads).
	DataCores daemon.CPUList
	// RunDir, for an in-process daemon, is its run directory, kept on
	// Close; empty makes a temporary one, removed on Close. A daemon
	// started again on the same RunDir serves devices of the same names
	// on the same sockets, as a restarted vstellard does.
	RunDir string
}

// New starts (or connects to) a daemon.
func New(ctx context.Context, o Options) (*Host, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{log: log, api: o.API, base: context.WithoutCancel(ctx)}
	if h.api == "" {
		dir, own := o.RunDir, false
		if dir == "" {
			d, err := os.MkdirTemp("", "vstellar-host-")
			if err != nil {
				return nil, err
			}
			dir, own = d, true
		}
		removeDir := func() {
			if own {
				os.RemoveAll(dir)
			}
		}
		cfg := daemon.DefaultConfig()
		cfg.RunDir = dir
		cfg.Factory = daemon.StellarDevice
		cfg.Fabric, cfg.ListenIn, cfg.DataCores = o.Fabric, o.ListenIn, o.DataCores
		m, err := daemon.New(cfg, log)
		if err != nil {
			removeDir()
			return nil, fmt.Errorf("hostsim: %w", err)
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- m.Run(rctx) }()
		select {
		case <-m.Ready():
		case err := <-done:
			cancel()
			removeDir()
			return nil, fmt.Errorf("hostsim: daemon: %w", err)
		case <-ctx.Done():
			cancel()
			<-done
			removeDir()
			return nil, ctx.Err()
		}
		h.dir, h.ownDir, h.cancel, h.done, h.api, h.mgr = dir, own, cancel, done, m.APISocket(), m
	}
	h.client = api.NewClient(h.api)
	return h, nil
}

// Fabric is the in-process daemon's cross-host fabric (nil without one,
// or for an external daemon).
func (h *Host) Fabric() *remote.Fabric {
	if h.mgr == nil {
		return nil
	}
	return h.mgr.Fabric()
}

// Manager is the in-process daemon (nil for an external one).
func (h *Host) Manager() *daemon.Manager { return h.mgr }

// API is the daemon's management socket.
func (h *Host) API() string { return h.api }

// RunDir is the in-process daemon's run directory ("" for an external one).
func (h *Host) RunDir() string { return h.dir }

// Client is a management API client.
func (h *Host) Client() *api.Client { return h.client }

// VM is a simulated VM with its vStellar device opened by the driver.
type VM struct {
	Name   string
	Socket string
	VM     *vmsim.VM
	Driver *guestdriver.Device
	// Boot is how long each step of booting the VM took.
	Boot BootTimes
}

// BootTimes splits a VM's boot (Boot) into its steps, so that a benchmark
// can tell where start-up time goes.
type BootTimes struct {
	// Connect is vmsim.New: guest RAM (a memfd, not yet touched) and the
	// vhost-user connect sequence.
	Connect time.Duration
	// DriverOK is vmsim.VM.Start: the memory table, the queues and
	// DRIVER_OK. A device that pins all guest memory does it here, at
	// SET_MEM_TABLE.
	DriverOK time.Duration
	// Probe is guestdriver.Open: config, doorbells, event buffers.
	Probe time.Duration
}

// Total is the whole boot.
func (b BootTimes) Total() time.Duration { return b.Connect + b.DriverOK + b.Probe }

// VMOptions configure AddVM (CreateDevice and Boot).
type VMOptions struct {
	// MemSize is guest RAM in bytes (a 2 MiB multiple; default 1 GiB).
	MemSize uint64
	// Pin is the device's pinning policy (nil: the daemon's default, on
	// demand).
	Pin *api.PinSpec
	// Tenant is the device's tenant on the cross-host fabric.
	Tenant uint32
	// Configure may adjust the VM's configuration (features, protocol
	// features) before it boots.
	Configure func(*vmsim.Config)
}

// AddVM creates a device named name, boots a VM against it to DRIVER_OK
// and opens the device with the guest driver: CreateDevice then Boot.
func (h *Host) AddVM(ctx context.Context, name string, o VMOptions) (*VM, error) {
	socket, err := h.CreateDevice(ctx, name, o)
	if err != nil {
		return nil, err
	}
	v, err := h.Boot(ctx, name, socket, o)
	if err != nil {
		// Give the name back (an external daemon keeps it otherwise).
		if derr := h.client.DestroyDevice(context.WithoutCancel(ctx), name); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	return v, nil
}

// CreateDevice creates the device named name, with o's pin policy, through
// the management API, and returns its vhost-user socket for Boot. On a
// Boot failure the caller destroys it (Client().DestroyDevice).
func (h *Host) CreateDevice(ctx context.Context, name string, o VMOptions) (string, error) {
	info, err := h.client.CreateDevice(ctx, api.DeviceSpec{Name: name, Pin: o.Pin, Tenant: o.Tenant})
	if err != nil {
		return "", fmt.Errorf("hostsim: creating device %s: %w", name, err)
	}
	return info.Socket, nil
}

// Boot starts a VM on the device socket (from CreateDevice) and opens the
// device, timing each step in VM.Boot. The host owns the VM from then on:
// RemoveVM or Close closes it.
func (h *Host) Boot(ctx context.Context, name, socket string, o VMOptions) (*VM, error) {
	if o.MemSize == 0 {
		o.MemSize = 1 << 30
	}
	cfg := vmsim.DeviceConfig(socket, o.MemSize)
	cfg.Logger = h.log
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	var bt BootTimes
	t0 := time.Now()
	vm, err := vmsim.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hostsim: %s: %w", name, err)
	}
	t1 := time.Now()
	bt.Connect = t1.Sub(t0)
	if err := vm.Start(ctx); err != nil {
		vm.Close()
		return nil, fmt.Errorf("hostsim: %s: DRIVER_OK: %w", name, err)
	}
	t2 := time.Now()
	bt.DriverOK = t2.Sub(t1)
	drv, err := guestdriver.Open(ctx, vmsim.NewTransport(vm))
	if err != nil {
		vm.Close()
		return nil, fmt.Errorf("hostsim: %s: probe: %w", name, err)
	}
	bt.Probe = time.Since(t2)
	v := &VM{Name: name, Socket: socket, VM: vm, Driver: drv, Boot: bt}
	h.vms = append(h.vms, v)
	return v, nil
}

// RemoveVM closes v (driver, then VM) and destroys its device, on an
// in-process daemon too, so that guest RAM and whatever the device pinned
// are freed now rather than at Close.
func (h *Host) RemoveVM(ctx context.Context, v *VM) error {
	i := slices.Index(h.vms, v)
	if i < 0 {
		return fmt.Errorf("hostsim: VM %s is not on this host", v.Name)
	}
	h.vms = slices.Delete(h.vms, i, i+1)
	err := errors.Join(v.Driver.Close(), v.VM.Close())
	if derr := h.client.DestroyDevice(context.WithoutCancel(ctx), v.Name); derr != nil {
		err = errors.Join(err, fmt.Errorf("hostsim: destroying device %s: %w", v.Name, derr))
	}
	return err
}

// Shutdown stops the in-process daemon, leaving the VMs running (they see
// their devices go away). It is a no-op for an external daemon.
func (h *Host) Shutdown() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	err := <-h.done
	h.cancel = nil
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Close closes the VMs, destroys their devices on an external daemon,
// stops an in-process one and removes its run directory.
func (h *Host) Close() error {
	var errs []error
	for _, v := range h.vms {
		errs = append(errs, v.Driver.Close(), v.VM.Close())
		if h.dir == "" {
			errs = append(errs, h.client.DestroyDevice(h.base, v.Name))
		}
	}
	h.vms = nil
	h.client.Close()
	errs = append(errs, h.Shutdown())
	if h.ownDir {
		errs = append(errs, os.RemoveAll(h.dir))
	}
	return errors.Join(errs...)
}
