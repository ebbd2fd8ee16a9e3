package remote_test

import (
	"fmt"
	"testing"

	"github.com/vstellar/vstellar/fabric"
)

// BenchmarkWriteRoundTrip: one WRITE at a time across two fabrics on
// loopback, posted and completed: the hot path the counters ride on
// (Stats' per-path RTT recording, the endpoint's byte counts).
func BenchmarkWriteRoundTrip(b *testing.B) {
	for _, n := range []int{64, 4000, 64 << 10} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			x, y := pair(b, opts{})
			connect(b, x, y, 1, 2, 7, 7)
			w := newWaiter()
			v, _ := buffer(b, n)
			r := request(x, y, 1, 2, fabric.OpWrite)
			r.Len, r.Local = uint64(n), v
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				x.f.Post(r, w)
				if res := <-w; res.o != fabric.OutcomeOK {
					b.Fatal(res.o)
				}
			}
		})
	}
}
