// Package daemontest provides a fake vhost-user Backend and a
// DeviceFactory for tests of the daemon and its clients. It speaks a
// line protocol instead of vhost-user: "ping\n" is answered "pong\n",
// anything else is a protocol error that ends the connection, and
// Shutdown sends "bye\n" to the connected peer.
package daemontest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
)

// Backend is a fake daemon.Backend.
type Backend struct {
	// PanicOnServe makes Serve panic (set before the device is created).
	PanicOnServe bool
	// Stuck, if non-nil, makes Serve ignore ctx and its connection being
	// closed and block until Stuck is closed.
	Stuck chan struct{}
	// Teardown (nanoseconds) makes Serve take this long to return after
	// its connection ends, as a real back-end does while it unmaps guest
	// memory. Atomic: tests set it while the device runs.
	Teardown atomic.Int64

	Shutdowns atomic.Int32
	Serves    atomic.Int32

	mu  sync.Mutex
	cur *net.UnixConn
}

// Serve implements daemon.Backend.
func (b *Backend) Serve(ctx context.Context, conn *net.UnixConn) error {
	b.Serves.Add(1)
	if b.PanicOnServe {
		panic("daemontest: Serve panics on purpose")
	}
	b.mu.Lock()
	b.cur = conn
	b.mu.Unlock()
	defer func() {
		time.Sleep(time.Duration(b.Teardown.Load()))
		b.mu.Lock()
		b.cur = nil
		b.mu.Unlock()
		conn.Close()
	}()
	if b.Stuck != nil {
		<-b.Stuck
		return nil
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if line != "ping\n" {
			return fmt.Errorf("protocol error: unexpected message %q", line)
		}
		if _, err := io.WriteString(conn, "pong\n"); err != nil {
			return err
		}
	}
}

// Shutdown implements daemon.Backend.
func (b *Backend) Shutdown(ctx context.Context) {
	b.Shutdowns.Add(1)
	b.mu.Lock()
	c := b.cur
	b.mu.Unlock()
	if c != nil {
		_, _ = io.WriteString(c, "bye\n")
	}
}

// Device is a fake device model counting Close calls.
type Device struct{ Closes atomic.Int32 }

// Close implements io.Closer.
func (d *Device) Close() error { d.Closes.Add(1); return nil }

// Factory builds fake devices and remembers them by name.
type Factory struct {
	// Configure, if set, adjusts each new Backend.
	Configure func(name string, b *Backend)
	// Err, if set, is returned for the device of that name.
	Err func(spec api.DeviceSpec) error

	mu       sync.Mutex
	backends map[string]*Backend
	devices  map[string]*Device
}

// New implements daemon.DeviceFactory.
func (f *Factory) New(_ context.Context, spec api.DeviceSpec, _ daemon.Shared, _ *slog.Logger) (daemon.Instance, error) {
	if f.Err != nil {
		if err := f.Err(spec); err != nil {
			return daemon.Instance{}, err
		}
	}
	b, d := &Backend{}, &Device{}
	if f.Configure != nil {
		f.Configure(spec.Name, b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.backends == nil {
		f.backends, f.devices = map[string]*Backend{}, map[string]*Device{}
	}
	f.backends[spec.Name], f.devices[spec.Name] = b, d
	return daemon.Instance{Backend: b, Device: d}, nil
}

// Backend returns the latest Backend built for name, or nil.
func (f *Factory) Backend(name string) *Backend {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backends[name]
}

// Device returns the latest Device built for name, or nil.
func (f *Factory) Device(name string) *Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.devices[name]
}
