package endpoint_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

type src []byte

func (s src) ReadAt(p []byte, off uint64) bool { copy(p, s[off:]); return true }

// memSink places WRITEs into its memory.
type memSink struct {
	mu      sync.Mutex
	mem     []byte
	commits int
}

func (s *memSink) Begin(m *transport.Inbound) (wire.NAK, uint8) {
	if m.RAddr+uint64(m.Len) > uint64(len(s.mem)) {
		return wire.NAKAccess, 0
	}
	return wire.NAKNone, 0
}
func (s *memSink) Place(m *transport.Inbound, off uint64, b []byte) bool {
	copy(s.mem[m.RAddr+off:], b)
	return true
}
func (s *memSink) Commit(*transport.Inbound) wire.NAK {
	s.mu.Lock()
	s.commits++
	s.mu.Unlock()
	return wire.NAKNone
}

// TestTwoEndpoints: two endpoints on loopback, two connections between
// them, WRITEs both ways on both: every one completes once, and the
// bytes land.
func TestTwoEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var eps [2]*endpoint.Endpoint
	var socks [2]*udp.Conn
	for i := range eps {
		// Large buffers: without congestion control two full windows of
		// 8 KiB datagrams overflow the default, and a slow (race, one
		// CPU) loop then loses most of them.
		s, err := udp.Listen(ctx, udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Paths: 4, RecvBuffer: 16 << 20, SendBuffer: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		socks[i] = s
		eps[i] = endpoint.New(s, nil)
	}
	const conns, msgs, size = 2, 300, 50000
	sinks := make(map[[2]uint32]*memSink)
	var wg sync.WaitGroup
	done := make(chan transport.Completion, 4*conns*msgs)
	for k := range uint32(conns) {
		for i := range 2 {
			local, remote := 10+k*2+uint32(i), 10+k*2+uint32(1-i)
			cfg := transport.Config{Tenant: 3, LocalConn: local, LocalToken: uint64(local) * 77, RemoteConn: remote, RemoteToken: uint64(remote) * 77, MaxPayload: 8192}
			sink := &memSink{mem: make([]byte, msgs*size)}
			sinks[[2]uint32{k, uint32(i)}] = sink
			c, err := transport.NewConn(cfg, sink)
			if err != nil {
				t.Fatal(err)
			}
			if err := eps[i].Add(local, c, socks[1-i].LocalAddr(0), 4, func(c transport.Completion) { done <- c }); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, e := range eps {
		wg.Add(1)
		go func() { defer wg.Done(); e.Run(ctx) }()
	}
	payload := func(k, i, m uint32) []byte {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(k*31 + i*7 + m + uint32(j))
		}
		return b
	}
	for m := range uint32(msgs) {
		for k := range uint32(conns) {
			for i := range uint32(2) {
				id := 10 + k*2 + i
				p := payload(k, i, m)
				for {
					_, err := eps[i].Post(id, transport.Message{Op: wire.OpWrite, Len: size, Src: src(p), RAddr: uint64(m) * size, Token: uint64(m)})
					if err == nil {
						break
					}
					if ctx.Err() != nil || !errors.Is(err, transport.ErrFull) {
						for kk := range uint32(conns) {
							for ii := range 2 {
								st, _ := eps[ii].ConnStats(10 + kk*2 + uint32(ii))
								t.Logf("conn %d side %d: %+v", kk, ii, st)
							}
						}
						t.Logf("ep0 %+v ep1 %+v", eps[0].Stats(), eps[1].Stats())
						for len(done) > 0 {
							if c := <-done; c.Status != transport.StatusOK {
								t.Logf("completion %+v", c)
							}
						}
						t.Fatalf("post: %v (%v)", err, ctx.Err())
					}
					time.Sleep(100 * time.Microsecond) // the window is full
				}
			}
		}
	}
	for range 2 * conns * msgs {
		select {
		case c := <-done:
			if c.Status != transport.StatusOK {
				t.Fatalf("completion %+v", c)
			}
		case <-ctx.Done():
			t.Fatal("timed out waiting for completions")
		}
	}
	cancel()
	wg.Wait()
	for key, s := range sinks {
		k, i := key[0], key[1]
		for m := range uint32(msgs) {
			if !bytes.Equal(s.mem[m*size:(m+1)*size], payload(k, 1-i, m)) {
				t.Fatalf("conn %d side %d message %d: wrong bytes", k, i, m)
			}
		}
	}
	if st := eps[0].Stats(); st.Malformed+st.UnknownConn+st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The totals: each side placed what the other wrote, and sent at
	// least as much; removed connections keep counting in them.
	const want = conns * msgs * size
	for i, e := range eps {
		tot, st := e.ConnTotals(), e.Stats()
		if tot.BytesPlaced != want || tot.DataReceived == 0 || tot.DataSent == 0 || st.PayloadSent < want || st.PayloadReceived < want {
			t.Fatalf("endpoint %d: totals %+v, stats %+v, want %d bytes each way", i, tot, st, want)
		}
		for k := range uint32(conns) {
			if !e.Remove(10 + k*2 + uint32(i)) {
				t.Fatal("not removed")
			}
		}
		if after := e.ConnTotals(); after != tot {
			t.Fatalf("endpoint %d: totals %+v after removing the connections, %+v before", i, after, tot)
		}
	}
}
