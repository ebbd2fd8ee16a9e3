package udp

import (
	"context"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestTryWriteBatchNeverWaits: TryWriteBatch sends nothing, and says so
// without an error, while another write holds the Conn's writer; and a
// send that would wait for buffer space ends the attempt (blocked) where
// WriteBatch's attempt asks to wait. The full buffer is a datagram
// socket pair whose reader never reads (UDP on loopback hardly ever
// fills its buffer).
func TestTryWriteBatchNeverWaits(t *testing.T) {
	c, err := Listen(context.Background(), Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs := []Message{{Buf: make([]byte, 8), N: 8, Addr: c.LocalAddr(0)}}
	c.wr.mu.Lock()
	n, err := c.TryWriteBatch(msgs)
	c.wr.mu.Unlock()
	if n != 0 || err != nil {
		t.Fatalf("TryWriteBatch with the writer busy = %d, %v; want 0, nil", n, err)
	}

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	w := &c.wr
	buf := make([]byte, 64)
	w.iovs[0] = unix.Iovec{Base: unsafe.SliceData(buf)}
	w.iovs[0].SetLen(len(buf))
	w.hdrs[0] = unix.Mmsghdr{}
	w.hdrs[0].Hdr.Iov = &w.iovs[0]
	w.hdrs[0].Hdr.SetIovlen(1)
	w.fd, w.nowait, w.blocked = fds[0], true, false
	for sent := 0; !w.blocked; sent++ {
		if sent > 1<<16 {
			t.Fatal("the socket pair never filled")
		}
		w.nh, w.pos, w.err = 1, 0, nil
		if !w.attempt(0) || w.err != nil {
			t.Fatalf("non-waiting attempt %d asked to wait (or failed: %v)", sent, w.err)
		}
	}
	if w.pos != 0 {
		t.Fatalf("a blocked attempt counted %d headers sent", w.pos)
	}
	w.nowait, w.blocked = false, false
	w.nh, w.pos = 1, 0
	if w.attempt(0) || w.blocked {
		t.Fatal("WriteBatch's attempt on a full socket did not ask to wait")
	}
	clear(w.iovs[:1])
}
