package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Options configure a Frontend.
type Options struct {
	// Logger receives protocol events; nil discards them.
	Logger *slog.Logger
	// NumQueues is how many virtqueues the device model has (QEMU's
	// num_vqs). Init fails if the back-end offers fewer, and sets up a
	// masked call notifier and an error notifier for each.
	NumQueues int
	// ProtocolFeatures masks what Init accepts from the back-end; zero
	// means SupportedProtocolFeatures. Bits outside
	// SupportedProtocolFeatures are never accepted.
	ProtocolFeatures uint64
	// RequireConfig makes Init fail when the back-end lacks
	// PROTOCOL_F_CONFIG (QEMU's generic device needs it); without it,
	// CONFIG is masked off like QEMU does for devices that cannot use it.
	RequireConfig bool
	// Shmem is the address space for the device's shared memory regions.
	// Pass one to keep regions (and views of them) across reconnects; nil
	// gives the Frontend its own, released on Close.
	Shmem *ShmemSpace
	// OnConfigChange, if set, is called (on the main loop) for every
	// BACKEND_CONFIG_CHANGE_MSG.
	OnConfigChange func()
	// MainLoop, if set, runs the handling of each back-end request:
	// it calls serve (the request, its acknowledgement) once the VMM's
	// main loop is free and may then do what the VMM does next, such as
	// reporting a new mapping as memory; or it returns without calling
	// serve once stop is closed (the channel is closing). QEMU serves
	// the back-end channel from its main loop, so never while it waits
	// for the reply to a request of its own. Nil serves each back-end
	// request between two front-end requests.
	MainLoop func(stop <-chan struct{}, serve func())
}

// Frontend is a vhost-user front-end on one connection. Requests are
// serialised; back-end requests are read on a goroutine of their own and
// handled on the main loop (Options.MainLoop).
type Frontend struct {
	log  *slog.Logger
	opts Options

	mu     sync.Mutex // serialises requests on c
	c      msgConn
	broken error

	features  atomic.Uint64 // last GET_FEATURES
	protocol  atomic.Uint64 // negotiated protocol features
	queueNum  uint64
	memSlots  uint64
	shmem     *ShmemSpace
	ownShmem  bool
	configCh  chan struct{}
	notifiers []vqNotifiers

	traceMu sync.Mutex
	trace   []Request

	memMu  sync.Mutex
	memTab []MemRegion // what the back-end was given (QEMU's shadow table)

	bmu     sync.Mutex
	backend *backendChannel

	closeOnce sync.Once
}

// vqNotifiers are the eventfds QEMU's vhost_virtqueue_init hands the
// back-end before the guest starts the queue: the masked call notifier and
// the error notifier.
type vqNotifiers struct{ masked, err int }

// New wraps an established connection. The Frontend owns conn.
func New(conn *net.UnixConn, opts Options) *Frontend {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Frontend{
		log:      log,
		opts:     opts,
		c:        msgConn{uc: conn},
		shmem:    opts.Shmem,
		configCh: make(chan struct{}, 1),
	}
	if f.shmem == nil {
		f.shmem = NewShmemSpace()
		f.ownShmem = true
	}
	return f
}

// Dial connects to a back-end listening on path.
func Dial(ctx context.Context, path string, opts Options) (*Frontend, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("vhost-user front-end: dial %s: %w", path, err)
	}
	return New(c.(*net.UnixConn), opts), nil
}

// Close closes the connection and the back-end channel and the notifiers,
// and releases the shared memory regions if the Frontend owns them (an
// Options.Shmem space keeps its mappings: they are the device's, as in
// QEMU). It is safe to call more than once.
func (f *Frontend) Close() error {
	var err error
	f.closeOnce.Do(func() {
		err = f.c.uc.Close()
		f.bmu.Lock()
		b := f.backend
		f.backend = nil
		f.bmu.Unlock()
		if b != nil {
			b.close()
		}
		f.mu.Lock()
		f.broken = ErrBroken
		for _, n := range f.notifiers {
			unix.Close(n.masked)
			unix.Close(n.err)
		}
		f.notifiers = nil
		f.mu.Unlock()
		if f.ownShmem {
			f.shmem.Close()
		}
	})
	return err
}

// Trace returns the request codes sent so far, in order.
func (f *Frontend) Trace() []Request {
	f.traceMu.Lock()
	defer f.traceMu.Unlock()
	return slices.Clone(f.trace)
}

// ResetTrace clears the trace.
func (f *Frontend) ResetTrace() {
	f.traceMu.Lock()
	f.trace = nil
	f.traceMu.Unlock()
}

// MemTable is the memory table the back-end has on this connection, as
// QEMU's shadow table keeps it: the last SET_MEM_TABLE, changed by every
// ADD_MEM_REG and REM_MEM_REG the back-end accepted since.
func (f *Frontend) MemTable() []MemRegion {
	f.memMu.Lock()
	defer f.memMu.Unlock()
	return slices.Clone(f.memTab)
}

// Features is the last feature set GET_FEATURES returned.
func (f *Frontend) Features() uint64 { return f.features.Load() }

// ProtocolFeatures is the negotiated protocol feature set.
func (f *Frontend) ProtocolFeatures() uint64 { return f.protocol.Load() }

// HasProtocol reports whether protocol feature bit was negotiated.
func (f *Frontend) HasProtocol(bit uint) bool { return f.protocol.Load()&(1<<bit) != 0 }

// QueueNum is the back-end's GET_QUEUE_NUM answer from Init (1 without MQ).
func (f *Frontend) QueueNum() uint64 { return f.queueNum }

// MaxMemSlots is the back-end's GET_MAX_MEM_SLOTS answer from Init, or
// MaxMemRegions without CONFIGURE_MEM_SLOTS.
func (f *Frontend) MaxMemSlots() uint64 { return f.memSlots }

// ConfigChanges delivers one value per burst of BACKEND_CONFIG_CHANGE_MSG.
func (f *Frontend) ConfigChanges() <-chan struct{} { return f.configCh }

// Shmem is the shared memory address space the Frontend maps into.
func (f *Frontend) Shmem() *ShmemSpace { return f.shmem }

// BackendErr reports why the back-end channel stopped, or nil while it
// runs (or if there is none).
func (f *Frontend) BackendErr() error {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	if f.backend == nil {
		return nil
	}
	return f.backend.err()
}

// onMainLoop runs serve on the main loop (Options.MainLoop), or else
// between two front-end requests.
func (f *Frontend) onMainLoop(stop <-chan struct{}, serve func()) {
	if f.opts.MainLoop != nil {
		f.opts.MainLoop(stop, serve)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	serve()
}

// exchange sends one request and, if wantReply, reads one reply whose
// header it validates (flags exactly REPLY|version, request echoed).
// Reply fds beyond keepFDs are closed; the rest are returned.
func (f *Frontend) exchange(ctx context.Context, req Request, flags uint32, payload []byte, fds []int,
	wantReply bool, keepFDs int) (Header, []byte, []int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return Header{}, nil, nil, fmt.Errorf("%v: %w", req, f.broken)
	}
	f.traceMu.Lock()
	f.trace = append(f.trace, req)
	f.traceMu.Unlock()

	done := f.c.watch(ctx)
	h := Header{Request: uint32(req), Flags: flags, Size: uint32(len(payload))}
	err := f.c.send(h, payload, fds)
	var (
		rh      Header
		rp      []byte
		rfds    []int
		recvErr error
	)
	if err == nil && wantReply {
		rh, rp, rfds, recvErr = f.c.recv(MaxBackendFDs)
	}
	if cerr := done(); cerr != nil {
		closeFDs(rfds)
		f.broken = fmt.Errorf("%w: %v interrupted: %w", ErrBroken, req, cerr)
		return Header{}, nil, nil, fmt.Errorf("%v: %w", req, cerr)
	}
	if err == nil {
		err = recvErr
	}
	if err != nil {
		f.broken = fmt.Errorf("%w: %v: %w", ErrBroken, req, err)
		return Header{}, nil, nil, fmt.Errorf("%v: %w", req, err)
	}
	f.log.Debug("vhost-user request", "req", req, "flags", flags, "size", len(payload), "fds", len(fds))
	if !wantReply {
		return Header{}, nil, nil, nil
	}
	if len(rfds) > keepFDs {
		closeFDs(rfds[keepFDs:])
		rfds = rfds[:keepFDs]
	}
	if rh.Flags != FlagReply|Version {
		closeFDs(rfds)
		return rh, rp, nil, fmt.Errorf("%v: reply flags %#x, want %#x: %w", req, rh.Flags, FlagReply|Version, ErrProtocol)
	}
	if rh.Request != uint32(req) {
		closeFDs(rfds)
		return rh, rp, nil, fmt.Errorf("%v: reply to request %d: %w", req, rh.Request, ErrProtocol)
	}
	return rh, rp, rfds, nil
}

// Raw sends an arbitrary message exactly as given (flags included) and
// waits for one reply, which it returns after checking only that it is a
// well-framed message. Reply fds are closed. For hostile tests.
func (f *Frontend) Raw(ctx context.Context, req uint32, flags uint32, payload []byte, fds []int) (Header, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return Header{}, nil, f.broken
	}
	f.traceMu.Lock()
	f.trace = append(f.trace, Request(req))
	f.traceMu.Unlock()
	done := f.c.watch(ctx)
	err := f.c.send(Header{Request: req, Flags: flags, Size: uint32(len(payload))}, payload, fds)
	var (
		h    Header
		p    []byte
		rfds []int
	)
	if err == nil {
		h, p, rfds, err = f.c.recv(MaxBackendFDs)
		closeFDs(rfds)
	}
	if cerr := done(); cerr != nil {
		err = cerr
	}
	if err != nil {
		f.broken = fmt.Errorf("%w: raw request %d: %w", ErrBroken, req, err)
		return Header{}, nil, fmt.Errorf("raw request %d: %w", req, err)
	}
	return h, p, nil
}

// SendRaw sends an arbitrary message and does not wait for a reply.
func (f *Frontend) SendRaw(ctx context.Context, req uint32, flags uint32, payload []byte, fds []int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return f.broken
	}
	f.traceMu.Lock()
	f.trace = append(f.trace, Request(req))
	f.traceMu.Unlock()
	done := f.c.watch(ctx)
	err := f.c.send(Header{Request: req, Flags: flags, Size: uint32(len(payload))}, payload, fds)
	if cerr := done(); cerr != nil {
		err = cerr
	}
	if err != nil {
		f.broken = fmt.Errorf("%w: raw request %d: %w", ErrBroken, req, err)
		return fmt.Errorf("raw request %d: %w", req, err)
	}
	return nil
}

// send sends a request that has no reply.
func (f *Frontend) send(ctx context.Context, req Request, payload []byte, fds []int) error {
	_, _, _, err := f.exchange(ctx, req, Version, payload, fds, false, 0)
	return err
}

// getU64 sends a request whose reply is a u64.
func (f *Frontend) getU64(ctx context.Context, req Request, payload []byte) (uint64, error) {
	h, p, _, err := f.exchange(ctx, req, Version, payload, nil, true, 0)
	if err != nil {
		return 0, err
	}
	if h.Size != 8 {
		return 0, fmt.Errorf("%v: reply of %d bytes, want 8: %w", req, h.Size, ErrProtocol)
	}
	return ne.Uint64(p), nil
}

// ackMode says whether a request waits for the back-end.
type ackMode int

const (
	noWait    ackMode = iota // plain write
	ackIfAck                 // NEED_REPLY when REPLY_ACK is negotiated, else no wait
	writeSync                // QEMU's vhost_user_write_sync: NEED_REPLY, or GET_FEATURES as a barrier
)

// sendAck sends a request without a reply body, asking for an ack as
// mode and QEMU dictate, and turns a non-zero ack into a *NackError.
func (f *Frontend) sendAck(ctx context.Context, req Request, payload []byte, fds []int, mode ackMode) error {
	needReply := mode != noWait && f.HasProtocol(ProtoReplyAck)
	if !needReply {
		if err := f.send(ctx, req, payload, fds); err != nil {
			return err
		}
		if mode == writeSync {
			_, err := f.GetFeatures(ctx)
			return err
		}
		return nil
	}
	h, p, _, err := f.exchange(ctx, req, Version|FlagNeedReply, payload, fds, true, 0)
	if err != nil {
		return err
	}
	if h.Size != 8 {
		return fmt.Errorf("%v: ack of %d bytes, want 8: %w", req, h.Size, ErrProtocol)
	}
	if v := ne.Uint64(p); v != 0 {
		return &NackError{Request: req, Value: v}
	}
	return nil
}

func (f *Frontend) need(bit uint, req Request) error {
	if !f.HasProtocol(bit) {
		return fmt.Errorf("%v needs protocol feature %d: %w", req, bit, ErrNotNegotiated)
	}
	return nil
}
