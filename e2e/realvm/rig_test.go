package realvm_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// guestImage is the initramfs every VM boots: the guest program as /init
// and the kernel's uio modules. Built once per test binary.
var guestImage struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if guestImage.dir != "" {
		os.RemoveAll(guestImage.dir)
	}
	os.Exit(code)
}

func image(t *testing.T, env *realvm.Env) string {
	t.Helper()
	g := &guestImage
	g.once.Do(func() {
		if g.dir, g.err = os.MkdirTemp("", "vstellar-guest-"); g.err != nil {
			return
		}
		g.path, g.err = env.BuildGuestImage(context.Background(), g.dir)
	})
	if g.err != nil {
		t.Fatal(g.err)
	}
	return g.path
}

// rig is one in-process vstellard and the real VMs attached to it.
type rig struct {
	t    *testing.T
	env  *realvm.Env
	host *hostsim.Host
	log  *slog.Logger
}

func newRig(t *testing.T, o hostsim.Options) *rig {
	t.Helper()
	env := realvm.Require(t)
	image(t, env)
	if o.Log == nil {
		o.Log = testLogger(t)
	}
	h, err := hostsim.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &rig{t: t, env: env, host: h, log: o.Log}
}

// guest is one real VM running the guest program, and its agent.
type guest struct {
	name   string
	socket string
	vm     *realvm.VM
	agent  *agent.Client
	info   agent.InfoReply
	// ready is from QEMU's start to the agent's first answer (the guest
	// program's own device-ready figure is in info).
	ready time.Duration
}

// bootOptions adjust a guest's VM.
type bootOptions struct {
	memory      int64
	allowReboot bool
	reconnect   time.Duration // the chardev's reconnect-ms (0: none)
	// configure, if set, adjusts the VM's configuration last.
	configure func(*realvm.Config)
}

// boot creates a device on the rig's daemon, starts a VM on qemu with
// the device cold-plugged, and waits for its agent.
func (r *rig) boot(qemu, name string, o bootOptions) *guest {
	t := r.t
	t.Helper()
	socket, err := r.host.CreateDevice(t.Context(), name, hostsim.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := &guest{name: name, socket: socket}
	g.vm = r.start(qemu, name, o, hotplug.Spec{Socket: socket, Reconnect: o.reconnect})
	g.agent, g.info = r.dialAgent(g.vm, 2*time.Minute)
	g.ready = time.Since(g.vm.Started())
	return g
}

func (r *rig) start(qemu, name string, o bootOptions, devs ...hotplug.Spec) *realvm.VM {
	t := r.t
	t.Helper()
	cfg, err := r.env.GuestConfig(qemu, image(t, r.env), devs...)
	if err != nil {
		t.Fatal(err)
	}
	if o.memory != 0 {
		cfg.Memory = o.memory
	}
	cfg.AllowReboot = o.allowReboot
	cfg.Logger = r.log.With("vm", name)
	if o.configure != nil {
		o.configure(&cfg)
	}
	vm, err := realvm.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm.Kill()
		vm.Wait()
		if t.Failed() {
			t.Logf("%s console:\n%s", name, vm.Log())
		}
	})
	return vm
}

// dialAgent connects to the VM's agent and waits for its first answer.
func (r *rig) dialAgent(vm *realvm.VM, within time.Duration) (*agent.Client, agent.InfoReply) {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	c, info, err := realvm.DialAgent(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, info
}

// testLogger sends the daemon's warnings and errors to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func newRigEnv(t *testing.T) *realvm.Env {
	t.Helper()
	return realvm.Require(t)
}

// pauseVM stops the guest's vCPUs and rings for a moment.
func pauseVM(ctx context.Context, g *guest) error { return g.vm.Pause(ctx, 200*time.Millisecond) }

// qemusWhere returns the harness's QEMUs that can run a test, and logs
// why each other one cannot: a limit of that QEMU, not of the device.
func qemusWhere(t *testing.T, can func(realvm.QEMU) bool, why string) []string {
	t.Helper()
	env := newRigEnv(t)
	var names []string
	for _, n := range env.QEMUNames() {
		if q, _ := env.QEMU(n); can(q) {
			names = append(names, n)
		} else {
			t.Logf("not under %s: %s", n, why)
		}
	}
	if len(names) == 0 {
		t.Fatalf("no QEMU of the harness can run this test")
	}
	return names
}
