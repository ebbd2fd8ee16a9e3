package realvm_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/netlab"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// crossTenant is the tenant of both cross-host devices: the fabric lets
// QPs of one tenant talk across hosts.
const crossTenant = 15

// Two hosts, each an in-process vstellard with its cross-host fabric in
// its own network namespace, joined by a veth, and one real VM on each
// (QEMU in the root namespace: the vhost-user sockets are paths). Every
// verbs scenario runs between them over the wire, every byte checked,
// the forged rkey and the doorbell MR included.
func TestVerbsAcrossHosts(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			p := newPair(t)
			a := rigOn(t, p.Hosts[0]).bootTenant(qemu, "xa", bootOptions{}, crossTenant)
			b := rigOn(t, p.Hosts[1]).bootTenant(qemu, "xb", bootOptions{}, crossTenant)
			want := "guest-ram"
			if q, _ := newRigEnv(t).QEMU(qemu); q.SharedMemory {
				want = "shmem"
			}
			for i, g := range []*guest{a, b} {
				if g.info.DoorbellMode != want {
					t.Errorf("%s: doorbells %q, want %q under %s", g.name, g.info.DoorbellMode, want, qemu)
				}
				// Host i owns the GID prefix fec0:0:i+1:i+1::/64.
				if g.info.GID[7] != byte(i+1) {
					t.Errorf("%s: GID %x is not in host %d's prefix", g.name, g.info.GID, i+1)
				}
				t.Logf("%s on host %d: ready %v after QEMU start (guest program: %.0f us to its first command)",
					g.name, i+1, g.ready, g.info.ReadyMicros)
			}
			rep, err := agent.RunVerbs(t.Context(), a.agent, b.agent, agent.RunOptions{
				Strict: true,
				Pause:  func(ctx context.Context) error { return pauseVM(ctx, b) },
			})
			var tab bytes.Buffer
			rep.WriteTable(&tab)
			t.Logf("%s across hosts (%s):\n%s", qemu, p.Where, tab.String())
			var st [2]remote.Stats
			for i, h := range p.Hosts {
				st[i] = h.Fabric().Stats()
				t.Logf("host %d fabric: %+v", i+1, st[i])
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			for _, sc := range agent.Scenarios() {
				if x, ok := rep.Result(sc.Name); !ok || !x.OK {
					t.Errorf("scenario %s: %+v (reported %v)", sc.Name, x, ok)
				}
			}
			// The traffic went over the wire: host 2 placed at least A's
			// WRITEs into B, host 1 got B's packets (the echoes, the
			// responses to A's READs and atomics).
			if x, _ := rep.Result("write-bandwidth"); st[1].BytesPlaced < x.Bytes || x.Bytes == 0 {
				t.Errorf("host 2 placed %d bytes, less than the %d of the bandwidth loop alone", st[1].BytesPlaced, x.Bytes)
			}
			if st[0].DataReceived == 0 || st[0].BytesPlaced == 0 {
				t.Errorf("host 1 received no data from host 2: %+v", st[0])
			}
		})
	}
}

// newPair starts two hosts in two network namespaces joined by a veth.
// CI runs as root: there the namespaces must exist.
func newPair(t *testing.T) *hostsim.Pair {
	t.Helper()
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs network namespaces: %v", err)
		}
		t.Skipf("no network namespaces (run as root): %v", err)
	}
	newRigEnv(t) // the harness first: without it, skip before any network
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := hostsim.NewPair(ctx, hostsim.PairOptions{Net: netlab.Options{Prefix: "vsrx", MTU: 9000}, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the hosts: %v", err)
		}
	})
	if p.Bed == nil {
		t.Fatalf("hosts on %s, want two namespaces", p.Where)
	}
	return p
}

// rigOn is a rig for a host made elsewhere (a Pair's), which closes it.
func rigOn(t *testing.T, h *hostsim.Host) *rig {
	t.Helper()
	env := realvm.Require(t)
	image(t, env)
	return &rig{t: t, env: env, host: h, log: testLogger(t)}
}

// bootTenant is boot with the device in tenant.
func (r *rig) bootTenant(qemu, name string, o bootOptions, tenant uint32) *guest {
	t := r.t
	t.Helper()
	socket, err := r.host.CreateDevice(t.Context(), name, hostsim.VMOptions{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	g := &guest{name: name, socket: socket}
	g.vm = r.start(qemu, name, o, hotplug.Spec{Socket: socket, Reconnect: o.reconnect})
	g.agent, g.info = r.dialAgent(g.vm, 2*time.Minute)
	g.ready = time.Since(g.vm.Started())
	return g
}
