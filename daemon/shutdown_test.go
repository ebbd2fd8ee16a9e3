package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
	"github.com/vstellar/vstellar/internal/testkit/wait"
)

func TestRunShutdownCleansUp(t *testing.T) {
	f := &daemontest.Factory{}
	cfg := testConfig(t, f)
	// Something of the operator's in the run dir must survive.
	keep := filepath.Join(cfg.RunDir, "operator-notes.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, cfg.RunDir)
	cfg.Devices = []api.DeviceSpec{{Name: "cfg0"}, {Name: "cfg1"}}
	r := run(t, cfg)
	if _, err := r.client.CreateDevice(context.Background(), api.DeviceSpec{Name: "api0"}); err != nil {
		t.Fatal(err)
	}
	conns := map[string]bool{}
	for _, d := range r.m.Devices() {
		c := dial(t, d.Socket)
		ping(t, c)
		conns[d.Name] = true
		defer func() {
			// Every connected front-end is told, then disconnected.
			if line, _ := readLine(t, c); line != "bye\n" {
				t.Errorf("%s: front-end not told: %q", d.Name, line)
			}
			expectClosed(t, c)
		}()
	}
	if len(conns) != 3 {
		t.Fatalf("devices: %v", r.m.Devices())
	}

	start := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("shutdown took %v", el)
	}
	if after := dirNames(t, cfg.RunDir); !slices.Equal(before, after) {
		t.Errorf("run dir: before %v, after %v", before, after)
	}
	for name := range conns {
		if n := f.Device(name).Closes.Load(); n != 1 {
			t.Errorf("%s closed %d times", name, n)
		}
		if n := f.Backend(name).Shutdowns.Load(); n != 1 {
			t.Errorf("%s shut down %d times", name, n)
		}
	}
}

func TestRunRemovesRunDirItCreated(t *testing.T) {
	f := &daemontest.Factory{}
	cfg := testConfig(t, f)
	cfg.RunDir = filepath.Join(cfg.RunDir, "new")
	cfg.Devices = []api.DeviceSpec{{Name: "d0"}}
	r := run(t, cfg)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.RunDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run dir created by the daemon was left behind: %v", err)
	}
}

func TestShutdownBoundedWithStuckBackend(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	f := &daemontest.Factory{Configure: func(name string, b *daemontest.Backend) {
		if name == "stuck" {
			b.Stuck = stuck
		}
	}}
	cfg := testConfig(t, f)
	cfg.ShutdownTimeout = api.Duration(500 * time.Millisecond)
	cfg.Devices = []api.DeviceSpec{{Name: "stuck"}, {Name: "fine"}}
	r := run(t, cfg)
	dial(t, r.m.SocketPath("stuck"))
	ping(t, dial(t, r.m.SocketPath("fine")))
	wait.For(t, "stuck connected", func() bool { return info(t, r.m, "stuck").Connected })

	start := time.Now()
	err := r.stop(t)
	el := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "stuck") || strings.Contains(err.Error(), `"fine"`) {
		t.Fatalf("Run = %v, want an error about the stuck device only", err)
	}
	if el > 1500*time.Millisecond {
		t.Errorf("shutdown took %v with a 500ms bound", el)
	}
	if n := f.Device("stuck").Closes.Load(); n != 0 {
		t.Error("device model closed while Serve still runs")
	}
	if n := f.Device("fine").Closes.Load(); n != 1 {
		t.Errorf("fine device closed %d times", n)
	}
	for _, path := range []string{r.m.SocketPath("stuck"), r.m.SocketPath("fine"), r.m.APISocket()} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", path, err)
		}
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		f := &daemontest.Factory{}
		cfg := testConfig(t, f)
		cfg.Devices = []api.DeviceSpec{{Name: "a"}, {Name: "b"}}
		r := run(t, cfg)
		ctx := context.Background()
		for i := range 5 {
			if _, err := r.client.CreateDevice(ctx, api.DeviceSpec{Name: "x"}); err != nil {
				t.Fatal(err)
			}
			c := dial(t, r.m.SocketPath("x"))
			ping(t, c)
			if i%2 == 0 {
				c.Close()
			}
			if err := r.client.DestroyDevice(ctx, "x"); err != nil {
				t.Fatal(err)
			}
		}
		ping(t, dial(t, r.m.SocketPath("a")))
		dial(t, r.m.SocketPath("a")) // refused
		dial(t, r.m.SocketPath("b"))
		r.client.Close()
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d before, %d after\n%s", base, n, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPanicIsNotSwallowed runs a daemon whose backend panics in a child
// process: the panic must be logged with the device name and kill the
// process.
func TestPanicIsNotSwallowed(t *testing.T) {
	if os.Getenv("VSTELLAR_PANIC_CHILD") == "1" {
		panicChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanicIsNotSwallowed$", "-test.v")
	cmd.Env = append(os.Environ(), "VSTELLAR_PANIC_CHILD=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("child did not die: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"panic in device goroutine", "device=boom", "Serve panics on purpose"} {
		if !strings.Contains(s, want) {
			t.Errorf("child output lacks %q:\n%s", want, s)
		}
	}
}

func panicChild(t *testing.T) {
	f := &daemontest.Factory{Configure: func(_ string, b *daemontest.Backend) { b.PanicOnServe = true }}
	cfg := testConfig(t, f)
	log, _ := daemon.NewLogger(os.Stderr, "info", "text")
	m, err := daemon.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "boom"})
	if err != nil {
		t.Fatal(err)
	}
	dial(t, d.Socket)
	time.Sleep(5 * time.Second) // the panic ends the process first
	t.Fatal("still alive")
}
