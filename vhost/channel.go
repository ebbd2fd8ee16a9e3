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
// (SHMEM_MAP, CONFIG_CHANGE_MSG) and the front-end acknowledges them in
// order. Acknowledgements are read by a goroutine of the channel's own and
// handed to the waiting requests in order, so a request can stop waiting
// (its context ended) without leaving the stream out of step: its
// acknowledgement, when it comes, is read and dropped.
//
// QEMU serves this socket from its main loop, and not while it waits for
// our reply to one of its requests; so whoever waits here must never be
// the goroutine that answers the front-end (see session.startActivation).
type channel struct {
	c *conn

	wmu sync.Mutex // one request on the wire at a time, queued in order

	mu      sync.Mutex
	pending []chan ack // requests waiting for an acknowledgement, in order
	err     error      // set once the stream is unusable
	done    chan struct{}
}

type ack struct {
	req    BackendRequest
	status uint64
	err    error
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
	if old := s.channel.Swap(newChannel(uc)); old != nil {
		old.close()
	}
	return nil, nil
}

func newChannel(uc *net.UnixConn) *channel {
	ch := &channel{c: newConn(uc), done: make(chan struct{})}
	go ch.readAcks()
	return ch
}

// readAcks reads acknowledgements until the stream ends, handing each to
// the oldest waiting request. Anything else on the stream, or an
// acknowledgement nobody asked for, makes the channel unusable.
func (ch *channel) readAcks() {
	defer close(ch.done)
	for {
		m, err := ch.c.read()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = io.ErrUnexpectedEOF
			}
			ch.fail(fmt.Errorf("back-end channel: %w", err))
			return
		}
		m.Close() // an acknowledgement carries no descriptors
		a := ack{req: BackendRequest(m.Request)}
		a.status, a.err = decodeU64(m.Payload)
		if m.Flags&flagReply == 0 {
			a.err = fmt.Errorf("%v with flags %#x is not a reply: %w", a.req, m.Flags, ErrBadHeader)
		}
		ch.mu.Lock()
		if len(ch.pending) == 0 {
			ch.mu.Unlock()
			ch.fail(fmt.Errorf("back-end channel: unexpected %v: %w", a.req, ErrBadHeader))
			return
		}
		w := ch.pending[0]
		ch.pending = ch.pending[1:]
		ch.mu.Unlock()
		w <- a // buffered: a waiter that left does not block us
		if a.err != nil {
			ch.fail(fmt.Errorf("back-end channel: %w", a.err))
			return
		}
	}
}

// fail makes the channel unusable and tells every waiting request.
func (ch *channel) fail(err error) {
	ch.mu.Lock()
	if ch.err == nil {
		ch.err = err
	}
	pending := ch.pending
	ch.pending = nil
	ch.mu.Unlock()
	for _, w := range pending {
		w <- ack{err: err}
	}
	ch.c.close()
}

// request sends one back-end request and, when REPLY_ACK is negotiated
// (needAck), waits for the front-end's u64 acknowledgement until ctx ends
// (or replyTimeout, when ctx has no deadline). fd (if >= 0) travels with
// the message; the caller keeps ownership of it.
func (ch *channel) request(ctx context.Context, req BackendRequest, payload []byte, fd int, needAck bool) error {
	h := Header{Request: uint32(req), Flags: flagVersion}
	if needAck {
		h.Flags |= flagNeedReply
	}
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	w := make(chan ack, 1)
	ch.wmu.Lock()
	ch.mu.Lock()
	if ch.err != nil {
		err := ch.err
		ch.mu.Unlock()
		ch.wmu.Unlock()
		return fmt.Errorf("%v: %w", req, err)
	}
	if needAck {
		// Queued before the write, so the reader finds the waiter
		// however fast the front-end answers.
		ch.pending = append(ch.pending, w)
	}
	ch.mu.Unlock()
	ch.c.c.SetWriteDeadline(deadline(ctx, replyTimeout))
	err := ch.c.write(h, payload, fds)
	ch.c.c.SetWriteDeadline(time.Time{})
	ch.wmu.Unlock()
	if err != nil {
		ch.fail(fmt.Errorf("back-end channel: %v: %w", req, err))
		return fmt.Errorf("%v: %w", req, err)
	}
	if !needAck {
		return nil
	}
	wait := time.NewTimer(time.Until(deadline(ctx, replyTimeout)))
	defer wait.Stop()
	var a ack
	select {
	case a = <-w:
	case <-ctx.Done():
		return fmt.Errorf("%v: waiting for acknowledgement: %w", req, ctx.Err())
	case <-wait.C:
		return fmt.Errorf("%v: waiting for acknowledgement: %w", req, os.ErrDeadlineExceeded)
	}
	switch {
	case a.err != nil:
		return fmt.Errorf("%v: waiting for acknowledgement: %w", req, a.err)
	case a.req != req:
		ch.fail(fmt.Errorf("back-end channel: %v acknowledged as %v: %w", req, a.req, ErrBadHeader))
		return fmt.Errorf("%v: acknowledged as %v: %w", req, a.req, ErrBadHeader)
	case a.status != 0:
		return fmt.Errorf("%v: status %d: %w", req, a.status, ErrRejected)
	}
	return nil
}

// close ends the channel and waits for its reader.
func (ch *channel) close() {
	ch.fail(errors.New("back-end channel closed"))
	<-ch.done
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
	return ch.request(ctx, req, m.encode(), fd, s.hasProto(ProtoReplyAck))
}

func pageSize() uint64 { return uint64(unix.Getpagesize()) }
