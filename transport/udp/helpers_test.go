package udp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/udp"
)

var (
	lo4 = netip.MustParseAddrPort("127.0.0.1:0")
	lo6 = netip.MustParseAddrPort("[::1]:0")
)

// families names the loopback addresses tests run over.
var families = []struct {
	name string
	addr netip.AddrPort
}{{"ipv4", lo4}, {"ipv6", lo6}}

// listen opens a Conn closed at the end of the test.
func listen(t testing.TB, cfg udp.Config) *udp.Conn {
	t.Helper()
	c, err := udp.Listen(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Listen(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// needCapability skips outside CI and fails under CI=true, where every
// capability must be present.
func needCapability(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s", why)
	}
	t.Skip(why)
}

// datagram is a copy of a received message.
type datagram struct {
	data []byte
	from netip.AddrPort
	path int
}

// receive reads until want datagrams arrived (copying them out) or the
// deadline passes.
func receive(t testing.TB, c *udp.Conn, want, bufSize, batch int) []datagram {
	t.Helper()
	msgs := make([]udp.Message, batch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, bufSize)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	defer c.SetReadDeadline(time.Time{})
	var got []datagram
	for len(got) < want {
		n, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("ReadBatch after %d of %d datagrams: %v", len(got), want, err)
		}
		if n < 1 || n > len(msgs) {
			t.Fatalf("ReadBatch returned n=%d for %d messages", n, len(msgs))
		}
		for _, m := range msgs[:n] {
			got = append(got, datagram{append([]byte(nil), m.Buf[:m.N]...), m.Addr, m.Path})
		}
	}
	return got
}

// expectQuiet checks that nothing more arrives within d.
func expectQuiet(t testing.TB, c *udp.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	msgs := []udp.Message{{Buf: make([]byte, udp.MaxDatagram)}}
	n, err := c.ReadBatch(msgs)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected no more datagrams, got n=%d err=%v (%d bytes from %v)", n, err, msgs[0].N, msgs[0].Addr)
	}
}

// payload builds a size-byte datagram tagged with (path, seq).
func payload(size, path, seq int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(path*31 + seq*7 + i)
	}
	if size >= 8 {
		binary.BigEndian.PutUint32(b[0:4], uint32(path))
		binary.BigEndian.PutUint32(b[4:8], uint32(seq))
	}
	return b
}

func tagOf(b []byte) (path, seq int) {
	return int(binary.BigEndian.Uint32(b[0:4])), int(binary.BigEndian.Uint32(b[4:8]))
}

func send(t testing.TB, c *udp.Conn, msgs []udp.Message) {
	t.Helper()
	n, err := c.WriteBatch(msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("WriteBatch(%d messages) = %d, %v", len(msgs), n, err)
	}
}

func netip0() netip.AddrPort { return netip.MustParseAddrPort("0.0.0.0:0") }
