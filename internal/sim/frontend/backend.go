package frontend

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// backendChannel serves the back-end's requests on the socket passed with
// SET_BACKEND_REQ_FD. A goroutine reads them; each is handled and
// acknowledged on the front-end's main loop (Options.MainLoop), as QEMU
// does: never while a front-end request waits for its reply.
type backendChannel struct {
	f    *Frontend
	c    msgConn
	stop chan struct{} // closed when the channel is being closed
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	stopErr error
}

func newBackendChannel(f *Frontend, fd int) (*backendChannel, error) {
	file := os.NewFile(uintptr(fd), "vhost-user-backend-channel")
	nc, err := net.FileConn(file)
	file.Close() // FileConn dup'ed it
	if err != nil {
		return nil, fmt.Errorf("back-end channel: %w", err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, errors.New("back-end channel: not a unix socket")
	}
	return &backendChannel{f: f, c: msgConn{uc: uc}, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// close stops the channel and waits for its goroutine, which gives up
// waiting for the main loop.
func (b *backendChannel) close() {
	b.once.Do(func() { close(b.stop) })
	b.c.uc.Close()
	<-b.done
}

func (b *backendChannel) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopErr
}

func (b *backendChannel) serve() {
	defer close(b.done)
	err := b.loop()
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	if err != nil {
		b.f.log.Error("vhost-user back-end channel failed", "err", err)
	}
	b.mu.Lock()
	b.stopErr = err
	if b.stopErr == nil {
		b.stopErr = net.ErrClosed
	}
	b.mu.Unlock()
	b.c.uc.Close()
}

func (b *backendChannel) loop() error {
	for {
		h, p, fds, err := b.c.recv(MaxBackendFDs)
		if err != nil {
			return err
		}
		served := false
		b.f.onMainLoop(b.stop, func() {
			served = true
			err = b.serveOne(h, p, fds)
		})
		if !served {
			closeFDs(fds)
			return net.ErrClosed
		}
		if err != nil {
			return err
		}
	}
}

// serveOne handles one back-end request, closes its descriptors (mappings
// keep their own) and acknowledges it if asked to.
func (b *backendChannel) serveOne(h Header, p []byte, fds []int) error {
	if h.Flags&FlagVersionMask != Version || h.Flags&^(FlagVersionMask|FlagNeedReply) != 0 {
		closeFDs(fds)
		return fmt.Errorf("back-end request %v with flags %#x: %w", BackendRequest(h.Request), h.Flags, ErrProtocol)
	}
	herr := b.handle(BackendRequest(h.Request), p, fds)
	closeFDs(fds)
	if herr != nil {
		b.f.log.Warn("vhost-user back-end request refused", "req", BackendRequest(h.Request), "err", herr)
	} else {
		b.f.log.Debug("vhost-user back-end request", "req", BackendRequest(h.Request))
	}
	if h.Flags&FlagNeedReply == 0 {
		return nil
	}
	var ack uint64
	if herr != nil {
		ack = 1
	}
	// As QEMU: same request, NEED_REPLY cleared, REPLY set.
	rh := Header{Request: h.Request, Flags: h.Flags&^FlagNeedReply | FlagReply, Size: 8}
	if err := b.c.send(rh, u64Payload(ack), nil); err != nil {
		return fmt.Errorf("replying to %v: %w", BackendRequest(h.Request), err)
	}
	return nil
}

func (b *backendChannel) handle(req BackendRequest, p []byte, fds []int) error {
	switch req {
	case BackendConfigChange:
		if !b.f.HasProtocol(ProtoConfig) {
			return fmt.Errorf("%v without PROTOCOL_F_CONFIG: %w", req, ErrNotNegotiated)
		}
		if len(p) != 0 || len(fds) != 0 {
			return fmt.Errorf("%v with %d payload bytes and %d fds: %w", req, len(p), len(fds), ErrProtocol)
		}
		select {
		case b.f.configCh <- struct{}{}:
		default:
		}
		if cb := b.f.opts.OnConfigChange; cb != nil {
			cb()
		}
		return nil
	case BackendShmemMap, BackendShmemUnmap:
		if !b.f.HasProtocol(ProtoShmem) {
			return fmt.Errorf("%v without PROTOCOL_F_SHMEM: %w", req, ErrNotNegotiated)
		}
		if len(p) != shmemMappingSize {
			return fmt.Errorf("%v with %d payload bytes, want %d: %w", req, len(p), shmemMappingSize, ErrProtocol)
		}
		m := decodeShmemMapping(p)
		if req == BackendShmemUnmap {
			return b.f.shmem.Unmap(m)
		}
		if len(fds) != 1 {
			return fmt.Errorf("%v with %d fds, want 1: %w", req, len(fds), ErrProtocol)
		}
		return b.f.shmem.Map(m, fds[0])
	}
	return fmt.Errorf("unsupported back-end request %v", req)
}
