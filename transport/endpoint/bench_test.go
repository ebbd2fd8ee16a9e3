package endpoint_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// benchPair is two running endpoints on loopback joined by connection
// 1 (a) to 2 (b); a's completions arrive on done.
type benchPair struct {
	a    *endpoint.Endpoint
	done chan transport.Completion
}

func newBenchPair(b *testing.B, newEP func(*udp.Conn) *endpoint.Endpoint) *benchPair {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var eps [2]*endpoint.Endpoint
	var socks [2]*udp.Conn
	for i := range eps {
		s, err := udp.Listen(ctx, udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), RecvBuffer: 8 << 20, SendBuffer: 8 << 20})
		if err != nil {
			b.Fatal(err)
		}
		socks[i], eps[i] = s, newEP(s)
	}
	p := &benchPair{a: eps[0], done: make(chan transport.Completion, 1<<12)}
	for i := range eps {
		local, remote := uint32(1+i), uint32(2-i)
		c, err := transport.NewConn(transport.Config{Tenant: 1, LocalConn: local, LocalToken: uint64(local), RemoteConn: remote, RemoteToken: uint64(remote), MaxPayload: 8192},
			&memSink{mem: make([]byte, 1<<20)})
		if err != nil {
			b.Fatal(err)
		}
		var done func(transport.Completion)
		if i == 0 {
			done = func(c transport.Completion) { p.done <- c }
		}
		if err := eps[i].Add(local, c, socks[1-i].LocalAddr(0), 1, done); err != nil {
			b.Fatal(err)
		}
	}
	stopped := make(chan struct{}, 2)
	for _, e := range eps {
		go func() { e.Run(ctx); stopped <- struct{}{} }()
	}
	b.Cleanup(func() {
		cancel()
		<-stopped
		<-stopped
		for _, s := range socks {
			s.Close()
		}
	})
	return p
}

// BenchmarkEndpoint measures Submit through the loop between two
// endpoints on loopback: an 8-byte WRITE's round trip, one at a time
// (ns/op is the round trip), and a stream of 64 KiB WRITEs, 32 in
// flight (the loop's own path: too large to send inline).
func BenchmarkEndpoint(b *testing.B) {
	for _, m := range benchModes {
		b.Run(m.name+"/pingpong", func(b *testing.B) {
			p := newBenchPair(b, m.newEP)
			src := src(make([]byte, 8))
			for b.Loop() {
				if err := p.a.Submit(1, transport.Message{Op: wire.OpWrite, Len: 8, Src: src}); err != nil {
					b.Fatal(err)
				}
				if c := <-p.done; c.Status != transport.StatusOK {
					b.Fatal(c)
				}
			}
		})
		b.Run(m.name+"/stream64k", func(b *testing.B) {
			p := newBenchPair(b, m.newEP)
			const size, window = 64 << 10, 32
			src := src(make([]byte, size))
			submit := func(i int) {
				m := transport.Message{Op: wire.OpWrite, Len: size, Src: src, RAddr: uint64(i%8) * size}
				if err := p.a.Submit(1, m); err != nil {
					b.Fatal(err)
				}
			}
			for i := range window {
				submit(i)
			}
			b.SetBytes(size)
			i := window
			for b.Loop() {
				if c := <-p.done; c.Status != transport.StatusOK {
					b.Fatal(c)
				}
				submit(i)
				i++
			}
			for range window {
				<-p.done
			}
		})
	}
}
