package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
)

// shortTempDir is a temporary run dir short enough for any device name
// (t.TempDir paths can exceed what sun_path allows with 64-byte names).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testWriter sends log lines to t.Log until the test ends.
type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testConfig is a valid config on a fresh run dir using f.
func testConfig(t *testing.T, f *daemontest.Factory) daemon.Config {
	cfg := daemon.DefaultConfig()
	cfg.RunDir = shortTempDir(t)
	cfg.ShutdownTimeout = api.Duration(5 * time.Second)
	cfg.Factory = f.New
	return cfg
}

// running is a Manager being Run by a test.
type running struct {
	m      *daemon.Manager
	client *api.Client
	cancel context.CancelFunc
	done   chan error
}

// stop cancels Run and returns its result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // keep it for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// run starts m.Run and waits until it is ready; the test's cleanup stops it.
func run(t *testing.T, cfg daemon.Config) *running {
	t.Helper()
	m, err := daemon.New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{m: m, cancel: cancel, done: make(chan error, 1), client: api.NewClient(m.APISocket())}
	go func() { r.done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-r.done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("manager not ready")
	}
	t.Cleanup(func() {
		r.client.Close()
		cancel()
		<-r.done
	})
	return r
}

func dial(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readLine reads one line with a deadline; "" means EOF.
func readLine(t *testing.T, c *net.UnixConn) (string, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b []byte
	one := make([]byte, 1)
	for {
		_, err := c.Read(one)
		if err != nil {
			if errors.Is(err, io.EOF) && len(b) == 0 {
				return "", nil
			}
			return string(b), err
		}
		b = append(b, one[0])
		if one[0] == '\n' {
			return string(b), nil
		}
	}
}

func ping(t *testing.T, c *net.UnixConn) {
	t.Helper()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if line, err := readLine(t, c); err != nil || line != "pong\n" {
		t.Fatalf("ping: got %q, %v; want pong", line, err)
	}
}

// expectClosed checks that the daemon closes c (EOF or reset).
func expectClosed(t *testing.T, c *net.UnixConn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := bufio.NewReader(c).ReadString('\n')
	if err == nil {
		t.Fatal("connection still open, want it closed")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection not closed within 5s")
	}
}

func info(t *testing.T, m *daemon.Manager, name string) api.DeviceInfo {
	t.Helper()
	i, err := m.Device(name)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// dirNames lists a directory.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
