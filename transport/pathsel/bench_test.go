package pathsel_test

import (
	"testing"

	"github.com/vstellar/vstellar/transport/pathsel"
)

// BenchmarkSelectPath measures one decision over 256 paths with an ACK
// for every packet and a loss every 64, as a busy connection makes them.
func BenchmarkSelectPath(b *testing.B) {
	for _, k := range pathsel.Kinds() {
		b.Run(k.String(), func(b *testing.B) {
			s := newSel(b, pathsel.Config{Kind: k, Paths: 256, Seed: 1})
			b.ReportAllocs()
			i := uint32(0)
			for b.Loop() {
				i++
				now := int64(i) * 100
				p := s.SelectPath(now, i, false)
				if i%64 == 0 {
					s.OnLoss(now, p)
				} else {
					s.OnAck(now, p, 10*us+int64(i%17)*us)
				}
			}
		})
	}
}
