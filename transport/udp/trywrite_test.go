package udp_test

import (
	"errors"
	"testing"

	"github.com/vstellar/vstellar/transport/udp"
)

// TestTryWriteBatch: with room in the socket, TryWriteBatch sends
// everything, like WriteBatch, allocating nothing, and rejects a bad
// message the same way.
func TestTryWriteBatch(t *testing.T) {
	a, b := listen(t, udp.Config{Addr: lo4, Paths: 2}), listen(t, udp.Config{Addr: lo4})
	msgs := make([]udp.Message, 6)
	for i := range msgs {
		msgs[i] = udp.Message{Buf: payload(300, 0, i), N: 300, Addr: b.LocalAddr(0), Path: i % 2}
	}
	if n, err := a.TryWriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("TryWriteBatch = %d, %v; want %d, nil", n, err, len(msgs))
	}
	got := receive(t, b, len(msgs), 512, 8)
	for i, d := range got {
		if _, s := tagOf(d.data); s != i {
			t.Fatalf("datagram %d is %d", i, s)
		}
	}
	if avg := testing.AllocsPerRun(50, func() { a.TryWriteBatch(msgs) }); avg != 0 {
		t.Fatalf("%.1f allocations per TryWriteBatch, want 0", avg)
	}
	msgs[2].Path = 7
	if n, err := a.TryWriteBatch(msgs); n != 2 || !errors.Is(err, udp.ErrBadMessage) {
		t.Fatalf("TryWriteBatch with a bad third message = %d, %v; want 2, ErrBadMessage", n, err)
	}
}
