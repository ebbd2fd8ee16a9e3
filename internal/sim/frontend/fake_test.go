package frontend

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A scripted fake back-end in the spirit of nltest: the test's script
// reads what the front-end sent and answers by hand, with its own framing
// code, so the front-end's encoding is checked against literal bytes.

type rawMsg struct {
	req, flags, size uint32
	payload          []byte
	fds              []int
}

type fakeBackend struct {
	t *testing.T
	c *net.UnixConn
}

func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conv(fds[0]), conv(fds[1])
}

// newTestPair returns a Frontend and the fake back-end at the other end.
func newTestPair(t *testing.T, opts Options) (*Frontend, *fakeBackend) {
	a, b := socketPair(t)
	f := New(a, opts)
	t.Cleanup(func() { f.Close(); b.Close() })
	return f, &fakeBackend{t: t, c: b}
}

// run runs script as the back-end while fn drives the front-end.
func (b *fakeBackend) run(script func(b *fakeBackend), fn func()) {
	b.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		script(b)
	}()
	fn()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.t.Fatal("fake back-end script did not finish")
	}
}

func readRaw(t *testing.T, c *net.UnixConn) (rawMsg, error) {
	var hb [12]byte
	oob := make([]byte, unix.CmsgSpace(8*4))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := c.ReadMsgUnix(hb[:], oob)
	if err != nil {
		return rawMsg{}, err
	}
	if n < 12 {
		if _, err := io.ReadFull(c, hb[n:]); err != nil {
			return rawMsg{}, err
		}
	}
	m := rawMsg{req: ne.Uint32(hb[0:]), flags: ne.Uint32(hb[4:]), size: ne.Uint32(hb[8:])}
	m.fds = parseFDs(oob[:oobn])
	m.payload = make([]byte, m.size)
	if _, err := io.ReadFull(c, m.payload); err != nil {
		return rawMsg{}, err
	}
	return m, nil
}

func writeRaw(c *net.UnixConn, req, flags uint32, payload []byte, fds []int) error {
	b := make([]byte, 12+len(payload))
	ne.PutUint32(b[0:], req)
	ne.PutUint32(b[4:], flags)
	ne.PutUint32(b[8:], uint32(len(payload)))
	copy(b[12:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	return err
}

// expect reads one message and checks its code, flags and payload bytes
// (payload nil = do not check). The caller owns the returned fds.
func (b *fakeBackend) expect(req Request, flags uint32, payload []byte) rawMsg {
	b.t.Helper()
	m, err := readRaw(b.t, b.c)
	if err != nil {
		b.t.Errorf("waiting for %v: %v", req, err)
		return m
	}
	if Request(m.req) != req || m.flags != flags {
		b.t.Errorf("got %v flags %#x, want %v flags %#x", Request(m.req), m.flags, req, flags)
	}
	if payload != nil && !bytes.Equal(m.payload, payload) {
		b.t.Errorf("%v payload\n got % x\nwant % x", req, m.payload, payload)
	}
	return m
}

func (b *fakeBackend) reply(req Request, payload []byte, fds ...int) {
	b.t.Helper()
	if err := writeRaw(b.c, uint32(req), FlagReply|Version, payload, fds); err != nil {
		b.t.Errorf("reply to %v: %v", req, err)
	}
}

func (b *fakeBackend) replyU64(req Request, v uint64) { b.reply(req, le64(v)) }

// Literal little-endian byte builders (these tests run on little-endian
// hosts, where native order is little-endian).
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	if out == nil {
		out = []byte{}
	}
	return out
}

func countFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func eventfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
