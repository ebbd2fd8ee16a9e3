package udp_test

import (
	"fmt"
	"testing"

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
