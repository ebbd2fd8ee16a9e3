package realvm_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/guestexec"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// execImage is the initramfs of exec-mode VMs: vstellar.ko, libvstellar,
// rdma-core's tools and perftest. Built once per test binary (the driver
// and provider come from the harness's cache when unchanged).
var execImage struct {
	once  sync.Once
	dir   string
	path  string
	build realvm.RDMABuild
	err   error
}

func rdmaImage(t *testing.T, env *realvm.Env) string {
	t.Helper()
	g := &execImage
	g.once.Do(func() {
		repo, err := realvm.RepoRoot()
		if err != nil {
			g.err = err
			return
		}
		if g.build, g.err = env.BuildRDMA(context.Background(), repo); g.err != nil {
			return
		}
		if g.dir, g.err = os.MkdirTemp("", "vstellar-exec-"); g.err != nil {
			return
		}
		g.path, g.err = env.BuildExecImage(context.Background(), g.dir, g.build)
	})
	if g.err != nil {
		t.Fatal(g.err)
	}
	return g.path
}

// execGuest is a real VM whose kernel drives the device (vstellar.ko)
// and which runs programs for the test.
type execGuest struct {
	*realvm.ExecGuest
	name string
}

// bootExecPair boots two exec-mode VMs, a (10.0.0.1) with a device on
// ra's daemon and b (10.0.0.2) on rb's, joined by a virtio-net link for
// the tools' TCP handshakes. The devices are in tenant (0: none).
func bootExecPair(t *testing.T, qemu string, ra, rb *rig, tenant uint32) (a, b *execGuest) {
	t.Helper()
	var devs [2]hotplug.Spec
	names := [2]string{"a", "b"}
	for i, r := range []*rig{ra, rb} {
		socket, err := r.host.CreateDevice(t.Context(), names[i], hostsim.VMOptions{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = hotplug.Spec{Socket: socket}
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	gs, err := ra.env.BootExecPair(ctx, qemu, rdmaImage(t, ra.env), t.TempDir(), devs, func(i int, cfg *realvm.Config) {
		cfg.Logger = ra.log.With("vm", names[i])
	})
	if err != nil {
		t.Fatal(err)
	}
	var eg [2]*execGuest
	for i, g := range gs {
		eg[i] = &execGuest{ExecGuest: g, name: names[i]}
		t.Cleanup(func() {
			g.Exec.Close()
			g.VM.Kill()
			g.VM.Wait()
			if t.Failed() {
				t.Logf("%s console:\n%s", names[i], g.VM.Log())
			}
		})
	}
	return eg[0], eg[1]
}

// run runs a shell command line in the guest and returns its output; a
// command that fails fails the test.
func (g *execGuest) run(t *testing.T, cmdline string) string {
	t.Helper()
	rep := g.sh(t, cmdline, time.Minute)
	if err := rep.Err(); err != nil {
		t.Fatalf("%s: %s: %v\n%s", g.name, cmdline, err, rep.Output())
	}
	return rep.Output()
}

// sh runs a shell command line in the guest, however it ends.
func (g *execGuest) sh(t *testing.T, cmdline string, limit time.Duration) guestexec.RunReply {
	t.Helper()
	rep, err := g.Exec.Run(t.Context(), guestexec.RunArgs{Path: "sh", Args: []string{"-c", cmdline}, TimeoutMs: int(limit.Milliseconds())})
	if err != nil {
		t.Fatalf("%s: %s: %v", g.name, cmdline, err)
	}
	return rep
}

// serverClient runs server in a and, once it listens, client in b (which
// names a's address); both must succeed. It returns their outputs.
func serverClient(t *testing.T, a, b *execGuest, server, client string, limit time.Duration) (srv, cli string) {
	t.Helper()
	s, c, err := realvm.ServerClient(t.Context(), a.ExecGuest, b.ExecGuest, server, client, limit)
	if err != nil {
		t.Fatalf("%s/%s: %v", a.name, b.name, err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("%s: %s: %v\n%s", a.name, server, err, s.Output())
	}
	if err := c.Err(); err != nil {
		t.Errorf("%s: %s %s: %v\n%s", b.name, client, a.Addr, err, c.Output())
	}
	if t.Failed() {
		t.FailNow()
	}
	return s.Output(), c.Output()
}

// perftestFigure is the column col of perftest's result row
// (realvm.PerftestColumns); a missing table or column is fatal.
func perftestFigure(t *testing.T, out, col string) float64 {
	t.Helper()
	cols, err := realvm.PerftestColumns(out)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := cols[col]
	if !ok {
		t.Fatalf("perftest's result has no %q: %v", col, cols)
	}
	return v
}
