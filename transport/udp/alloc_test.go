package udp_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/udp"
)

// pair is a sender and receiver with preallocated batches, for the
// allocation test and the benchmarks.
type pair struct {
	a, b    *udp.Conn
	out, in []udp.Message
}

func newPair(t testing.TB, cfg udp.Config, batch, size int) *pair {
	cfg.RecvBuffer = 4 << 20
	p := &pair{a: listen(t, cfg), b: listen(t, cfg)}
	p.out = make([]udp.Message, batch)
	for i := range p.out {
		path := i * cfg.Paths / batch // group by path: one sendmmsg per path
		p.out[i] = udp.Message{Buf: payload(size, path, i), N: size, Addr: p.b.LocalAddr(path), Path: path}
	}
	p.in = make([]udp.Message, batch)
	for i := range p.in {
		p.in[i].Buf = make([]byte, size)
	}
	return p
}

// exchange sends one batch and reads until all of it arrived.
func (p *pair) exchange(t testing.TB) {
	n, err := p.a.WriteBatch(p.out)
	if err != nil || n != len(p.out) {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	for got := 0; got < len(p.out); {
		n, err := p.b.ReadBatch(p.in)
		if err != nil {
			t.Fatalf("ReadBatch after %d: %v", got, err)
		}
		got += n
	}
}

// TestZeroAllocs: a steady-state batch send and receive allocates
// nothing, with and without offloads, on one path and several.
func TestZeroAllocs(t *testing.T) {
	for _, mode := range offloadModes {
		for _, paths := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/paths=%d", mode.name, paths), func(t *testing.T) {
				cfg := udp.Config{Addr: lo4, Paths: paths, DisableGSO: mode.off, DisableGRO: mode.off}
				p := newPair(t, cfg, 32, 1200)
				for range 10 {
					p.exchange(t)
				}
				if avg := testing.AllocsPerRun(200, func() { p.exchange(t) }); avg != 0 {
					t.Fatalf("%.2f allocations per batch of 32, want 0", avg)
				}
			})
		}
	}
}

// TestDeadlineWakeupAllocs: a ReadBatch that returns because its read
// deadline passed (how the endpoint's loop wakes up for timers and new
// work) allocates nothing, and says so with os.ErrDeadlineExceeded.
func TestDeadlineWakeupAllocs(t *testing.T) {
	for _, paths := range []int{1, 4} {
		c := listen(t, udp.Config{Addr: lo4, Paths: paths})
		msgs := make([]udp.Message, 4)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 1500)
		}
		past := time.Unix(1, 0)
		wake := func() {
			if err := c.SetReadDeadline(past); err != nil {
				t.Fatal(err)
			}
			if n, err := c.ReadBatch(msgs); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("paths %d: ReadBatch past its deadline = %d, %v", paths, n, err)
			}
		}
		wake()
		if avg := testing.AllocsPerRun(100, wake); avg != 0 {
			t.Fatalf("paths %d: %.2f allocations per deadline wake-up, want 0", paths, avg)
		}
	}
}

// BenchmarkLoopback measures packets per second over loopback for batch
// sizes 1, 8 and 32 (1200-byte datagrams; one op = one batch sent and
// received), with offloads and without.
func BenchmarkLoopback(b *testing.B) {
	for _, mode := range offloadModes {
		for _, batch := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode.name, batch), func(b *testing.B) {
				cfg := udp.Config{Addr: lo4, Paths: 1, DisableGSO: mode.off, DisableGRO: mode.off}
				p := newPair(b, cfg, batch, 1200)
				p.exchange(b)
				b.ReportAllocs()
				b.SetBytes(int64(batch * 1200))
				b.ResetTimer()
				for b.Loop() {
					p.exchange(b)
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pkts/s")
			})
		}
	}
}
