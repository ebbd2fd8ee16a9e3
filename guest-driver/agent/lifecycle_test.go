package agent_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
)

// lifecycleGuest is one simulated VM whose agent has the life-cycle
// hooks: Reopen probes the device again on the VM's transport, Reboot
// records that it ran.
type lifecycleGuest struct {
	host     *hostsim.Host
	svc      *agent.Service
	c        *agent.Client
	rebooted chan struct{}
}

func startLifecycleGuest(t *testing.T, ctx context.Context, hooks bool) *lifecycleGuest {
	t.Helper()
	h, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	vm, err := h.AddVM(ctx, "a", hostsim.VMOptions{MemSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g := &lifecycleGuest{host: h, rebooted: make(chan struct{})}
	var o agent.Options
	if hooks {
		dev := vm.Driver
		o.Reopen = func(ctx context.Context) (*guestdriver.Device, error) {
			dev.Close()
			d, err := guestdriver.Open(ctx, vmsim.NewTransport(vm.VM))
			dev = d
			return d, err
		}
		o.Reboot = func() { close(g.rebooted) }
	}
	g.svc = agent.NewService(vm.Driver, o)
	guestEnd, hostEnd := net.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- g.svc.Serve(sctx, guestEnd) }()
	g.c = agent.NewClient(hostEnd)
	t.Cleanup(func() {
		g.c.Close()
		cancel()
		<-served
		g.svc.Close(context.WithoutCancel(ctx))
	})
	return g
}

func (g *lifecycleGuest) objects(t *testing.T, ctx context.Context) int {
	t.Helper()
	st, err := g.host.Client().DeviceStatus(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o := st.Objects
	return o.PDs + o.CQs + o.QPs + o.MRs
}

// Reopen probes the device again: what Setup made is dropped by the
// probe's RESET_STATE, and the agent serves the new device.
func TestReopenServesTheNewDevice(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	g := startLifecycleGuest(t, ctx, true)
	if _, err := g.c.Setup(ctx, agent.SetupArgs{BufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if n := g.objects(t, ctx); n != 5 {
		t.Fatalf("%d objects after Setup, want 5 (PD, 2 CQs, QP, MR)", n)
	}
	if err := g.c.Reopen(ctx); err != nil {
		t.Fatal(err)
	}
	if n := g.objects(t, ctx); n != 0 {
		t.Errorf("%d objects after Reopen, want 0", n)
	}
	info, err := g.c.Info(ctx)
	if err != nil || info.SetUp {
		t.Fatalf("Info after Reopen: %+v, %v", info, err)
	}
	if _, err := g.c.Setup(ctx, agent.SetupArgs{BufSize: 64 << 10}); err != nil {
		t.Fatalf("Setup after Reopen: %v", err)
	}
}

// Reboot runs the guest program's hook only after the host has its
// reply; without hooks both requests are refused.
func TestRebootAfterReply(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	g := startLifecycleGuest(t, ctx, true)
	if err := g.c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.rebooted:
	case <-time.After(10 * time.Second):
		t.Fatal("the reboot hook never ran")
	}

	plain := startLifecycleGuest(t, ctx, false)
	for name, err := range map[string]error{"Reboot": plain.c.Reboot(ctx), "Reopen": plain.c.Reopen(ctx)} {
		var re *agent.RemoteError
		if !errors.As(err, &re) || !strings.Contains(re.Msg, "does not offer") {
			t.Errorf("%s without a hook: %v", name, err)
		}
	}
}

// Forget drops the device without a command: later calls fail cleanly.
func TestForgetDropsTheDevice(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	g := startLifecycleGuest(t, ctx, false)
	if _, err := g.c.Setup(ctx, agent.SetupArgs{BufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	g.svc.Forget()
	if n := g.objects(t, ctx); n != 5 {
		t.Errorf("%d objects after Forget, want the 5 left on the device", n)
	}
	if _, err := g.c.Info(ctx); err == nil || !strings.Contains(err.Error(), "no device") {
		t.Errorf("Info after Forget: %v", err)
	}
	if _, err := g.c.Setup(ctx, agent.SetupArgs{}); err == nil || !strings.Contains(err.Error(), "no device") {
		t.Errorf("Setup after Forget: %v", err)
	}
	if err := g.svc.Close(ctx); err != nil {
		t.Errorf("Close after Forget: %v", err)
	}
}
