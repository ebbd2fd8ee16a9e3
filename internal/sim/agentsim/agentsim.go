// Package agentsim runs the guest agent on simulated guests: an
// in-process vstellard with two simulated VMs (package hostsim), each
// device opened by the guest verbs library and served by an
// agent.Service over an in-memory pipe, with an agent.Client for each.
// The agent's tests run its scenarios on it; a benchmark can run the same
// scenarios here beside real VMs. A rig for tests and tools, not product.
package agentsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Options configure Start.
type Options struct {
	// GuestRAM makes the VMs' front-end offer no shared memory, so the
	// devices use the guest-RAM doorbell fallback (as under QEMU 10.2).
	GuestRAM bool
	// MemSize is each VM's RAM (default 64 MiB).
	MemSize uint64
	Log     *slog.Logger
	// Service tunes both agents (Ready and Doorbells are filled in).
	Service agent.Options
}

// Guest is one simulated VM with its device served by an agent.
type Guest struct {
	Name    string
	VM      *hostsim.VM
	Driver  *guestdriver.Device
	Service *agent.Service
	Client  *agent.Client
	served  chan error
}

// Pair is two guests on one in-process daemon.
type Pair struct {
	Host *hostsim.Host
	A, B *Guest
	// ctx is the agents' lifetime, cancelled at Close.
	ctx    context.Context
	cancel context.CancelFunc
}

// Start boots the host and two guests, "a" and "b", and serves each
// guest's device with an agent. Close undoes it.
func Start(ctx context.Context, o Options) (*Pair, error) {
	if o.MemSize == 0 {
		o.MemSize = 64 << 20
	}
	host, err := hostsim.New(ctx, hostsim.Options{Log: o.Log})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pair{Host: host, ctx: sctx, cancel: cancel}
	for _, name := range []string{"a", "b"} {
		g, err := startGuest(ctx, sctx, host, name, o)
		if err != nil {
			return nil, errors.Join(err, p.Close())
		}
		if name == "a" {
			p.A = g
		} else {
			p.B = g
		}
	}
	return p, nil
}

func startGuest(ctx, sctx context.Context, host *hostsim.Host, name string, o Options) (*Guest, error) {
	vo := hostsim.VMOptions{MemSize: o.MemSize}
	if o.GuestRAM {
		vo.Configure = func(c *vmsim.Config) {
			c.ProtocolFeatures = frontend.SupportedProtocolFeatures &^ (1 << frontend.ProtoShmem)
		}
	}
	vm, err := host.AddVM(ctx, name, vo)
	if err != nil {
		return nil, err
	}
	// The guest program re-probes with a transport that remembers the
	// doorbell area it registers: only the driver knows where it is.
	vm.Driver.Close()
	wt := &watchTransport{Transport: vmsim.NewTransport(vm.VM)}
	drv, err := guestdriver.Open(ctx, wt)
	if err != nil {
		return nil, fmt.Errorf("agentsim: %s: %w", name, err)
	}
	so := o.Service
	so.Ready, so.Doorbells = vm.Boot.Total(), wt.area
	if so.Log == nil {
		so.Log = o.Log
	}
	g := &Guest{Name: name, VM: vm, Driver: drv, Service: agent.NewService(drv, so), served: make(chan error, 1)}
	guestEnd, hostEnd := net.Pipe()
	go func() { g.served <- g.Service.Serve(sctx, guestEnd) }()
	g.Client = agent.NewClient(hostEnd)
	g.Client.Name = name
	return g, nil
}

// close stops the agent, destroys what it set up and closes the driver.
func (g *Guest) close(ctx context.Context) error {
	err := g.Client.Close()
	if serr := <-g.served; serr != nil && !errors.Is(serr, context.Canceled) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, g.Service.Close(ctx), g.Driver.Close())
}

// Close stops both agents and the host.
func (p *Pair) Close() error {
	var errs []error
	for _, g := range []*Guest{p.A, p.B} {
		if g != nil {
			errs = append(errs, g.close(p.ctx))
		}
	}
	p.cancel()
	errs = append(errs, p.Host.Close())
	return errors.Join(errs...)
}

// watchTransport remembers the doorbell area the driver registers with
// SET_DOORBELL_AREA in the guest-RAM fallback.
type watchTransport struct {
	guestdriver.Transport
	mu     sync.Mutex
	db     agent.Region
	haveDB bool
}

// Command implements guestdriver.Transport.
func (w *watchTransport) Command(ctx context.Context, req []byte, respLen uint32) ([]byte, error) {
	resp, err := w.Transport.Command(ctx, req, respLen)
	if err != nil {
		return resp, err
	}
	r, derr := abi.DecodeRequest(req)
	if derr != nil || r.Header.Opcode != abi.OpSetDoorbellArea {
		return resp, nil
	}
	var a abi.SetDoorbellAreaReq
	if st, _, derr := abi.DecodeResponse(resp); derr == nil && st == abi.StatusOK && abi.DecodePayload(r.Payload, &a) == nil {
		w.mu.Lock()
		w.db, w.haveDB = agent.Region{GPA: a.Addr, Size: a.Length}, true
		w.mu.Unlock()
	}
	return resp, nil
}

// area is the agent's Options.Doorbells.
func (w *watchTransport) area() (agent.Region, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.db, w.haveDB
}
