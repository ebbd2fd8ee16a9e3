package realvm_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// Unmodified RDMA programs in real VMs: the guest kernel drives the
// device with vstellar.ko, libibverbs loads libvstellar, and rdma-core's
// tools and perftest run between two VMs on one vstellard exactly as a
// user would run them (-g/-x 0: the device routes by GID).
func TestRDMATools(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			r := newRig(t, hostsim.Options{})
			a, b := bootExecPair(t, qemu, r, r, 0)
			checkDevice(t, a)
			checkDevice(t, b)
			runTools(t, r, r, a, b)
			// What the tools leave out: the ibv_wr_* API and inline data
			// (perftest uses them only on devices it knows), between two
			// QPs of one device.
			t.Run("loopback", func(t *testing.T) {
				out := a.run(t, "vstellar-loopback vstellar0")
				if !regexp.MustCompile(`(?m)^PASS$`).MatchString(out) {
					t.Fatalf("vstellar-loopback:\n%s", out)
				}
			})
			// Shared receive queues through libibverbs: many QPs on one
			// SRQ, the limit and last-WQE events, the refusals.
			t.Run("srq", func(t *testing.T) {
				out := a.run(t, "vstellar-srq vstellar0")
				if !regexp.MustCompile(`(?m)^PASS$`).MatchString(out) {
					t.Fatalf("vstellar-srq:\n%s", out)
				}
				t.Logf("vstellar-srq: %s", strings.Join(strings.Fields(out), " "))
			})
		})
	}
}

// The same programs between two hosts: two vstellards in two network
// namespaces joined by a veth, one VM on each; the traffic goes over the
// cross-host transport, and each device's GID 0 is in its host's prefix.
func TestRDMAToolsAcrossHosts(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			p := newPair(t)
			ra, rb := rigOn(t, p.Hosts[0]), rigOn(t, p.Hosts[1])
			a, b := bootExecPair(t, qemu, ra, rb, crossTenant)
			checkDevice(t, a)
			checkDevice(t, b)
			for i, g := range []*execGuest{a, b} {
				// Host i owns the GID prefix fec0:0:i+1:i+1::/64.
				gid := strings.TrimSpace(g.run(t, "cat /sys/class/infiniband/vstellar0/ports/1/gids/0"))
				if want := fmt.Sprintf("fec0:0000:%04x:%04x:", i+1, i+1); !strings.HasPrefix(gid, want) {
					t.Errorf("%s: GID 0 is %s, want it in %s:/64", g.name, gid, want)
				}
			}
			runTools(t, ra, rb, a, b)
			var st [2]remote.Stats
			for i, h := range p.Hosts {
				st[i] = h.Fabric().Stats()
			}
			if st[1].BytesPlaced == 0 || st[0].BytesPlaced == 0 {
				t.Errorf("the tools' traffic did not cross the wire: %+v / %+v", st[0], st[1])
			}
		})
	}
}

// checkDevice checks what ibv_devices, ibv_devinfo and rdma link say of
// the guest's device.
func checkDevice(t *testing.T, g *execGuest) {
	t.Helper()
	if out := g.run(t, "ibv_devices"); !strings.Contains(out, "vstellar0") {
		t.Errorf("%s: ibv_devices does not list vstellar0:\n%s", g.name, out)
	}
	info := g.run(t, "ibv_devinfo -v -d vstellar0")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`state:\s+PORT_ACTIVE`),
		regexp.MustCompile(`transport:\s+InfiniBand`),
		regexp.MustCompile(`GID\[\s*0\]:\s+[0-9a-f]{4}:`),
		regexp.MustCompile(`vendor_id:\s+0x1af4`),
	} {
		if !want.MatchString(info) {
			t.Errorf("%s: ibv_devinfo -v lacks %s:\n%s", g.name, want, info)
		}
	}
	if out := g.run(t, "rdma link"); !regexp.MustCompile(`link vstellar0/1 .*state ACTIVE physical_state LINK_UP`).MatchString(out) {
		t.Errorf("%s: rdma link: %s", g.name, out)
	}
}

// runTools runs rc_pingpong, perftest and ucx_perftest between a (server,
// on ra's daemon) and b (on rb's).
func runTools(t *testing.T, ra, rb *rig, a, b *execGuest) {
	t.Helper()
	for _, c := range []struct{ name, args string }{
		{"pingpong", "-g 0 -n 100"},
		{"pingpong-1B", "-g 0 -n 100 -s 1"},
		{"pingpong-64K", "-g 0 -n 50 -s 65536"},
		{"pingpong-events", "-g 0 -n 100 -e"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := serverClient(t, a, b, "ibv_rc_pingpong -d vstellar0 "+c.args, "ibv_rc_pingpong -d vstellar0 "+c.args, time.Minute)
			for _, out := range []string{srv, cli} {
				if !regexp.MustCompile(`\d+ iters in [\d.]+ seconds`).MatchString(out) {
					t.Errorf("no result line:\n%s", out)
				}
			}
			t.Logf("client: %s", lastLine(cli))
		})
	}
	for _, c := range []struct {
		tool, args string
		lat        bool
	}{
		{"ib_write_bw", "-s 65536 -n 200", false},
		{"ib_write_bw", "-s 1048576 -n 20", false},
		{"ib_write_lat", "-s 8 -n 200", true},
		{"ib_send_bw", "-s 65536 -n 200", false},
		// Four QPs taking their receives from one SRQ on the server.
		{"ib_send_bw", "-s 65536 -n 200 --use-srq -q 4", false},
		{"ib_read_bw", "-s 65536 -n 200", false},
		{"ib_atomic_bw", "-n 200", false},
	} {
		name := strings.TrimPrefix(c.tool, "ib_") + strings.ReplaceAll(strings.Fields(c.args)[0]+strings.Fields(c.args)[1], "-", "")
		if strings.Contains(c.args, "--use-srq") {
			name += "-srq"
		}
		t.Run(name, func(t *testing.T) {
			cmd := fmt.Sprintf("%s -d vstellar0 -x 0 %s", c.tool, c.args)
			_, cli := serverClient(t, a, b, cmd, cmd, 2*time.Minute)
			if c.lat {
				avg := perftestFigure(t, cli, "t_avg[usec]")
				if avg <= 0 {
					t.Fatalf("average latency %v us", avg)
				}
				t.Logf("%s: %.2f us typical, %.2f us average", cmd, perftestFigure(t, cli, "t_typical[usec]"), avg)
				return
			}
			avg := perftestFigure(t, cli, "BW average[MiB/sec]")
			if avg <= 0 {
				t.Fatalf("average bandwidth %v MiB/s", avg)
			}
			t.Logf("%s: %.2f MiB/s average", cmd, avg)
		})
	}
	// UCX over its rc_verbs transport: UCT's active messages (each side's
	// interface takes its receives from one SRQ) and RDMA WRITE, and UCP's
	// tagged messages as Open MPI's UCX layer sends them (eager below
	// 33 kB, rendezvous by RDMA READ above), with TCP only for UCP's
	// wire-up (UCX's default set adds ud_verbs, and the device has no UD).
	for _, c := range []struct {
		name, env, args string
		iters           int
	}{
		{"uct-am_lat", "", "-x rc_verbs -d vstellar0:1 -t am_lat -n 1000", 1000},
		{"uct-am_bw", "", "-x rc_verbs -d vstellar0:1 -t am_bw -D bcopy -s 4096 -n 1000", 1000},
		{"uct-put_bw", "", "-x rc_verbs -d vstellar0:1 -t put_bw -D zcopy -s 65536 -n 200", 200},
		{"ucp-tag_bw", "UCX_TLS=rc_verbs,tcp,self UCX_PROTO_INFO=y ", "-t tag_bw -s 65536 -n 200", 200},
	} {
		t.Run("ucx-"+c.name, func(t *testing.T) {
			srqs := func() [2]uint64 {
				return [2]uint64{
					deviceStatus(t, ra, a.name).Control.ByOpcode["create_srq"],
					deviceStatus(t, rb, b.name).Control.ByOpcode["create_srq"],
				}
			}
			before := srqs()
			cmd := c.env + realvm.UCXPerftest(c.args)
			_, cli := serverClient(t, a, b, cmd, cmd, 2*time.Minute)
			// UCP's protocol table names the transport of each range.
			if c.env != "" && (!strings.Contains(cli, "rendezvous zero-copy read") || !regexp.MustCompile(`\| rc_verbs/vstellar0:1 +\|`).MatchString(cli) ||
				regexp.MustCompile(`\| tcp/`).MatchString(cli)) {
				t.Errorf("UCP did not send over rc_verbs on vstellar0 alone:\n%s", cli)
			}
			res, err := realvm.UCXPerftestFinal(cli)
			if err != nil {
				t.Fatal(err)
			}
			if res.Iterations != c.iters || res.MsgRate <= 0 || res.Overall <= 0 {
				t.Fatalf("%s: %+v, want %d iterations at a message rate above 0", cmd, res, c.iters)
			}
			if after := srqs(); after[0] <= before[0] || after[1] <= before[1] {
				t.Errorf("CREATE_SRQ commands before %v, after %v: UCX did not take its receives from an SRQ on both devices", before, after)
			}
			t.Logf("%s: %d iterations, %.2f us median, %.2f MB/s, %.0f msg/s", cmd, res.Iterations, res.Median, res.MBps, res.MsgRate)
		})
	}
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}
