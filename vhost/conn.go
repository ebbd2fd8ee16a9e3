package vhost

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// Header is the 12-byte vhost-user message header.
type Header struct {
	Request uint32
	Flags   uint32
	Size    uint32
}

// NeedReply reports whether the sender asked for a REPLY_ACK.
func (h Header) NeedReply() bool { return h.Flags&flagNeedReply != 0 }

func (h Header) encode(b []byte) {
	le.PutUint32(b, h.Request)
	le.PutUint32(b[4:], h.Flags)
	le.PutUint32(b[8:], h.Size)
}

// Message is one received message. It owns the descriptors that came
// with it until a handler takes them with TakeFD; Close releases the rest.
type Message struct {
	Header
	Payload []byte
	fds     []int
}

// NumFDs is how many descriptors arrived with the message and are not yet
// taken.
func (m *Message) NumFDs() int {
	n := 0
	for _, fd := range m.fds {
		if fd >= 0 {
			n++
		}
	}
	return n
}

// TakeFD hands descriptor i to the caller, who must close it.
func (m *Message) TakeFD(i int) int {
	fd := m.fds[i]
	m.fds[i] = -1
	return fd
}

// Close closes every descriptor the handler did not take.
func (m *Message) Close() {
	for i, fd := range m.fds {
		if fd >= 0 {
			unix.Close(fd)
			m.fds[i] = -1
		}
	}
}

// Errors that end a connection: after them the stream cannot be trusted to
// be at a message boundary.
var (
	ErrBadHeader   = errors.New("bad message header")
	ErrFDTruncated = errors.New("too many file descriptors (MSG_CTRUNC)")
)

// conn frames vhost-user messages on a unix stream socket. Reads happen on
// one goroutine; writes are serialised.
type conn struct {
	c   *net.UnixConn
	wmu sync.Mutex
	oob []byte
}

func newConn(c *net.UnixConn) *conn {
	return &conn{c: c, oob: make([]byte, unix.CmsgSpace(maxFDs*4))}
}

// read receives one message. The header is read with recvmsg on its own, so
// descriptors (which the sender attaches to the header's first byte) stay
// with their message; then exactly Size payload bytes follow.
func (c *conn) read() (*Message, error) {
	var hdr [headerSize]byte
	m := &Message{}
	got := 0
	for got < headerSize {
		n, oobn, flags, _, err := c.c.ReadMsgUnix(hdr[got:], c.oob)
		if oobn > 0 {
			fds, perr := parseRights(c.oob[:oobn])
			m.fds = append(m.fds, fds...)
			if perr != nil {
				m.Close()
				return nil, perr
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			m.Close()
			return nil, ErrFDTruncated
		}
		if err != nil {
			m.Close()
			if got > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if n == 0 {
			m.Close()
			if got > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, io.EOF
		}
		got += n
	}
	m.Header = Header{Request: le.Uint32(hdr[:]), Flags: le.Uint32(hdr[4:]), Size: le.Uint32(hdr[8:])}
	if err := m.validateHeader(); err != nil {
		m.Close()
		return nil, err
	}
	if len(m.fds) > maxFDs {
		m.Close()
		return nil, ErrFDTruncated
	}
	m.Payload = make([]byte, m.Size)
	if _, err := io.ReadFull(c.c, m.Payload); err != nil {
		m.Close()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d-byte payload of %v: %w", m.Size, Request(m.Request), err)
	}
	return m, nil
}

func (m *Message) validateHeader() error {
	switch {
	case m.Flags&flagVersionMask != flagVersion:
		return fmt.Errorf("%w: version %d", ErrBadHeader, m.Flags&flagVersionMask)
	case m.Flags&flagReserved != 0:
		return fmt.Errorf("%w: reserved flags %#x", ErrBadHeader, m.Flags)
	case m.Size > maxPayload:
		return fmt.Errorf("%w: payload of %d bytes", ErrBadHeader, m.Size)
	}
	return nil
}

// parseRights extracts SCM_RIGHTS descriptors; it returns every descriptor
// it found even on error so the caller can close them.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		fds = append(fds, got...)
		if err != nil {
			return fds, fmt.Errorf("SCM_RIGHTS: %w", err)
		}
	}
	return fds, nil
}

// write sends one message, attaching fds to its first byte as the protocol
// requires.
func (c *conn) write(h Header, payload []byte, fds []int) error {
	h.Size = uint32(len(payload))
	buf := make([]byte, headerSize+len(payload))
	h.encode(buf)
	copy(buf[headerSize:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, _, err := c.c.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return io.ErrShortWrite
	}
	return nil
}

func (c *conn) close() error { return c.c.Close() }
