package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Errors reported (wrapped) by the front-end.
var (
	// ErrProtocol means the back-end sent something the protocol forbids:
	// bad reply flags, a wrong request echo, a wrong size, missing fds.
	ErrProtocol = errors.New("vhost-user protocol violation")
	// ErrBroken means an earlier failure left the connection unusable.
	ErrBroken = errors.New("vhost-user connection broken")
	// ErrNotNegotiated means the request needs a protocol feature the
	// back-end did not offer.
	ErrNotNegotiated = errors.New("protocol feature not negotiated")
)

// NackError is a non-zero REPLY_ACK.
type NackError struct {
	Request Request
	Value   uint64
}

func (e *NackError) Error() string {
	return fmt.Sprintf("back-end refused %v (ack %#x)", e.Request, e.Value)
}

// msgConn moves whole vhost-user messages over a unix stream socket. It is
// not safe for concurrent use; callers serialise.
type msgConn struct {
	uc *net.UnixConn
}

// send writes header and payload with one sendmsg that carries fds as
// SCM_RIGHTS. Should the kernel accept only part of the bytes, the rest
// follows without fds (the fds went with the first byte, as the spec asks).
func (c *msgConn) send(h Header, payload []byte, fds []int) error {
	buf := make([]byte, HeaderSize+len(payload))
	h.encode(buf)
	copy(buf[HeaderSize:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.uc.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return fmt.Errorf("sendmsg: %w", err)
	}
	if oobn != len(oob) {
		return fmt.Errorf("sendmsg sent %d of %d bytes of ancillary data", oobn, len(oob))
	}
	if n < len(buf) {
		if _, err := c.uc.Write(buf[n:]); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

// recv reads one message: recvmsg of exactly the 12 header bytes with room
// for maxFDs descriptors, a check for MSG_CTRUNC, then exactly Size payload
// bytes. Any fds received are returned; on error they are closed.
func (c *msgConn) recv(maxFDs int) (Header, []byte, []int, error) {
	var hb [HeaderSize]byte
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(hb[:], oob)
	fds := parseFDs(oob[:oobn])
	fail := func(err error) (Header, []byte, []int, error) {
		closeFDs(fds)
		return Header{}, nil, nil, err
	}
	if err != nil {
		return fail(fmt.Errorf("recvmsg: %w", err))
	}
	if n == 0 {
		return fail(io.EOF)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return fail(fmt.Errorf("recvmsg: ancillary data truncated (more than %d fds): %w", maxFDs, ErrProtocol))
	}
	if n < HeaderSize {
		if _, err := io.ReadFull(c.uc, hb[n:]); err != nil {
			return fail(fmt.Errorf("reading header: %w", err))
		}
	}
	h := decodeHeader(hb[:])
	if h.Size > maxPayload {
		return fail(fmt.Errorf("message %d with %d-byte payload: %w", h.Request, h.Size, ErrProtocol))
	}
	payload := make([]byte, h.Size)
	if _, err := io.ReadFull(c.uc, payload); err != nil {
		return fail(fmt.Errorf("reading %d-byte payload: %w", h.Size, err))
	}
	return h, payload, fds, nil
}

func parseFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// watch makes blocking socket I/O honour ctx: its deadline becomes the
// socket deadline and cancellation forces a deadline in the past. The
// returned function undoes that and reports whether ctx interrupted.
func (c *msgConn) watch(ctx context.Context) func() error {
	if dl, ok := ctx.Deadline(); ok {
		c.uc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.uc.SetDeadline(time.Unix(1, 0)) })
	return func() error {
		stop()
		c.uc.SetDeadline(time.Time{})
		return ctx.Err()
	}
}
