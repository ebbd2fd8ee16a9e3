package transport_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// BenchmarkConnWrite measures the core alone: 64 KiB WRITEs from one
// connection to another over a perfect simulated link (no sockets), in
// 8892-byte packets (MTU 9000). b.SetBytes makes the result the core's
// throughput; the simulator's own cost is included.
func BenchmarkConnWrite(b *testing.B) {
	cfg := transport.Config{Tenant: 7, MaxPayload: 8892, LocalConn: 1, LocalToken: 1, RemoteConn: 2, RemoteToken: 2}
	ca, err := transport.NewConn(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	cfg.LocalConn, cfg.LocalToken, cfg.RemoteConn, cfg.RemoteToken = 2, 2, 1, 1
	cb, err := transport.NewConn(cfg, discard{})
	if err != nil {
		b.Fatal(err)
	}
	a, peer := &endpoint{c: ca}, &endpoint{c: cb}
	var data transport.Source = bytesSrc(make([]byte, 64<<10))
	sim := netsim.New(1, a, peer, &netsim.Link{Delay: time.Microsecond}, &netsim.Link{Delay: time.Microsecond})
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	posted, done := 0, 0
	var comps []transport.Completion
	b.ResetTimer()
	sim.Run(time.Hour, func() bool {
		comps = a.c.Completions(comps[:0])
		done += len(comps)
		for posted-done < maxInMsgs && posted < b.N {
			if _, err := a.c.Post(transport.Message{Op: wire.OpWrite, Len: 64 << 10, Src: data, RKey: 0x1234, Token: uint64(posted)}); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		return done == b.N
	})
}

// discard is a sink that accepts everything and keeps nothing.
type discard struct{}

func (discard) Begin(*transport.Inbound) (wire.NAK, uint8)    { return wire.NAKNone, 0 }
func (discard) Place(*transport.Inbound, uint64, []byte) bool { return true }
func (discard) Commit(*transport.Inbound) wire.NAK            { return wire.NAKNone }
