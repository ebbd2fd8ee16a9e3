package realvm_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/guestexec"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// Hostile guest programs against the kernel driver (issue 16): a process
// in VM a posts WQEs with SGEs outside its MRs, forges rkeys, registers
// MRs over the device's mappings, overruns a CQ, and is killed in the
// middle of a transfer (guest-driver/tools/vstellar-hostile.c, which
// checks what the process itself must see). After each, the test checks
// that the process left nothing behind in the guest kernel (`rdma res`)
// or in the device (the daemon's object counts), that the guest kernel
// logged no oops or warning, and that vm b still talks to vm a's device.
func TestRDMAHostile(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			r := newRig(t, hostsim.Options{})
			a, b := bootExecPair(t, qemu, r, r, 0)
			checkDevice(t, a)
			base := hostileState(t, r, a)
			t.Logf("before: %s; device objects %+v", base.res, base.objects)
			var klog [2]kernelLog
			klog[0].check(t, a) // the boot's messages are not the programs'
			klog[1].check(t, b)
			if t.Failed() {
				t.FailNow()
			}
			for _, c := range hostileCases {
				t.Run(c.name, func(t *testing.T) {
					before := deviceStatus(t, r, a.name)
					rep := a.sh(t, c.cmd, 5*time.Minute)
					t.Logf("%s:\n%s", c.cmd, rep.Output())
					if err := c.check(rep, base); err != nil {
						t.Errorf("%s: %v", c.cmd, err)
					}
					after := deviceStatus(t, r, a.name)
					t.Logf("device a: %d WQEs, %d CQEs, %d error CQEs, %d CQ overflows, %d bytes sent; %d commands, %d failed",
						after.Traffic.WQEs-before.Traffic.WQEs, after.Traffic.CQEs-before.Traffic.CQEs,
						after.Traffic.ErrorCQEs-before.Traffic.ErrorCQEs, after.Traffic.CQOverflows-before.Traffic.CQOverflows,
						after.Traffic.BytesSent-before.Traffic.BytesSent,
						after.Control.Commands-before.Control.Commands, after.Control.Failed-before.Control.Failed)
					if c.device != nil {
						if err := c.device(before, after); err != nil {
							t.Errorf("the device's counters: %v (before %+v, after %+v)", err, before.Traffic, after.Traffic)
						}
					}
					checkRecovered(t, r, a, b, base, &klog)
				})
			}
		})
	}
}

// hostileCase is a run of vstellar-hostile in vm a, what it must print,
// and what the device must have counted meanwhile.
type hostileCase struct {
	name, cmd string
	check     func(rep guestexec.RunReply, base guestState) error
	device    func(before, after api.DeviceStatus) error
}

// passed wants vstellar-hostile's PASS line for sub and exit status 0.
func passed(sub string) func(guestexec.RunReply, guestState) error {
	return func(rep guestexec.RunReply, _ guestState) error {
		if err := rep.Err(); err != nil {
			return err
		}
		if want := "vstellar-hostile " + sub + ": PASS"; !strings.Contains(rep.Stdout, want) {
			return fmt.Errorf("no %q line", want)
		}
		return nil
	}
}

// errorCQEs wants at least n more error completions from the device.
func errorCQEs(n uint64) func(before, after api.DeviceStatus) error {
	return func(before, after api.DeviceStatus) error {
		if d := after.Traffic.ErrorCQEs - before.Traffic.ErrorCQEs; d < n {
			return fmt.Errorf("%d error CQEs, want at least %d", d, n)
		}
		return nil
	}
}

func cqOverflows(before, after api.DeviceStatus) error {
	if d := after.Traffic.CQOverflows - before.Traffic.CQOverflows; d < 1 {
		return fmt.Errorf("%d CQ overflows, want at least 1", d)
	}
	return nil
}

// killedStream starts a loopback WRITE/READ stream, waits until it runs,
// shows `rdma res` while it does, and SIGKILLs it three seconds later.
const killedStream = `vstellar-hostile stream 30 >/tmp/stream.out 2>&1 & p=$!
i=0
while [ $i -lt 600 ]; do
	case "$(cat /tmp/stream.out)" in *running*) break ;; esac
	sleep 0.1; i=$((i+1))
done
echo "== rdma res while it runs"; rdma res
sleep 3; kill -9 $p; wait $p; echo "== exit=$?"
cat /tmp/stream.out`

var hostileCases = []hostileCase{
	// 6 sends with a bad local SGE: LOC_PROT_ERR, then a flushed WQE each.
	{"sge-outside", "vstellar-hostile sge-outside", passed("sge-outside"), errorCQEs(6)},
	// 9 requests with a forged, zero, stale, local-only or short rkey:
	// REM_ACCESS_ERR.
	{"forged-rkey", "vstellar-hostile forged-rkey", passed("forged-rkey"), errorCQEs(9)},
	{"doorbell-mr", "vstellar-hostile doorbell-mr", passed("doorbell-mr"), nil},
	{"cq-overrun", "vstellar-hostile cq-overrun", passed("cq-overrun"), cqOverflows},
	// The same, leaving the QP in ERR and the CQ in error for the kernel
	// to destroy when the process exits.
	{"cq-overrun-left", "vstellar-hostile -n cq-overrun", passed("cq-overrun"), cqOverflows},
	{"stream-killed", killedStream, func(rep guestexec.RunReply, base guestState) error {
		out := rep.Output()
		if !strings.Contains(out, "vstellar-hostile stream: running") {
			return fmt.Errorf("the stream never ran")
		}
		if !strings.Contains(out, "== exit=137") {
			return fmt.Errorf("the stream did not die of SIGKILL")
		}
		if strings.Contains(out, "FAIL") {
			return fmt.Errorf("the stream failed before it was killed")
		}
		if running := resLine(out); running == "" || running == base.res {
			return fmt.Errorf("rdma res shows no object of the running stream")
		}
		return nil
	}, func(before, after api.DeviceStatus) error {
		if after.Traffic.BytesSent == before.Traffic.BytesSent {
			return fmt.Errorf("the stream moved no data")
		}
		return nil
	}},
}

// guestState is what a guest's device holds when no program runs.
type guestState struct {
	res     string // rdma res's line of vstellar0
	objects api.ObjectCounts
}

func hostileState(t *testing.T, r *rig, g *execGuest) guestState {
	t.Helper()
	s := guestState{res: resLine(g.run(t, "rdma res"))}
	if s.res == "" {
		t.Fatalf("%s: rdma res does not show vstellar0", g.name)
	}
	if st := deviceStatus(t, r, g.name); st.Objects != nil {
		s.objects = *st.Objects
	} else {
		t.Fatalf("the daemon shows no objects of device %s", g.name)
	}
	return s
}

// resLine is the line of vstellar0 in rdma res's summary ("0: vstellar0:
// pd 1 cq 2 qp 2 cm_id 0 mr 1 ctx 1 srq 0").
func resLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "vstellar0:") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func deviceStatus(t *testing.T, r *rig, name string) api.DeviceStatus {
	t.Helper()
	st, err := r.host.Client().DeviceStatus(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Traffic == nil {
		st.Traffic = &api.TrafficStats{}
	}
	if st.Control == nil {
		st.Control = &api.ControlStats{}
	}
	return st
}

// kernelTrouble matches what a kernel logs when something went wrong in
// it: oopses, BUG and WARNING splats, and the sanitizers' reports.
var kernelTrouble = regexp.MustCompile(`BUG:|WARNING:|Oops|Call Trace|general protection fault|kernel NULL pointer|refcount_t:|list_(add|del) corruption|UBSAN|KASAN|blocked for more than|stack-protector`)

// kernelLog reads a guest's kernel log a piece at a time.
type kernelLog struct{ seen int }

// check fails the test on trouble in the lines logged since the last call.
func (k *kernelLog) check(t *testing.T, g *execGuest) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(g.run(t, "dmesg"), "\n"), "\n")
	if len(lines) < k.seen {
		k.seen = 0 // the ring wrapped
	}
	var trouble []string
	for _, l := range lines[k.seen:] {
		if kernelTrouble.MatchString(l) {
			trouble = append(trouble, l)
		}
	}
	k.seen = len(lines)
	if len(trouble) > 0 {
		t.Errorf("%s's kernel log:\n%s", g.name, strings.Join(trouble, "\n"))
	}
}

// checkRecovered checks, after a hostile program ended in a, that it left
// nothing in a's kernel or device, that a's kernel logged no trouble, and
// that ibv_rc_pingpong between b and a still works.
func checkRecovered(t *testing.T, r *rig, a, b *execGuest, base guestState, klog *[2]kernelLog) {
	t.Helper()
	// The kernel frees a dead process's objects as its file closes; give
	// it a moment all the same.
	var now guestState
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		now = hostileState(t, r, a)
		if now == base || time.Now().After(deadline) {
			break
		}
	}
	if now.res != base.res {
		t.Errorf("%s: rdma res: %s, was %s", a.name, now.res, base.res)
	}
	if now.objects != base.objects {
		t.Errorf("the daemon's objects of %s: %+v, was %+v", a.name, now.objects, base.objects)
	}
	for _, kind := range []string{"qp", "cq", "mr", "pd"} {
		if out := a.run(t, "rdma res show "+kind); strings.Contains(out, "vstellar-hosti") { // comm is 15 bytes
			t.Errorf("%s: rdma res show %s still lists the program's objects:\n%s", a.name, kind, out)
		}
	}
	klog[0].check(t, a)
	srv, cli := serverClient(t, a, b, "ibv_rc_pingpong -d vstellar0 -g 0 -n 50", "ibv_rc_pingpong -d vstellar0 -g 0 -n 50", time.Minute)
	for _, out := range []string{srv, cli} {
		if !regexp.MustCompile(`\d+ iters in [\d.]+ seconds`).MatchString(out) {
			t.Errorf("ibv_rc_pingpong between %s and %s: no result line:\n%s", b.name, a.name, out)
		}
	}
	klog[1].check(t, b)
}
