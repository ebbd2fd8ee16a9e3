package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
	"github.com/vstellar/vstellar/internal/testkit/wait"
)

func newManager(t *testing.T, cfg daemon.Config) *daemon.Manager {
	t.Helper()
	m, err := daemon.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

func TestSecondConnectionRefusedThenReconnect(t *testing.T) {
	f := &daemontest.Factory{}
	m := newManager(t, testConfig(t, f))
	ctx := context.Background()
	d, err := m.CreateDevice(ctx, api.DeviceSpec{Name: "d0"})
	if err != nil {
		t.Fatal(err)
	}
	c1 := dial(t, d.Socket)
	ping(t, c1)

	c2 := dial(t, d.Socket)
	expectClosed(t, c2)
	ping(t, c1) // the first connection is undisturbed
	if i := info(t, m, "d0"); !i.Connected || i.Connections != 1 || i.Refused != 1 {
		t.Fatalf("after refusal: %+v", i)
	}

	c1.Close()
	wait.For(t, "disconnect", func() bool { return !info(t, m, "d0").Connected })
	c3 := dial(t, d.Socket) // a reconnect
	ping(t, c3)
	if i := info(t, m, "d0"); !i.Connected || i.Connections != 2 || i.LastError != "" {
		t.Fatalf("after reconnect: %+v", i)
	}
	if n := f.Backend("d0").Serves.Load(); n != 2 {
		t.Fatalf("Serve called %d times, want 2", n)
	}
}

// A VMM that reconnects at once closes its socket and dials again while
// the back-end is still tearing the old connection down: the new
// connection waits for that instead of being refused.
func TestImmediateReconnectIsServed(t *testing.T) {
	f := &daemontest.Factory{}
	m := newManager(t, testConfig(t, f))
	d, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "d0"})
	if err != nil {
		t.Fatal(err)
	}
	f.Backend("d0").Teardown.Store(int64(100 * time.Millisecond))
	c1 := dial(t, d.Socket)
	ping(t, c1)
	c1.Close()
	c2 := dial(t, d.Socket) // no wait for the disconnect
	ping(t, c2)
	if i := info(t, m, "d0"); i.Refused != 0 || i.Connections != 2 {
		t.Fatalf("after an immediate reconnect: %+v", i)
	}
}

// Connections queued on a busy device are refused at once, not one per
// reconnect grace (500 ms each: a hostile front-end could hold a VMM's
// reconnect behind hundreds of them for minutes).
func TestQueuedConnectionsRefusedAtOnce(t *testing.T) {
	f := &daemontest.Factory{}
	m := newManager(t, testConfig(t, f))
	d, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "d0"})
	if err != nil {
		t.Fatal(err)
	}
	c1 := dial(t, d.Socket)
	ping(t, c1)
	const n = 20
	start := time.Now()
	var queued []*net.UnixConn
	for range n {
		queued = append(queued, dial(t, d.Socket))
	}
	for _, c := range queued {
		expectClosed(t, c)
	}
	// One of them may wait out the grace; the rest must not.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("%d queued connections refused in %v", n, took)
	}
	ping(t, c1)
	if i := info(t, m, "d0"); i.Refused != n || i.Connections != 1 {
		t.Fatalf("after the queue: %+v", i)
	}
}

func TestGarbageDropsOnlyThatConnection(t *testing.T) {
	f := &daemontest.Factory{}
	m := newManager(t, testConfig(t, f))
	ctx := context.Background()
	a, err := m.CreateDevice(ctx, api.DeviceSpec{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.CreateDevice(ctx, api.DeviceSpec{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := dial(t, a.Socket), dial(t, b.Socket)
	ping(t, ca)
	ping(t, cb)

	if _, err := io.WriteString(ca, "\x00\xffgarbage\n"); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, ca)
	ping(t, cb)
	wait.For(t, "error recorded", func() bool { return info(t, m, "a").LastError != "" })
	if i := info(t, m, "a"); i.Connected || !strings.Contains(i.LastError, "protocol error") {
		t.Fatalf("a after garbage: %+v", i)
	}
	if i := info(t, m, "b"); !i.Connected || i.LastError != "" {
		t.Fatalf("b: %+v", i)
	}
	// Device a still accepts a new front-end.
	ping(t, dial(t, a.Socket))
}

func TestStaleSocketReplaced(t *testing.T) {
	f := &daemontest.Factory{}
	cfg := testConfig(t, f)
	cfg.SocketMode = 0o660
	m := newManager(t, cfg)
	path := m.SocketPath("d0")
	// A socket file nobody listens on, as a crashed daemon leaves it.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	d, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "d0"})
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ping(t, dial(t, d.Socket))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
}

func TestLiveSocketRefused(t *testing.T) {
	f := &daemontest.Factory{}
	m := newManager(t, testConfig(t, f))
	path := m.SocketPath("d0")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // the other owner accepts and drops the probe
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = m.CreateDevice(context.Background(), api.DeviceSpec{Name: "d0"})
	if !errors.Is(err, daemon.ErrSocketInUse) {
		t.Fatalf("CreateDevice over a live socket: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("live socket was removed: %v", err)
	}
	if n := f.Device("d0").Closes.Load(); n != 1 {
		t.Errorf("device model of the failed create closed %d times", n)
	}
	if len(m.Devices()) != 0 {
		t.Errorf("failed device listed: %v", m.Devices())
	}
	// A regular file is never removed either.
	file := m.SocketPath("f")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "f"}); !errors.Is(err, daemon.ErrSocketInUse) {
		t.Fatalf("CreateDevice over a regular file: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Fatalf("regular file touched: %q %v", b, err)
	}
}

func TestLongNameSocketPath(t *testing.T) {
	f := &daemontest.Factory{}
	cfg := testConfig(t, f)
	// A run dir long enough that a 64-byte name overflows sun_path.
	cfg.RunDir = filepath.Join(cfg.RunDir, strings.Repeat("r", 40))
	m := newManager(t, cfg)
	_, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: strings.Repeat("n", api.MaxNameLen)})
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("long socket path: %v", err)
	}
	if _, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "short"}); err != nil {
		t.Fatal(err)
	}
}

func TestOperationsAfterShutdown(t *testing.T) {
	f := &daemontest.Factory{}
	m := newManager(t, testConfig(t, f))
	if _, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "d0"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateDevice(context.Background(), api.DeviceSpec{Name: "d1"}); !errors.Is(err, api.ErrShuttingDown) {
		t.Fatalf("create after shutdown: %v", err)
	}
	if err := m.DestroyDevice(context.Background(), "d0"); !errors.Is(err, api.ErrShuttingDown) {
		t.Fatalf("destroy after shutdown: %v", err)
	}
	if err := m.Run(context.Background()); err == nil {
		t.Fatal("Run after Shutdown succeeded")
	}
}
