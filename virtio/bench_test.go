package virtio

import (
	"fmt"
	"testing"
)

// BenchmarkPopPush measures one request round trip through a 256-entry
// queue: driver Add+Publish, device PopInto (full validation and
// translation) + Push + NeedsNotify, driver GetUsed. ns/op is per request.
// BenchmarkDevicePop isolates the device's share.
func BenchmarkPopPush(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("%ddesc", n), func(b *testing.B) {
			e := newEnv(b, 256)
			drv, dev := e.pair(b, true)
			rd := make([]Buffer, n-n/2)
			wr := make([]Buffer, n/2)
			for i := range rd {
				rd[i] = Buffer{r1Base + 4096*uint64(i), 512}
			}
			for i := range wr {
				wr[i] = Buffer{r1Base + 0x10000 + 4096*uint64(i), 512}
			}
			var c Chain
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := drv.Add(rd, wr); err != nil {
					b.Fatal(err)
				}
				drv.Publish()
				ok, err := dev.PopInto(&c)
				if !ok || err != nil {
					b.Fatal(ok, err)
				}
				dev.Push(c.Head, c.WritableLen)
				dev.NeedsNotify()
				if _, _, ok := drv.GetUsed(); !ok {
					b.Fatal("no used")
				}
			}
		})
	}
}

// BenchmarkDevicePop isolates the device side: the driver fills the ring
// once per 256 requests outside the timer.
func BenchmarkDevicePop(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("%ddesc", n), func(b *testing.B) {
			const size = 256
			e := newEnv(b, size)
			drv, dev := e.pair(b, true)
			bufs := make([]Buffer, n)
			for i := range bufs {
				bufs[i] = Buffer{r1Base + 4096*uint64(i), 512}
			}
			var c Chain
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%(size/4) == 0 {
					b.StopTimer()
					for {
						if _, _, ok := drv.GetUsed(); !ok {
							break
						}
					}
					for drv.NumFree() >= n {
						drv.Add(bufs[:n-n/2], bufs[n-n/2:])
					}
					drv.Publish()
					b.StartTimer()
				}
				ok, err := dev.PopInto(&c)
				if !ok || err != nil {
					b.Fatal(ok, err)
				}
				dev.Push(c.Head, c.WritableLen)
			}
		})
	}
}
