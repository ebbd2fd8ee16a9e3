package vhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// channel is the back-end channel: the socket the front-end handed over
// with SET_BACKEND_REQ_FD, on which the back-end sends requests
// (SHMEM_MAP, CONFIG_CHANGE_MSG) and waits for acknowledgements. One
// request is in flight at a time.
type channel struct {
	mu   sync.Mutex
	c    *conn
	s    *session
	dead bool
}

// replyTimeout bounds the wait for the front-end's acknowledgement when
// the caller's context has no deadline.
const replyTimeout = 5 * time.Second

// ErrRejected is wrapped when the front-end answers a back-end request
// with a non-zero status.
var ErrRejected = errors.New("front-end rejected the request")

func (s *session) setBackendReqFD(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	fd := m.TakeFD(0)
	f := os.NewFile(uintptr(fd), "vhost-backend-channel")
	nc, err := net.FileConn(f)
	f.Close() // FileConn dups the descriptor
	if err != nil {
		return nil, fmt.Errorf("back-end channel: %w", err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("back-end channel is a %T, not a unix socket", nc)
	}
	if old := s.channel.Swap(&channel{c: newConn(uc), s: s}); old != nil {
		old.close()
	}
	return nil, nil
}

// request sends one back-end request and, when REPLY_ACK is negotiated,
// waits for the front-end's u64 acknowledgement. fd (if >= 0) travels
// with the message; the caller keeps ownership of it.
func (ch *channel) request(ctx context.Context, req BackendRequest, payload []byte, fd int) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.dead {
		return fmt.Errorf("%v: back-end channel is closed", req)
	}
	needAck := ch.s.hasProto(ProtoReplyAck)
	h := Header{Request: uint32(req), Flags: flagVersion}
	if needAck {
		h.Flags |= flagNeedReply
	}
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	if err := ch.c.c.SetDeadline(deadline(ctx, replyTimeout)); err != nil {
		return fmt.Errorf("%v: %w", req, err)
	}
	defer ch.c.c.SetDeadline(time.Time{})
	if err := ch.c.write(h, payload, fds); err != nil {
		ch.dead = true
		return fmt.Errorf("%v: %w", req, err)
	}
	if !needAck {
		return nil
	}
	m, err := ch.c.read()
	if err != nil {
		// A lost or garbled reply leaves the stream unusable.
		ch.dead = true
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%v: waiting for acknowledgement: %w", req, err)
	}
	m.Close() // an acknowledgement carries no descriptors
	if m.Request != uint32(req) || m.Flags&flagReply == 0 {
		ch.dead = true
		return fmt.Errorf("%v: reply %v with flags %#x: %w", req, BackendRequest(m.Request), m.Flags, ErrBadHeader)
	}
	v, err := decodeU64(m.Payload)
	if err != nil {
		ch.dead = true
		return fmt.Errorf("%v: %w", req, err)
	}
	if v != 0 {
		return fmt.Errorf("%v: status %d: %w", req, v, ErrRejected)
	}
	return nil
}

func (ch *channel) close() {
	ch.c.close()
}

// shmem sends SHMEM_MAP or SHMEM_UNMAP. Both need the SHMEM protocol
// feature; mapping also needs BACKEND_SEND_FD to carry the descriptor,
// and REPLY_ACK so we know when the guest may touch the pages.
func (s *session) shmem(ctx context.Context, req BackendRequest, m ShmemMapping, fd int) error {
	need := ProtoShmem.Mask() | ProtoBackendReq.Mask() | ProtoReplyAck.Mask()
	if req == BackendShmemMap {
		need |= ProtoBackendSendFD.Mask()
	}
	if s.protoFeatures()&need != need {
		return fmt.Errorf("%v: protocol features %#x: %w", req, need, ErrNotNegotiated)
	}
	if m.Len == 0 || m.ShmOffset%pageSize() != 0 || m.Len%pageSize() != 0 || m.FdOffset%pageSize() != 0 {
		return fmt.Errorf("%v: %+v is not page-aligned", req, m)
	}
	ch := s.channel.Load()
	if ch == nil {
		return fmt.Errorf("%v: no back-end channel", req)
	}
	return ch.request(ctx, req, m.encode(), fd)
}

func pageSize() uint64 { return uint64(unix.Getpagesize()) }
