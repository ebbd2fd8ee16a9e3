package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/vstellar/vstellar/api"
)

const (
	// acceptBackoffMax bounds the pause after a failing accept (EMFILE...).
	acceptBackoffMax = time.Second
	// forceCloseAfter is how long Serve gets to return after its context
	// is cancelled before the daemon closes the connection under it.
	forceCloseAfter = time.Second
	// reconnectGrace is how long a new connection waits for the active
	// one to finish. A VMM that reconnects at once (or restarts) closes
	// its old socket just before dialling again, while the back-end may
	// still be tearing the old connection down; only a front-end still
	// connected after this is refused. One connection at a time waits;
	// any other that comes meanwhile is refused at once.
	reconnectGrace = 500 * time.Millisecond
)

// device is one served device: its socket, its accept loop and at most one
// served connection. Its goroutines are tracked by wg.
type device struct {
	name    string
	tenant  uint32
	log     *slog.Logger
	inst    Instance
	ln      *net.UnixListener
	sock    *socketFile
	created time.Time

	ctx    context.Context // ends the served connection
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// modelMu keeps the device model open while it is inspected: held
	// shared by state, exclusively by destroy around Close.
	modelMu     sync.RWMutex
	modelClosed bool

	mu          sync.Mutex
	active      *net.UnixConn
	activeDone  chan struct{} // closed when the active connection's Serve returns
	waiting     bool          // a new connection waits out reconnectGrace
	connections uint64
	refused     uint64
	lastErr     string
}

// newDevice makes the device; it keeps ctx's values but outlives the
// request that creates it, until destroy.
func newDevice(ctx context.Context, spec api.DeviceSpec, inst Instance, ln *net.UnixListener, sock *socketFile, log *slog.Logger) *device {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &device{
		name: spec.Name, tenant: spec.Tenant, log: log, inst: inst, ln: ln, sock: sock,
		created: time.Now().UTC(), ctx: ctx, cancel: cancel,
	}
}

func (d *device) start() { d.wg.Go(d.acceptLoop) }

func (d *device) info() api.DeviceInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return api.DeviceInfo{
		Name:        d.name,
		Socket:      d.sock.path,
		Connected:   d.active != nil,
		Created:     d.created,
		Connections: d.connections,
		Refused:     d.refused,
		LastError:   d.lastErr,
		Tenant:      d.tenant,
	}
}

// state reads the device's full state. The model is not read once it
// is closed (Model stays nil).
func (d *device) state() DeviceState {
	st := DeviceState{Info: d.info(), Vhost: vhostCounters(d.inst.Backend)}
	if in, ok := d.inst.Device.(Inspector); ok {
		d.modelMu.RLock()
		if !d.modelClosed {
			snap := in.Snapshot()
			st.Model = &snap
		}
		d.modelMu.RUnlock()
	}
	return st
}

// inspect runs fn on the open device model; false if the model is not an
// Inspector or is closed.
func (d *device) inspect(fn func(Inspector)) bool {
	in, ok := d.inst.Device.(Inspector)
	if !ok {
		return false
	}
	d.modelMu.RLock()
	defer d.modelMu.RUnlock()
	if d.modelClosed {
		return false
	}
	fn(in)
	return true
}

// repanic logs a panic with the device's attributes and raises it again:
// a panicking device is not recovered silently (see the package doc).
func (d *device) repanic() {
	if r := recover(); r != nil {
		d.log.Error("panic in device goroutine; terminating the daemon", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		panic(r)
	}
}

func (d *device) acceptLoop() {
	defer d.repanic()
	backoff := 5 * time.Millisecond
	for {
		conn, err := d.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("accept failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-d.ctx.Done():
				return
			}
			backoff = min(2*backoff, acceptBackoffMax)
			continue
		}
		backoff = 5 * time.Millisecond
		d.mu.Lock()
		switch {
		case d.ctx.Err() != nil || d.active != nil && d.waiting:
			d.refuseLocked(conn)
		case d.active != nil:
			// The loop never blocks on a busy device: a queue of hostile
			// connections is drained at once, not one per grace period.
			d.waiting = true
			d.mu.Unlock()
			d.wg.Go(func() {
				d.awaitIdle(reconnectGrace)
				d.mu.Lock()
				d.waiting = false
				d.startLocked(conn)
			})
		default:
			d.startLocked(conn)
		}
	}
}

// startLocked serves conn if the device is free, else refuses it. It
// unlocks d.mu.
func (d *device) startLocked(conn *net.UnixConn) {
	if d.active != nil || d.ctx.Err() != nil {
		d.refuseLocked(conn)
		return
	}
	d.active = conn
	done := make(chan struct{})
	d.activeDone = done
	d.connections++
	n := d.connections
	d.mu.Unlock()
	d.wg.Go(func() {
		defer close(done)
		d.serve(conn, n)
	})
}

// refuseLocked closes conn, which came while another front-end holds the
// device. It unlocks d.mu.
func (d *device) refuseLocked(conn *net.UnixConn) {
	d.refused++
	d.mu.Unlock()
	d.log.Warn("refusing front-end connection: another one is active", peerAttrs(conn)...)
	conn.Close()
}

// awaitIdle waits up to grace for the active connection, if any, to end.
func (d *device) awaitIdle(grace time.Duration) {
	d.mu.Lock()
	done := d.activeDone
	busy := d.active != nil
	d.mu.Unlock()
	if !busy {
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-d.ctx.Done():
	}
}

// serve runs the Backend on one connection. Whatever ends it ends only this
// connection; the device keeps accepting.
func (d *device) serve(conn *net.UnixConn, n uint64) {
	defer d.repanic()
	log := d.log.With("conn", n)
	log.Info("front-end connected", peerAttrs(conn)...)
	start := time.Now()
	err := d.inst.Backend.Serve(d.ctx, conn)
	conn.Close() // Serve should have closed it; closing twice is harmless.
	cancelled := d.ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled))
	d.mu.Lock()
	d.active = nil
	if err != nil && !cancelled {
		d.lastErr = err.Error()
	}
	d.mu.Unlock()
	switch {
	case cancelled:
		log.Info("front-end connection closed by the daemon", "duration", time.Since(start))
	case err != nil:
		log.Warn("front-end connection ended with an error", "err", err, "duration", time.Since(start))
	default:
		log.Info("front-end disconnected", "duration", time.Since(start))
	}
	// A connection's buffers (message payloads, translation tables, rings'
	// bookkeeping) are garbage now. Without this the runtime keeps the
	// heap it grew to for minutes, and the daemon's RSS reads as if the
	// front-end that left (perhaps a hostile one) still cost memory.
	// Disconnects are rare; one collection each is cheap.
	debug.FreeOSMemory()
}

// destroy tears the device down in order: stop accepting, tell the
// front-end, cancel its connection, wait for the goroutines, close the
// device model, remove the socket. ctx bounds the whole teardown; if the
// connection does not end in time the device model is not closed (it may
// still be in use) and an error says so.
func (d *device) destroy(ctx context.Context) error {
	start := time.Now()
	var errs []error
	if err := d.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, fmt.Errorf("closing listener: %w", err))
	}
	d.inst.Backend.Shutdown(ctx)
	d.cancel()

	if !d.waitStopped(ctx) {
		errs = append(errs, fmt.Errorf("connection still being served after %v: %w; device model left open",
			time.Since(start).Round(time.Millisecond), ctx.Err()))
	} else if d.inst.Device != nil {
		d.modelMu.Lock()
		d.modelClosed = true
		err := d.inst.Device.Close()
		d.modelMu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("closing device model: %w", err))
		}
	}
	if err := d.sock.remove(); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if err != nil {
		d.log.Error("device destroyed with errors", "err", err, "duration", time.Since(start))
		return fmt.Errorf("device %q: %w", d.name, err)
	}
	d.log.Info("device destroyed", "duration", time.Since(start))
	return nil
}

// waitStopped waits for the device's goroutines after cancel and reports
// whether they ended within ctx. Serve should return promptly once
// cancelled; if it does not, the connection is closed under it, early
// enough to leave it time to return within ctx.
func (d *device) waitStopped(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	forceAt := forceCloseAfter
	if deadline, ok := ctx.Deadline(); ok {
		forceAt = min(forceAt, time.Until(deadline)/2)
	}
	select {
	case <-done:
		return true
	case <-time.After(forceAt):
	}
	d.mu.Lock()
	if d.active != nil {
		d.log.Warn("connection did not end after cancel; closing it")
		d.active.Close()
	}
	d.mu.Unlock()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// peerAttrs returns log attributes for the peer's credentials
// (SO_PEERCRED), or nothing if they cannot be read.
func peerAttrs(conn *net.UnixConn) []any {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *syscall.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return nil
	}
	return []any{"peer_pid", cred.Pid, "peer_uid", cred.Uid}
}
