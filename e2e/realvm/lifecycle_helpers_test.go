package realvm_test

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/virtio/abi"
)

// What the life-cycle tests check with: a WRITE through a QP connected
// to itself, the daemon's view of the device, its fds and goroutines,
// and QEMU's end when it dies under a test.

// selfWrite sets up the agent's objects, connects its QP to itself and
// WRITEs 128 KiB of Pattern(seed) from the buffer's start to 128 KiB
// further on, over bytes of another pattern, checked by digest.
func selfWrite(t *testing.T, g *guest, seed uint64) agent.SetupReply {
	t.Helper()
	const n = 128 << 10
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := g.agent
	sr, err := c.Setup(ctx, agent.SetupArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx, sr); err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(ctx, 0, n, seed); err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(ctx, n, n, seed+100); err != nil {
		t.Fatal(err)
	}
	if err := c.PostSend(ctx, agent.SendArgs{WRID: seed, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []agent.Segment{{Off: 0, Len: n}}, RemoteAddr: sr.MR.Addr + n, RKey: sr.MR.RKey}); err != nil {
		t.Fatal(err)
	}
	wcs, err := c.PollN(ctx, agent.SendQueue, 1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w := wcs[0]; w.WRID != seed || w.Status != abi.WCSuccess || w.Opcode != abi.WCRDMAWrite {
		t.Fatalf("WRITE completion %v", w)
	}
	d, err := c.Digest(ctx, n, n)
	if err != nil {
		t.Fatal(err)
	}
	if want := agent.PatternSHA256(seed, n); d != want {
		t.Fatalf("WRITE target hashes to %.16s, want %.16s", d, want)
	}
	return sr
}

// fatalVM fails the test with err and, if QEMU died meanwhile (or does
// within 3 s), how it ended and what it wrote on stderr: QEMU's own
// aborts are the likeliest cause of a failure here.
func fatalVM(t *testing.T, vm *realvm.VM, err error) {
	t.Helper()
	select {
	case <-vm.Done():
	case <-time.After(3 * time.Second):
	}
	if exited, werr := vm.Exited(); exited {
		t.Fatalf("%v\nQEMU exited (%v); its stderr:\n%s", err, werr, vm.Stderr())
	}
	t.Fatal(err)
}

func logReady(t *testing.T, what string, g *guest) {
	t.Helper()
	t.Logf("%s: agent up %v after QEMU start (guest program: device ready %.0f ms after its start), doorbells %s",
		what, g.ready.Round(time.Millisecond), g.info.ReadyMicros/1e3, g.info.DoorbellMode)
}

func doorbells(r *rig, qemu string) string {
	if q, _ := r.env.QEMU(qemu); q.SharedMemory {
		return "shmem"
	}
	return "guest-ram"
}

// boots counts the guest program's starts as PID 1 on vm's console.
func boots(vm *realvm.VM) int { return strings.Count(vm.Log(), "init: kernel ") }

var readyAfterOpen = regexp.MustCompile(`device ready [0-9.]+ ms after start, ([0-9.]+) ms after the transport`)

// guestReady is the guest program's device-ready time (ms) from the
// moment it found the device, from its console line.
func guestReady(line string) string {
	if m := readyAfterOpen.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return "?"
}

// status is the device's state as the daemon's API shows it.
func (r *rig) status(name string) api.DeviceStatus {
	r.t.Helper()
	st, err := r.host.Client().DeviceStatus(r.t.Context(), name)
	if err != nil {
		r.t.Fatal(err)
	}
	if st.Objects == nil || st.Memory == nil || st.Control == nil {
		r.t.Fatalf("device %s: no model state in %+v", name, st)
	}
	return st
}

// waitStatus polls the device's state until ok, for at most 30 s.
func (r *rig) waitStatus(name, what string, ok func(api.DeviceStatus) bool) api.DeviceStatus {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := r.status(name)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("device %s: no %s within 30 s: %+v", name, what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *rig) hasQP(name string, qpn uint32) bool {
	r.t.Helper()
	l, err := r.host.Client().QPs(r.t.Context(), name, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, q := range l.QPs {
		if q.QPN == qpn {
			return true
		}
	}
	return false
}

// live counts a device's verbs objects.
func live(st api.DeviceStatus) int {
	o := st.Objects
	return o.PDs + o.CQs + o.QPs + o.MRs + o.AHs
}

// usage is this process's open fds and goroutines: the daemon's, with
// the API client's idle connections closed first.
type usage struct{ fds, goroutines int }

func (r *rig) usage() usage {
	r.host.Client().Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		r.t.Fatal(err)
	}
	return usage{fds: len(ents), goroutines: runtime.NumGoroutine()}
}

// checkLeaks waits up to 10 s for fds and goroutines to come back to
// base, give or take the noise of the API's own connection.
func (r *rig) checkLeaks(when string, base usage) {
	r.t.Helper()
	const fdNoise, goroutineNoise = 2, 4
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := r.usage()
		if u.fds <= base.fds+fdNoise && u.goroutines <= base.goroutines+goroutineNoise {
			r.t.Logf("%s: %d fds, %d goroutines (before the VM: %d, %d)", when, u.fds, u.goroutines, base.fds, base.goroutines)
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			r.t.Fatalf("%s: %d fds, %d goroutines; before the VM %d, %d\n%s", when, u.fds, u.goroutines, base.fds, base.goroutines, buf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recorder remembers the messages the daemon logs at Info and above, and
// hands on what next takes (the test log's warnings).
type recorder struct {
	seen *seen
	next slog.Handler
}

type seen struct {
	mu   sync.Mutex
	msgs []string
}

func newRecorder(next slog.Handler) *recorder { return &recorder{seen: &seen{}, next: next} }

func (h *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *recorder) Handle(ctx context.Context, rec slog.Record) error {
	h.seen.mu.Lock()
	h.seen.msgs = append(h.seen.msgs, rec.Message)
	h.seen.mu.Unlock()
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{seen: h.seen, next: h.next.WithAttrs(as)}
}

func (h *recorder) WithGroup(name string) slog.Handler {
	return &recorder{seen: h.seen, next: h.next.WithGroup(name)}
}

// saw reports whether msg was logged.
func (h *recorder) saw(msg string) bool {
	h.seen.mu.Lock()
	defer h.seen.mu.Unlock()
	return slices.Contains(h.seen.msgs, msg)
}
