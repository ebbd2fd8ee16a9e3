package vhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Options configure a Backend.
type Options struct {
	// Name identifies the device in logs.
	Name string
	// Logger receives the backend's logs; nil discards them.
	Logger *slog.Logger
	// MaxMemSlots is returned by GET_MAX_MEM_SLOTS and bounds the memory
	// table (default 32; QEMU caps vhost-user at 509).
	MaxMemSlots uint64
	// Withhold are protocol features not to offer, of those the Backend
	// supports (SupportedProtocolFeatures).
	Withhold uint64
}

const defaultMaxMemSlots = 32

// Backend serves one Device over vhost-user. One front-end connection is
// served at a time (Serve); the Device outlives connections, so a
// front-end that reconnects finds the device as it left it.
type Backend struct {
	dev  Device
	opts Options
	log  *slog.Logger

	mu   sync.Mutex
	cur  *session // the connection being served, or nil
	busy bool

	// used: a driver moved a ring since the device's state was last
	// dropped, so a driver that starts every ring at index 0 is a new
	// one (activation.go).
	used atomic.Bool

	stats Stats
}

// Stats counts what a Backend has seen.
type Stats struct {
	Connections  atomic.Uint64
	Messages     atomic.Uint64
	FailedMsgs   atomic.Uint64 // messages answered with an error
	ProtocolErrs atomic.Uint64 // connections ended by malformed input
	Kicks        atomic.Uint64
	Notifies     atomic.Uint64
	BrokenQueues atomic.Uint64
	Activations  atomic.Uint64 // times the device went live
	// ShmemEchoes counts guest memory regions recognised as one of our
	// own shared-memory files and kept out of the memory table.
	ShmemEchoes atomic.Uint64
}

// NewBackend returns a Backend serving dev.
func NewBackend(dev Device, opts Options) *Backend {
	if opts.MaxMemSlots == 0 {
		opts.MaxMemSlots = defaultMaxMemSlots
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{dev: dev, opts: opts, log: log.With("device", opts.Name)}
}

// protocolFeatures are the protocol features offered.
func (b *Backend) protocolFeatures() uint64 { return SupportedProtocolFeatures &^ b.opts.Withhold }

// Stats returns the backend's counters.
func (b *Backend) Stats() *Stats { return &b.stats }

// Connected reports whether a front-end is being served.
func (b *Backend) Connected() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur != nil
}

// ErrBusy is returned by Serve when another connection is being served.
var ErrBusy = errors.New("vhost: device already has a front-end")

// Serve serves one front-end connection until it closes, ctx ends, or
// malformed input ends it. Everything tied to the connection (memory
// mappings, rings, eventfds, the back-end channel) is released before
// Serve returns, and the device is deactivated without a reset. Serve
// closes conn.
func (b *Backend) Serve(ctx context.Context, conn *net.UnixConn) error {
	b.mu.Lock()
	if b.busy {
		b.mu.Unlock()
		conn.Close()
		return ErrBusy
	}
	s := newSession(b, conn)
	b.cur, b.busy = s, true
	b.mu.Unlock()
	b.stats.Connections.Add(1)

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { s.conn.close() })
	err := s.run(ctx)
	stop()
	cancel()
	s.teardown()

	b.mu.Lock()
	b.cur, b.busy = nil, false
	b.mu.Unlock()
	if errors.Is(err, io.EOF) || ctx.Err() != nil && isClosed(err) {
		return nil
	}
	if err != nil {
		b.stats.ProtocolErrs.Add(1)
	}
	return err
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// Shutdown tells a connected front-end that the device is going away: it
// sets DEVICE_NEEDS_RESET in the status and sends CONFIG_CHANGE_MSG so the
// guest notices, then closes the connection. It is best effort, bounded by
// ctx.
func (b *Backend) Shutdown(ctx context.Context) {
	b.mu.Lock()
	s := b.cur
	b.mu.Unlock()
	if s == nil {
		return
	}
	s.markNeedsReset()
	switch err := s.sendConfigChange(ctx); {
	case err == nil, errors.Is(err, ErrNotNegotiated):
	case errors.Is(err, unix.EPIPE), errors.Is(err, unix.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF):
		// The front-end hung up first: there is no one to tell.
		b.log.Debug("shutdown notice not delivered: the front-end is gone", "err", err)
	default:
		b.log.Warn("shutdown notice not delivered", "err", err)
	}
	s.conn.close()
}

// deadline bounds waits on the back-end channel when ctx has none.
func deadline(ctx context.Context, d time.Duration) time.Time {
	if t, ok := ctx.Deadline(); ok {
		return t
	}
	return time.Now().Add(d)
}

// ErrNotNegotiated is wrapped when the front-end did not negotiate a
// protocol feature a request needs; a device uses it to pick a fallback.
var ErrNotNegotiated = errors.New("not negotiated")

func notNegotiated(f ProtocolFeature) error {
	return fmt.Errorf("protocol feature %d %w", f, ErrNotNegotiated)
}
