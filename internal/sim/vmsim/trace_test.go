package vmsim_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/internal/testkit/hosttest"
	"github.com/vstellar/vstellar/internal/vhosttrace"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestTraceMatchesQEMU drives simulated VMs through the phases
// e2e/realvm's TestQEMUMessageTrace puts real QEMUs through, against an
// in-process vstellard, and compares the requests the daemon logs with
// the recordings in testdata: the same requests in the same order, but
// for the differences accepted below.
func TestTraceMatchesQEMU(t *testing.T) {
	for _, c := range []struct {
		qemu  string
		proto uint64 // the protocol features the simulated VMM takes
	}{
		{"qemu-11.1.3", 0},
		// 10.2 predates the shared memory protocol feature.
		{"qemu-10.2.2-rdma", frontend.SupportedProtocolFeatures &^ (1 << frontend.ProtoShmem)},
	} {
		t.Run(c.qemu, func(t *testing.T) {
			b, err := os.ReadFile("testdata/trace-" + c.qemu + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			want, err := vhosttrace.Parse(string(b))
			if err != nil {
				t.Fatal(err)
			}
			got := simulateTrace(t, c.proto)
			for _, p := range tracePhases {
				w := withoutConfigReads(want[p])
				if len(w) == 0 {
					t.Errorf("phase %s: nothing recorded", p)
					continue
				}
				if d, ok := acceptedDifference(c.qemu, p, w, got[p]); ok {
					t.Logf("phase %s: accepted difference: %s", p, d)
					continue
				}
				if !slices.Equal(w, got[p]) {
					t.Errorf("phase %s: the simulated VMM differs from %s:\n%s", p, c.qemu, vhosttrace.Diff(w, got[p]))
				}
			}
		})
	}
}

var tracePhases = []string{"start", "stop", "cont", "quit", "unplug", "system_reset", "reboot"}

// withoutConfigReads leaves out the guest's config reads (GET_CONFIG *):
// how many there are, and where, is the guest program's doing, and the
// simulated VM here reads none.
func withoutConfigReads(lines []string) []string {
	return slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return l == "GET_CONFIG *" })
}

// acceptedDifference reports whether got departs from a recording only
// where QEMU died: QEMU 11.1.3 does not survive an unplug of a device
// whose shared memory is mapped, nor, with CONFIGURE_MEM_SLOTS, a guest
// reset. Up to where it died, the simulated VM must have sent what QEMU
// did; from there it goes on as QEMU's code means to.
//
//   - unplug: the device's finalize fails an assertion removing the
//     mapping (memory_region_del_subregion) after QEMU has stopped the
//     rings and disconnected; the simulated VM disconnects as well.
//   - system_reset, in a recording made while vstellard offered
//     CONFIGURE_MEM_SLOTS: virtio_reset drops the shared memory mappings
//     while the device is stopped; the next start's memory table update
//     looks the dropped BAR region up in QEMU's shadow table to remove
//     it, finds no RAMBlock and dereferences NULL (memory_region_get_fd).
//     The simulated VM sends that REM_MEM_REG, starts the rings, and the
//     device maps its doorbells again.
func acceptedDifference(qemu, phase string, want, got []string) (string, bool) {
	n := len(want)
	if n == 0 || !strings.HasPrefix(want[n-1], "QEMU exited") {
		return "", false
	}
	died := want[n-1]
	want = want[:n-1]
	if n > 1 && want[n-2] == "disconnected" { // QEMU's death, seen by the daemon
		want = want[:n-2]
	}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		return "", false
	}
	var rest []string
	switch phase {
	case "system_reset", "reboot":
		rest = append([]string{"REM_MEM_REG"}, ringStart(abi.NumQueues)...)
		rest = append(rest, "ADD_MEM_REG shmem")
	case "unplug":
		rest = []string{"disconnected"}
	default:
		return "", false
	}
	if !slices.Equal(got[len(want):], rest) {
		return "", false
	}
	return fmt.Sprintf("%s %s after %d requests; the simulated VM goes on: %s", qemu, died, len(want), strings.Join(rest, " ")), true
}

// ringStart is the part of vub_start after the memory table.
func ringStart(nq int) []string {
	var o []string
	for range nq {
		o = append(o, "SET_VRING_NUM", "SET_VRING_BASE", "SET_VRING_ADDR", "SET_VRING_KICK", "SET_VRING_CALL")
	}
	for range nq {
		o = append(o, "SET_VRING_ENABLE")
	}
	for range nq {
		o = append(o, "SET_VRING_CALL")
	}
	return o
}

// simulateTrace runs the phases of a recording with simulated VMs:
// vmsim.New and Start (the guest's DRIVER_OK) for start, Stop and Start for
// stop and cont, Close for quit and for unplug, Reset and Start for
// system_reset and for reboot.
func simulateTrace(t *testing.T, proto uint64) map[string][]string {
	tl := newTraceLog()
	ctx, h := hosttest.Start(t, time.Minute, hostsim.Options{Log: slog.New(tl)})
	boot := func(name string) *vmsim.VM {
		t.Helper()
		socket, err := h.CreateDevice(ctx, name, hostsim.VMOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vm, err := vmsim.New(ctx, vmsim.Config{SocketPath: socket, MemSize: 1 << 30, NumQueues: abi.NumQueues,
			QueueSize: abi.DefaultQueueSize, ConfigSize: abi.ConfigSize, ProtocolFeatures: proto})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vm.Close() })
		return vm
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	got := map[string][]string{}

	vm := boot("s1")
	must(vm.Start(ctx))
	got["start"] = tl.settle(t, "s1", 1)
	must(vm.Stop(ctx))
	got["stop"] = tl.settle(t, "s1", 0)
	must(vm.Start(ctx))
	got["cont"] = tl.settle(t, "s1", 1)
	must(vm.Close())
	got["quit"] = tl.settle(t, "s1", 0)

	vm = boot("s2")
	must(vm.Start(ctx))
	if s := tl.settle(t, "s2", 1); !slices.Equal(s, got["start"]) {
		t.Errorf("the second VM's start differs from the first's:\n%s", vhosttrace.Diff(got["start"], s))
	}
	must(vm.Close())
	got["unplug"] = tl.settle(t, "s2", 0)

	vm = boot("s3")
	must(vm.Start(ctx))
	tl.settle(t, "s3", 1)
	must(vm.Reset(ctx))
	must(vm.Start(ctx))
	got["system_reset"] = tl.settle(t, "s3", 1)
	// The guest program's reboot, without a driver shutdown, is a
	// machine reset too.
	must(vm.Reset(ctx))
	must(vm.Start(ctx))
	got["reboot"] = tl.settle(t, "s3", 1)
	return got
}

// traceLog is a slog.Handler that keeps, per device, the lines of a trace
// (the daemon's "request" records and connection records, as in
// e2e/realvm) and counts the device's activations.
type traceLog struct {
	mu     sync.Mutex
	devs   map[string]*traceDev
	attrs  []slog.Attr
	shared *traceLog
}

type traceDev struct {
	lines  []string
	active int // activations since the last settle
	last   time.Time
	echo   bool // the next request is of shared memory
}

func newTraceLog() *traceLog {
	l := &traceLog{devs: map[string]*traceDev{}}
	l.shared = l
	return l
}

func (l *traceLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *traceLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &traceLog{attrs: append(slices.Clone(l.attrs), as...), shared: l.shared}
}

func (l *traceLog) WithGroup(string) slog.Handler { return l }

func (l *traceLog) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	for _, a := range l.attrs {
		attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	name, ok := attrs["device"]
	if !ok {
		return nil
	}
	s := l.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.devs[name]
	if d == nil {
		d = &traceDev{}
		s.devs[name] = d
	}
	add := func(line string) {
		d.lines = append(d.lines, line)
		d.last = time.Now()
	}
	switch r.Message {
	case "request":
		line := attrs["req"]
		if d.echo {
			line += " shmem"
			d.echo = false
		}
		add(line)
	case "request failed":
		add(attrs["req"] + " failed")
	case "shared memory region reported as guest memory; kept out of the memory table":
		d.echo = true
	case "front-end connected":
		add("connected")
	case "front-end disconnected", "front-end connection ended with an error":
		add("disconnected")
	case "device active":
		if _, ok := attrs["doorbells"]; ok {
			d.active++
			d.last = time.Now()
		}
	}
	return nil
}

// traceQuiet is how long a device's log must stay still before a phase
// is over: the device activates, and maps its doorbells, on a goroutine
// of its own after the rings' start.
const traceQuiet = 300 * time.Millisecond

// settle waits for activations device activations and then for the
// device's log to stay still, and returns (and forgets) its lines.
func (l *traceLog) settle(t *testing.T, dev string, activations int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		d := l.devs[dev]
		if d != nil && d.active >= activations && time.Since(d.last) >= traceQuiet {
			lines := d.lines
			d.lines, d.active = nil, 0
			l.mu.Unlock()
			return lines
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("device %s: no %d activations or no quiet within 20s", dev, activations)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
