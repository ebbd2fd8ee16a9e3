package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/pvdma"
)

// Backend serves the vhost-user protocol for one device. *vhost.Backend
// satisfies it.
//
// The Manager relies on this contract:
//   - Serve serves one connection and returns when it closes, when ctx
//     ends, or on a protocol error. It releases all connection state
//     before returning and may be called again for a reconnect.
//   - Shutdown may be called while Serve runs in another goroutine; it
//     tells the connected front-end the device is going away, returns
//     within ctx, and is a no-op without a connection.
//   - Panics in goroutines that Serve starts are the Backend's to handle.
type Backend interface {
	Serve(ctx context.Context, conn *net.UnixConn) error
	Shutdown(ctx context.Context)
}

// Instance is one device built by a DeviceFactory.
type Instance struct {
	// Backend serves the device's vhost-user socket. Required.
	Backend Backend
	// Device is the device model. Its Close runs after the last Serve
	// has returned, once, when the device is destroyed. May be nil.
	Device io.Closer
}

// Shared is what every device of one daemon shares. The Manager creates
// it once and hands it to every DeviceFactory call.
type Shared struct {
	// Fabric connects the devices' data paths: QPs of two VMs served by
	// one daemon reach each other through it.
	Fabric fabric.Fabric
	// Pins is the host's pinned-memory pool: every device's DMA pins
	// count against its budget.
	Pins *pvdma.Pool
	// GIDPrefix is the host's GID prefix on the cross-host fabric (the
	// zero Prefix without one: link-local GIDs).
	GIDPrefix netip.Prefix
	// Cores are the data-path threads every device's engine is polled
	// from (Config.DataCores).
	Cores *engine.Cores
}

// DeviceFactory builds the device model and its Backend for spec. spec
// has been validated (name, limits is a JSON object or empty); checking
// the contents of spec.Limits is the factory's job, and it should wrap
// api.ErrInvalid for bad limits so that the API answers 400. shared is
// the daemon's. log is the daemon's: the device model and the vhost
// back-end each name the device in what they log (with spec.Name), so
// it must not carry the name already. ctx bounds the construction only.
type DeviceFactory func(ctx context.Context, spec api.DeviceSpec, shared Shared, log *slog.Logger) (Instance, error)
