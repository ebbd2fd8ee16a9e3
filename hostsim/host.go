package hostsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/vstellar/vstellar/daemon"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/vmm"
)

// Host is an in-process daemon and the VMs attached to it.
type Host struct {
	log    *slog.Logger
	api    string
	client *daemon.Client
	dir    string // run dir we created, removed on Close
	cancel context.CancelFunc
	done   chan error
	vms    []*VM
}

// Options configure a Host.
type Options struct {
	// API is the management socket of a running vstellard; empty starts
	// one in-process in a temporary run directory.
	API string
	Log *slog.Logger
}

// New starts (or connects to) a daemon.
func New(ctx context.Context, o Options) (*Host, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{log: log, api: o.API}
	if h.api == "" {
		dir, err := os.MkdirTemp("", "vstellar-host-")
		if err != nil {
			return nil, err
		}
		cfg := daemon.DefaultConfig()
		cfg.RunDir = dir
		cfg.Factory = daemon.StellarDevice
		m, err := daemon.New(cfg, log)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("hostsim: %w", err)
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- m.Run(rctx) }()
		select {
		case <-m.Ready():
		case err := <-done:
			cancel()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("hostsim: daemon: %w", err)
		case <-ctx.Done():
			cancel()
			<-done
			os.RemoveAll(dir)
			return nil, ctx.Err()
		}
		h.dir, h.cancel, h.done, h.api = dir, cancel, done, m.APISocket()
	}
	h.client = daemon.NewClient(h.api)
	return h, nil
}

// API is the daemon's management socket.
func (h *Host) API() string { return h.api }

// RunDir is the in-process daemon's run directory ("" for an external one).
func (h *Host) RunDir() string { return h.dir }

// Client is a management API client.
func (h *Host) Client() *daemon.Client { return h.client }

// VM is a simulated VM with its vStellar device opened by the driver.
type VM struct {
	Name   string
	Socket string
	VM     *vmm.VM
	Driver *guestdriver.Device
}

// VMOptions configure AddVM.
type VMOptions struct {
	// MemSize is guest RAM in bytes (a 2 MiB multiple; default 1 GiB).
	MemSize uint64
	// Configure may adjust the VM's configuration (features, protocol
	// features) before it boots.
	Configure func(*vmm.Config)
}

// AddVM creates a device named name, boots a VM against it to DRIVER_OK
// and opens the device with the guest driver.
func (h *Host) AddVM(ctx context.Context, name string, o VMOptions) (*VM, error) {
	if o.MemSize == 0 {
		o.MemSize = 1 << 30
	}
	info, err := h.client.CreateDevice(ctx, daemon.DeviceSpec{Name: name})
	if err != nil {
		return nil, fmt.Errorf("hostsim: creating device %s: %w", name, err)
	}
	v, err := h.boot(ctx, name, info.Socket, o)
	if err != nil {
		// Give the name back (an external daemon keeps it otherwise).
		if derr := h.client.DestroyDevice(context.WithoutCancel(ctx), name); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	h.vms = append(h.vms, v)
	return v, nil
}

// boot starts a VM on socket and opens its device.
func (h *Host) boot(ctx context.Context, name, socket string, o VMOptions) (*VM, error) {
	cfg := guestdriver.VMConfig(socket, o.MemSize)
	cfg.Logger = h.log
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	vm, err := vmm.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hostsim: %s: %w", name, err)
	}
	if err := vm.Start(ctx); err != nil {
		vm.Close()
		return nil, fmt.Errorf("hostsim: %s: DRIVER_OK: %w", name, err)
	}
	drv, err := guestdriver.Open(ctx, guestdriver.NewVMTransport(vm))
	if err != nil {
		vm.Close()
		return nil, fmt.Errorf("hostsim: %s: probe: %w", name, err)
	}
	return &VM{Name: name, Socket: socket, VM: vm, Driver: drv}, nil
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
			errs = append(errs, h.client.DestroyDevice(context.Background(), v.Name))
		}
	}
	h.vms = nil
	h.client.Close()
	errs = append(errs, h.Shutdown())
	if h.dir != "" {
		errs = append(errs, os.RemoveAll(h.dir))
	}
	return errors.Join(errs...)
}
