package hotplug

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/testkit/qmptest"
)

// tempDir is a short directory (unix socket paths are limited to 107
// bytes, and t.TempDir's grow with the test's name).
func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// noLeaks fails the test if goroutines of this package, qmptest or
// go-qemu outlive it. Call it first: cleanups run last-in first-out.
func noLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		var stacks string
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if stacks = leaked(); stacks == "" {
				return
			}
		}
		t.Errorf("goroutines left behind:\n%s", stacks)
	})
}

func leaked() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") {
			continue // a test's own goroutine
		}
		if strings.Contains(g, "go-qemu/qmp.") || strings.Contains(g, "vstellar/hotplug.") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// startQMP starts a qmptest server in dir.
func startQMP(t *testing.T, dir string, opts qmptest.Options) *qmptest.Server {
	t.Helper()
	s, err := qmptest.Start(filepath.Join(dir, "qmp.sock"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backend stands in for vstellard: a unix socket that accepts
// connections and keeps them.
type backend struct {
	path string
	ln   *net.UnixListener
	mu   sync.Mutex
	cs   []*net.UnixConn
	wg   sync.WaitGroup
}

func startBackend(t *testing.T, path string) *backend {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{path: path, ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.cs = append(b.cs, c)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.wg.Wait()
		b.mu.Lock()
		for _, c := range b.cs {
			c.Close()
		}
		b.mu.Unlock()
	})
	return b
}

func (b *backend) conns() []*net.UnixConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*net.UnixConn(nil), b.cs...)
}

// waitConns waits until the backend has accepted n connections.
func (b *backend) waitConns(t *testing.T, n int) []*net.UnixConn {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cs := b.conns(); len(cs) >= n {
			return cs
		}
	}
	t.Fatalf("backend: %d connections, want %d", len(b.conns()), n)
	return nil
}

// closedByPeer reports whether the other end closed c (read gives EOF).
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// dialT dials with short timeouts suited to tests.
func dialT(t *testing.T, path string, opts Options) *Client {
	t.Helper()
	c, err := Dial(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// asStep returns err as a *StepError or fails.
// rig is most tests' start: no leaks afterwards, a fake QEMU with qo in
// a directory of its own, a vhost-user back-end socket beside it, and a
// client connected with o.
func rig(t *testing.T, qo qmptest.Options, o Options) (*qmptest.Server, *backend, *Client) {
	t.Helper()
	noLeaks(t)
	dir := tempDir(t)
	srv := startQMP(t, dir, qo)
	be := startBackend(t, filepath.Join(dir, "vm1.sock"))
	return srv, be, dialT(t, srv.Path(), o)
}

func asStep(t *testing.T, err error) *StepError {
	t.Helper()
	var se *StepError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *StepError", err, err)
	}
	return se
}
