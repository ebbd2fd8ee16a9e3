package realvm_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/vhosttrace"
)

// traceRecordEnv set to 1 makes TestQEMUMessageTrace rewrite the golden
// traces instead of checking real QEMU against them.
const traceRecordEnv = "VSTELLAR_RECORD"

// traceLogEnv names a directory for the daemon's whole debug log.
const traceLogEnv = "VSTELLAR_TRACE_LOG"

// traceDir holds the golden traces, beside the simulated VMM whose tests
// replay them (internal/sim/vmsim/trace_test.go).
const traceDir = "../../internal/sim/vmsim/testdata"

func tracePath(qemu string) string { return filepath.Join(traceDir, "trace-"+qemu+".txt") }

// The phases of a golden trace, in order. Three VMs: one is started (to
// the guest program's agent), paused (QMP stop), resumed (cont) and shut
// down (quit); one is hot-unplugged (device_del, chardev-remove); one is
// reset (QMP system_reset: the guest boots again and reopens the device)
// and then rebooted by the guest program (the agent's Reboot).
var tracePhases = []string{"start", "stop", "cont", "quit", "unplug", "system_reset", "reboot"}

// TestQEMUMessageTrace records, for each QEMU, the vhost-user requests it
// sends to vstellard through a VM's life and checks them against
// internal/sim/vmsim/testdata/trace-QEMU.txt (VSTELLAR_RECORD=1 rewrites
// the file), so a QEMU that changes its sequence is noticed, and the
// simulated VMM (package vmsim) has a recording to follow.
func TestQEMUMessageTrace(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			tl := &traceLog{}
			next := testLogger(t).Handler()
			if dir := os.Getenv(traceLogEnv); dir != "" {
				// The daemon's whole log, for when a phase goes wrong.
				f, err := os.Create(filepath.Join(dir, "vstellard-"+qemu+".log"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				next = slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})
			}
			r := newRig(t, hostsim.Options{Log: slog.New(&traceHandler{log: tl, next: next})})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("recorded since the last phase:\n%s", tl.dump())
				}
			})
			got := map[string][]string{}
			var notes []string
			cut := func(dev, phase string) []string {
				t.Helper()
				lines, n := tl.settle(t.Context(), dev)
				got[phase] = lines
				notes = append(notes, n...)
				return lines
			}
			// crashed records QEMU's end in a phase if it died there: a
			// bug of QEMU's, kept in the golden trace so a QEMU that
			// fixes it is noticed too. (A guest program whose device
			// is unplugged powers the VM off: QEMU's exit status 0 is
			// no crash.)
			crashed := func(phase string, vm *realvm.VM) bool {
				t.Helper()
				ok, werr := vm.Exited()
				if !ok || werr == nil {
					return ok
				}
				got[phase] = append(got[phase], fmt.Sprintf("QEMU exited (%v)", werr))
				for _, l := range strings.Split(vm.Stderr(), "\n") {
					if l != "" {
						notes = append(notes, fmt.Sprintf("%s: QEMU's stderr: %s", phase, l))
					}
				}
				t.Logf("%s exited in phase %s (%v); console:\n%s\nstderr:\n%s", qemu, phase, werr, tailLines(vm.Log(), 10), vm.Stderr())
				return true
			}
			sameStart := func(dev string, lines []string) {
				t.Helper()
				if !traceEqual(got["start"], lines) {
					t.Errorf("%s's start differs from the first VM's:\n%s", dev, vhosttrace.Diff(got["start"], lines))
				}
			}

			vm := r.traceVM(qemu, "t1")
			cut("t1", "start")
			r.traceQMP(vm, "stop")
			cut("t1", "stop")
			r.traceQMP(vm, "cont")
			cut("t1", "cont")
			if err := vm.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			cut("t1", "quit")

			// The guest's pciehp lets the device go.
			vm = r.traceVM(qemu, "t2")
			sameStart("t2", cut("t2", "start"))
			q, err := vm.QMP(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			_, err = q.Detach(ctx, "vst0")
			cancel()
			q.Close()
			if err != nil && !exitedNow(vm) {
				t.Fatalf("hot-unplug: %v\nconsole:\n%s", err, vm.Log())
			}
			cut("t2", "unplug")
			if crashed("unplug", vm) {
				// Nothing more to see of this VM.
			} else if err := vm.Stop(t.Context()); err != nil {
				t.Fatal(err)
			} else if rest, _ := tl.settle(t.Context(), "t2"); len(rest) > 0 {
				t.Errorf("requests after the device was unplugged: %v", rest)
			}

			// A machine reset, as a guest's reboot ends in; QEMU 11.1.3
			// does not survive it with the doorbells mapped (see the
			// golden trace), which is recorded as such.
			vm = r.traceVM(qemu, "t3")
			sameStart("t3", cut("t3", "start"))
			r.traceQMP(vm, "system_reset")
			if _, err := vm.WaitSerial(t.Context(), realvm.AgentServing); err != nil && !exitedNow(vm) {
				t.Fatalf("guest did not come back after system_reset: %v", err)
			}
			cut("t3", "system_reset")
			if !crashed("system_reset", vm) {
				r.traceReboot(vm)
				cut("t3", "reboot")
				if !crashed("reboot", vm) {
					if err := vm.Stop(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
			}

			path := tracePath(qemu)
			if os.Getenv(traceRecordEnv) == "1" {
				if err := os.WriteFile(path, []byte(formatTrace(qemu, got, notes)), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", path)
				return
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (record it with %s=1)", err, traceRecordEnv)
			}
			want, err := vhosttrace.Parse(string(b))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, p := range tracePhases {
				if _, ok := want[p]; !ok {
					t.Errorf("%s has no phase %s (%s=1 records it)", path, p, traceRecordEnv)
				} else if !traceEqual(want[p], got[p]) {
					t.Errorf("%s %s: QEMU's requests differ from %s (%s=1 rewrites it):\n%s",
						qemu, p, path, traceRecordEnv, vhosttrace.Diff(want[p], got[p]))
				}
			}
		})
	}
}

// traceConfigReads stands for a run of GET_CONFIG requests: each guest
// read of config space is one, so how many there are, and where they fall
// among QEMU's own requests, is the guest program's doing.
const traceConfigReads = "GET_CONFIG *"

// traceEqual compares two phases leaving the config reads out, but not
// whether there were any.
func traceEqual(want, got []string) bool {
	w, wr := withoutConfigReads(want)
	g, gr := withoutConfigReads(got)
	return wr == gr && slices.Equal(w, g)
}

func withoutConfigReads(lines []string) (rest []string, reads bool) {
	for _, l := range lines {
		if l == traceConfigReads {
			reads = true
			continue
		}
		rest = append(rest, l)
	}
	return rest, reads
}

// exitedNow waits a moment for QEMU to be seen gone, if it is going.
func exitedNow(vm *realvm.VM) bool {
	select {
	case <-vm.Done():
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// traceVM creates device name and starts a q35 VM on qemu with the device
// cold-plugged behind a PCIe root port (so it can be unplugged), then
// waits for the guest program's agent to serve.
func (r *rig) traceVM(qemu, name string) *realvm.VM {
	t := r.t
	t.Helper()
	socket, err := r.host.CreateDevice(t.Context(), name, hostsim.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The root port must come before the device on QEMU's command line,
	// so the device goes in as arguments after it, not as Config.Devices.
	q, err := r.env.QEMU(qemu)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := hotplug.DeviceArgs(hotplug.Spec{ID: "vst0", Socket: socket, VirtioID: q.VirtioID, Bus: "rp0"})
	if err != nil {
		t.Fatal(err)
	}
	vm := r.start(qemu, name, bootOptions{
		allowReboot: true, // system_reset reboots instead of ending QEMU
		configure: func(cfg *realvm.Config) {
			cfg.Args = append(append(cfg.Args, "-device", "pcie-root-port,id=rp0,chassis=1"), dev...)
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := vm.WaitSerial(ctx, realvm.AgentServing); err != nil {
		t.Fatal(err)
	}
	return vm
}

// traceReboot has the guest program reboot the guest (an abrupt reboot,
// without the driver's shutdown) and waits for its agent to serve again.
func (r *rig) traceReboot(vm *realvm.VM) {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	conn, err := vm.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := agent.NewClient(conn)
	defer c.Close()
	if err := c.Reboot(ctx); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if _, err := vm.WaitSerial(ctx, realvm.AgentServing); err != nil && !exitedNow(vm) {
		t.Fatalf("guest did not come back after its reboot: %v", err)
	}
}

// traceQMP runs one argument-less QMP command.
func (r *rig) traceQMP(vm *realvm.VM, cmd string) {
	t := r.t
	t.Helper()
	q, err := vm.QMP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Execute(t.Context(), cmd, nil); err != nil {
		t.Fatalf("QMP %s: %v", cmd, err)
	}
}

// traceLog is what the daemon logged per device, reduced to the lines of
// a trace: one per front-end request ("GET_FEATURES", "GET_CONFIG failed",
// "ADD_MEM_REG shmem" for a region the daemon recognised as its own
// shared memory), "connected" and "disconnected" for the connection, and
// notes ("# ...") for device events, which run on goroutines of their own
// and so have no fixed place among the requests.
type traceLog struct {
	mu   sync.Mutex
	devs map[string]*traceDev
}

type traceDev struct {
	lines []string // since the last settle
	notes []string
	last  time.Time
	echo  string // the next request's region is shared memory (its gpa)
}

func (l *traceLog) dev(name string) *traceDev {
	if l.devs == nil {
		l.devs = map[string]*traceDev{}
	}
	d := l.devs[name]
	if d == nil {
		d = &traceDev{}
		l.devs[name] = d
	}
	return d
}

// traceQuiet is how long a device's log must stay still before a phase is
// taken as over. QEMU sends a phase's requests back to back; the guest
// program reads config space only while it starts the device.
const traceQuiet = 1500 * time.Millisecond

// settle waits until device name has logged nothing for traceQuiet, and
// for at least traceQuiet (a disconnect is logged a little after QEMU has
// gone), and returns (and forgets) its lines and notes so far.
func (l *traceLog) settle(ctx context.Context, name string) (lines, notes []string) {
	called := time.Now()
	for {
		l.mu.Lock()
		d := l.dev(name)
		if time.Since(d.last) >= traceQuiet && time.Since(called) >= traceQuiet || ctx.Err() != nil {
			lines, notes = collapseConfigReads(d.lines), d.notes
			d.lines, d.notes = nil, nil
			l.mu.Unlock()
			return lines, notes
		}
		l.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
}

// collapseConfigReads turns each run of GET_CONFIG into one line.
func collapseConfigReads(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l == "GET_CONFIG" {
			l = traceConfigReads
		}
		if l == traceConfigReads && len(out) > 0 && out[len(out)-1] == l {
			continue
		}
		out = append(out, l)
	}
	return out
}

// dump shows what every device logged since its last settle.
func (l *traceLog) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for name, d := range l.devs {
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(d.lines, " "))
		for _, n := range d.notes {
			fmt.Fprintf(&b, "  # %s\n", n)
		}
	}
	return b.String()
}

func (l *traceLog) record(dev string, r slog.Record) {
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.dev(dev)
	add := func(s string) {
		d.lines = append(d.lines, s)
		d.last = time.Now()
	}
	note := func(s string) {
		d.notes = append(d.notes, dev+": "+s)
		d.last = time.Now()
	}
	switch r.Message {
	case "request":
		s := attrs["req"]
		if d.echo != "" {
			s += " shmem"
			note(fmt.Sprintf("%s of the shared-memory BAR at %s (SHMEM_MAP's file)", attrs["req"], d.echo))
			d.echo = ""
		}
		add(s)
	case "request failed":
		add(attrs["req"] + " failed")
		note(attrs["req"] + " failed: " + attrs["err"])
	case "shared memory region reported as guest memory; kept out of the memory table":
		d.echo = attrs["gpa"] + "+" + attrs["size"]
	case "front-end connected":
		add("connected")
	case "front-end disconnected", "front-end connection ended with an error":
		add("disconnected")
	case "front-end connection closed by the daemon":
		add("closed by the daemon")
	case "device active":
		if m, ok := attrs["doorbells"]; ok { // the device model's, not vhost's
			note("device active, doorbells " + m)
		}
	case "device inactive":
		note("device inactive, reset " + attrs["reset"])
	case "doorbell region not mapped; using the guest-RAM fallback":
		note("SHMEM_MAP failed: " + attrs["err"])
	}
}

// traceHandler feeds a traceLog with every record at any level and hands
// the rest to next (the test log) as next's level says.
type traceHandler struct {
	log    *traceLog
	device string
	next   slog.Handler
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.device != "" {
		h.log.record(h.device, r)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		if a.Key == "device" {
			c.device = a.Value.String()
		}
	}
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *traceHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// formatTrace writes a golden trace: a header, then "[phase]" and one line
// per request. Lines starting with # are notes: written when recording,
// never compared.
func formatTrace(qemu string, phases map[string][]string, notes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# The vhost-user requests %s sent to vstellard, one per line, as the daemon
# logged them: e2e/realvm TestQEMUMessageTrace records them (%s=1 rewrites
# this file) and checks QEMU against them; vmsim's TestTraceMatchesQEMU checks
# the simulated VMM against them.
#   NAME          a front-end request; "NAME failed": the daemon refused it
#   NAME shmem    a memory region backed by the file the device mapped with
#                 SHMEM_MAP (QEMU reports its shared-memory BAR as memory)
#   %s  one or more GET_CONFIG: one per guest read of config space, so
#                 their number and place are the guest program's; compared
#                 only as present or not
#   connected, disconnected: the connection; QEMU exited (...): QEMU died
# Lines with # are notes, not compared. Device events (they run apart from
# the requests, so their place among them is not fixed):
`, qemu, traceRecordEnv, traceConfigReads)
	for _, n := range notes {
		fmt.Fprintf(&b, "#   %s\n", n)
	}
	for _, p := range tracePhases {
		fmt.Fprintf(&b, "\n[%s]\n", p)
		for _, l := range phases[p] {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}
