package udp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/udp"
)

// offloadModes runs a test with the kernel's offloads (where present) and
// with them forced off.
var offloadModes = []struct {
	name string
	off  bool
}{{"offload", false}, {"plain", true}}

// TestRoundTrip sends batches both ways over IPv4 and IPv6 loopback, from
// every path and to every path, and checks content, order per flow, the
// source port of each path and the receiving path.
func TestRoundTrip(t *testing.T) {
	for _, fam := range families {
		for _, mode := range offloadModes {
			for _, paths := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/%s/paths=%d", fam.name, mode.name, paths), func(t *testing.T) {
					cfg := udp.Config{Addr: fam.addr, Paths: paths, DisableGSO: mode.off, DisableGRO: mode.off}
					a, b := listen(t, cfg), listen(t, cfg)
					if a.Paths() != paths || b.Paths() != paths {
						t.Fatalf("Paths() = %d, %d; want %d", a.Paths(), b.Paths(), paths)
					}
					if mode.off && (a.Offload() != udp.Offload{}) {
						t.Fatalf("offloads forced off but Offload() = %+v", a.Offload())
					}
					roundTrip(t, a, b)
					roundTrip(t, b, a)
				})
			}
		}
	}
}

// roundTrip sends perPath datagrams from each of from's paths to each of
// to's paths and checks what arrives.
func roundTrip(t *testing.T, from, to *udp.Conn) {
	t.Helper()
	const perPath, size = 8, 300
	var msgs []udp.Message
	for p := range from.Paths() {
		for i := range perPath {
			// Datagram i of path p goes to to's path (p+i) % Paths.
			dst := to.LocalAddr((p + i) % to.Paths())
			msgs = append(msgs, udp.Message{Buf: payload(size, p, i), N: size, Addr: dst, Path: p})
		}
	}
	send(t, from, msgs)
	got := receive(t, to, len(msgs), 2048, 16)
	next := map[[2]int]int{} // per (source path, receiving path) flow: seq expected next
	for _, d := range got {
		if len(d.data) != size {
			t.Fatalf("datagram of %d bytes, want %d", len(d.data), size)
		}
		p, seq := tagOf(d.data)
		if p < 0 || p >= from.Paths() {
			t.Fatalf("datagram tagged with path %d", p)
		}
		if !bytes.Equal(d.data, payload(size, p, seq)) {
			t.Fatalf("datagram (path %d, seq %d) corrupted", p, seq)
		}
		if want := from.LocalAddr(p); d.from.Port() != want.Port() || d.from.Addr() != want.Addr() {
			t.Errorf("datagram from path %d came from %v, want %v", p, d.from, want)
		}
		if want := (p + seq) % to.Paths(); d.path != want {
			t.Errorf("datagram (path %d, seq %d) reported on receiving path %d, want %d", p, seq, d.path, want)
		}
		// Datagrams of one (source port, destination port) flow arrive in order.
		flow := [2]int{p, d.path}
		if seq < next[flow] {
			t.Errorf("flow %v: seq %d after %d", flow, seq, next[flow]-1)
		}
		next[flow] = seq + 1
	}
	seen := map[[2]int]bool{}
	for _, d := range got {
		p, seq := tagOf(d.data)
		if seen[[2]int{p, seq}] {
			t.Fatalf("datagram (path %d, seq %d) delivered twice", p, seq)
		}
		seen[[2]int{p, seq}] = true
	}
	expectQuiet(t, to, 20*time.Millisecond)
}

// TestSourcePortIsBasePlusPath checks the port layout with a fixed base
// port: path i sends from base+i and LocalAddr says so.
func TestSourcePortIsBasePlusPath(t *testing.T) {
	probe := listen(t, udp.Config{Addr: lo4, Paths: 8})
	base := probe.LocalAddr(0).Port()
	probe.Close()
	a := listen(t, udp.Config{Addr: netip.AddrPortFrom(lo4.Addr(), base), Paths: 8})
	b := listen(t, udp.Config{Addr: lo4})
	for p := range 8 {
		if got := a.LocalAddr(p).Port(); got != base+uint16(p) {
			t.Fatalf("LocalAddr(%d).Port() = %d, want %d", p, got, base+uint16(p))
		}
		send(t, a, []udp.Message{{Buf: payload(16, p, 0), N: 16, Addr: b.LocalAddr(0), Path: p}})
		d := receive(t, b, 1, 64, 4)[0]
		if d.from.Port() != base+uint16(p) {
			t.Fatalf("path %d sent from port %d, want %d", p, d.from.Port(), base+uint16(p))
		}
	}
	if a.LocalAddr(8).IsValid() || a.LocalAddr(-1).IsValid() {
		t.Fatal("LocalAddr out of range returned a valid address")
	}
}

// TestManyPaths opens 256 paths (the next issue's scale) and uses each of
// them to send and to receive.
func TestManyPaths(t *testing.T) {
	const paths = 256
	a := listen(t, udp.Config{Addr: lo4, Paths: paths})
	b := listen(t, udp.Config{Addr: lo4, Paths: paths})
	msgs := make([]udp.Message, 0, paths)
	for p := range paths {
		msgs = append(msgs, udp.Message{Buf: payload(32, p, 0), N: 32, Addr: b.LocalAddr(p), Path: p})
	}
	send(t, a, msgs)
	got := receive(t, b, paths, 64, 64)
	seen := make([]bool, paths)
	for _, d := range got {
		p, _ := tagOf(d.data)
		if seen[p] {
			t.Fatalf("path %d twice", p)
		}
		seen[p] = true
		if d.path != p || d.from != a.LocalAddr(p) {
			t.Fatalf("datagram of path %d arrived on path %d from %v, want path %d from %v",
				p, d.path, d.from, p, a.LocalAddr(p))
		}
	}
}

// TestTruncatedDropped: a datagram longer than the receive buffer is
// counted and dropped, and the datagrams around it are delivered whole.
func TestTruncatedDropped(t *testing.T) {
	for _, mode := range offloadModes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := udp.Config{Addr: lo4, DisableGSO: mode.off, DisableGRO: mode.off}
			a, b := listen(t, cfg), listen(t, cfg)
			dst := b.LocalAddr(0)
			sizes := []int{10, 200, 20, 65, 64}
			var msgs []udp.Message
			for i, s := range sizes {
				msgs = append(msgs, udp.Message{Buf: payload(s, 0, i), N: s, Addr: dst})
			}
			send(t, a, msgs)
			got := receive(t, b, 3, 64, 8)
			want := []int{0, 2, 4} // datagrams 1 (200 bytes) and 3 (65 bytes) do not fit 64
			if len(got) != len(want) {
				t.Fatalf("got %d datagrams, want %d", len(got), len(want))
			}
			for i, d := range got {
				if _, seq := tagOf(d.data); seq != want[i] || !bytes.Equal(d.data, payload(sizes[seq], 0, seq)) {
					t.Fatalf("datagram %d: seq %d (%d bytes), want seq %d whole", i, seq, len(d.data), want[i])
				}
			}
			if st := b.Stats(); st.Truncated != 2 {
				t.Fatalf("Stats.Truncated = %d, want 2", st.Truncated)
			}
			expectQuiet(t, b, 20*time.Millisecond)
		})
	}
}

// TestTruncatedKeepsBuffers: dropping a truncated datagram in the middle
// of a batch moves the later ones up; the caller's buffers are permuted,
// not lost.
func TestTruncatedKeepsBuffers(t *testing.T) {
	cfg := udp.Config{Addr: lo4, DisableGSO: true, DisableGRO: true}
	a, b := listen(t, cfg), listen(t, cfg)
	send(t, a, []udp.Message{
		{Buf: payload(100, 0, 0), N: 100, Addr: b.LocalAddr(0)},
		{Buf: payload(30, 0, 1), N: 30, Addr: b.LocalAddr(0)},
	})
	bufs := [][]byte{make([]byte, 50), make([]byte, 200)}
	msgs := []udp.Message{{Buf: bufs[0]}, {Buf: bufs[1]}}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := b.ReadBatch(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || msgs[0].N != 30 || !bytes.Equal(msgs[0].Buf[:30], payload(30, 0, 1)) {
		t.Fatalf("n=%d N=%d: want the 30-byte datagram first", n, msgs[0].N)
	}
	if &msgs[0].Buf[0] != &bufs[1][0] || &msgs[1].Buf[0] != &bufs[0][0] {
		t.Fatal("Buf slices are not a permutation of the caller's")
	}
	if got := b.Stats().Truncated; got != 1 {
		t.Fatalf("Truncated = %d, want 1", got)
	}
}

// TestCloseWakesReader: Close (and the end of Listen's context) wakes a
// ReadBatch blocked with no traffic, with net.ErrClosed.
func TestCloseWakesReader(t *testing.T) {
	for _, paths := range []int{1, 3} {
		for _, how := range []string{"close", "context"} {
			t.Run(fmt.Sprintf("paths=%d/%s", paths, how), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c, err := udp.Listen(ctx, udp.Config{Addr: lo4, Paths: paths})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				done := make(chan error, 1)
				go func() {
					_, err := c.ReadBatch([]udp.Message{{Buf: make([]byte, 64)}})
					done <- err
				}()
				select {
				case err := <-done:
					t.Fatalf("ReadBatch returned before Close: %v", err)
				case <-time.After(50 * time.Millisecond):
				}
				if how == "close" {
					if err := c.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				} else {
					cancel()
				}
				select {
				case err := <-done:
					if !errors.Is(err, net.ErrClosed) {
						t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Close did not wake ReadBatch")
				}
				if err := c.Close(); err != nil {
					t.Fatalf("second Close: %v", err)
				}
				if _, err := c.ReadBatch([]udp.Message{{Buf: make([]byte, 8)}}); !errors.Is(err, net.ErrClosed) {
					t.Fatalf("ReadBatch on closed Conn: %v", err)
				}
				_, err = c.WriteBatch([]udp.Message{{Buf: make([]byte, 8), N: 8, Addr: netip.MustParseAddrPort("127.0.0.1:9")}})
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("WriteBatch on closed Conn: %v", err)
				}
			})
		}
	}
}

// TestReadDeadline: a deadline ends a blocked read without closing.
func TestReadDeadline(t *testing.T) {
	for _, paths := range []int{1, 2} {
		c := listen(t, udp.Config{Addr: lo4, Paths: paths})
		c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		start := time.Now()
		_, err := c.ReadBatch([]udp.Message{{Buf: make([]byte, 64)}})
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("paths=%d: ReadBatch: %v, want deadline exceeded", paths, err)
		}
		if el := time.Since(start); el < 25*time.Millisecond {
			t.Fatalf("deadline fired after %v", el)
		}
		c.SetReadDeadline(time.Time{})
		a := listen(t, udp.Config{Addr: lo4})
		send(t, a, []udp.Message{{Buf: []byte("x"), N: 1, Addr: c.LocalAddr(paths - 1)}})
		if d := receive(t, c, 1, 8, 1)[0]; string(d.data) != "x" || d.path != paths-1 {
			t.Fatalf("after deadline: got %q on path %d", d.data, d.path)
		}
	}
}

// TestBadConfig: every bad config is refused with an error that names
// the problem, and leaves no socket behind.
func TestBadConfig(t *testing.T) {
	taken := listen(t, udp.Config{Addr: lo4})
	takenPort := taken.LocalAddr(0).Port()
	cases := []struct {
		name string
		cfg  udp.Config
		want error
	}{
		{"no address", udp.Config{}, udp.ErrBadAddress},
		{"multicast", udp.Config{Addr: netip.MustParseAddrPort("224.0.0.1:0")}, udp.ErrBadAddress},
		{"broadcast", udp.Config{Addr: netip.MustParseAddrPort("255.255.255.255:0")}, udp.ErrBadAddress},
		{"not on host", udp.Config{Addr: netip.MustParseAddrPort("198.51.100.77:0")}, udp.ErrBadAddress},
		{"v6 not on host", udp.Config{Addr: netip.MustParseAddrPort("[2001:db8::77]:0")}, udp.ErrBadAddress},
		{"link-local without zone", udp.Config{Addr: netip.MustParseAddrPort("[fe80::77]:0")}, udp.ErrBadAddress},
		{"unknown interface", udp.Config{Addr: lo4, Interface: "nosuchif0"}, udp.ErrUnknownInterface},
		{"unknown zone", udp.Config{Addr: netip.MustParseAddrPort("[fe80::1%nosuchif0]:0")}, udp.ErrUnknownInterface},
		{"zone and interface differ", udp.Config{Addr: netip.MustParseAddrPort("[fe80::1%lo]:0"), Interface: "eth0"}, udp.ErrBadConfig},
		{"port in use", udp.Config{Addr: netip.AddrPortFrom(lo4.Addr(), takenPort)}, udp.ErrPortInUse},
		{"negative paths", udp.Config{Addr: lo4, Paths: -1}, udp.ErrBadConfig},
		{"too many paths", udp.Config{Addr: lo4, Paths: udp.MaxPaths + 1}, udp.ErrBadConfig},
		{"range past 65535", udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:65530"), Paths: 8}, udp.ErrBadConfig},
		{"negative batch", udp.Config{Addr: lo4, MaxBatch: -1}, udp.ErrBadConfig},
		{"batch too big", udp.Config{Addr: lo4, MaxBatch: udp.MaxBatchLimit + 1}, udp.ErrBadConfig},
		{"negative recv buffer", udp.Config{Addr: lo4, RecvBuffer: -1}, udp.ErrBadConfig},
		{"huge send buffer", udp.Config{Addr: lo4, SendBuffer: 1 << 31}, udp.ErrBadConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := udp.Listen(context.Background(), tc.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("Listen(%+v) succeeded", tc.cfg)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Listen: %v, want %v", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := udp.Listen(ctx, udp.Config{Addr: lo4}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen with a done context: %v", err)
	}
}

// TestPortRangeInUse: a range that collides part-way is refused and the
// ports bound before the collision are released.
func TestPortRangeInUse(t *testing.T) {
	probe := listen(t, udp.Config{Addr: lo4, Paths: 8})
	base := probe.LocalAddr(0).Port()
	probe.Close()
	listen(t, udp.Config{Addr: netip.AddrPortFrom(lo4.Addr(), base+4)})
	_, err := udp.Listen(context.Background(), udp.Config{Addr: netip.AddrPortFrom(lo4.Addr(), base), Paths: 8})
	if !errors.Is(err, udp.ErrPortInUse) {
		t.Fatalf("overlapping range: %v, want ErrPortInUse", err)
	}
	c := listen(t, udp.Config{Addr: netip.AddrPortFrom(lo4.Addr(), base), Paths: 4})
	if c.LocalAddr(3).Port() != base+3 {
		t.Fatalf("range after failure at %v", c.LocalAddr(0))
	}
}

// TestBadMessage: WriteBatch refuses a message it cannot send with
// ErrBadMessage after sending the messages before it.
func TestBadMessage(t *testing.T) {
	a := listen(t, udp.Config{Addr: lo4, Paths: 2})
	b := listen(t, udp.Config{Addr: lo4})
	dst := b.LocalAddr(0)
	good := func(i int) udp.Message { return udp.Message{Buf: payload(16, 0, i), N: 16, Addr: dst} }
	bad := []struct {
		name string
		m    udp.Message
	}{
		{"path out of range", udp.Message{Buf: make([]byte, 16), N: 16, Addr: dst, Path: 2}},
		{"negative path", udp.Message{Buf: make([]byte, 16), N: 16, Addr: dst, Path: -1}},
		{"N past Buf", udp.Message{Buf: make([]byte, 16), N: 17, Addr: dst}},
		{"negative N", udp.Message{Buf: make([]byte, 16), N: -1, Addr: dst}},
		{"no destination", udp.Message{Buf: make([]byte, 16), N: 16}},
		{"port 0", udp.Message{Buf: make([]byte, 16), N: 16, Addr: netip.AddrPortFrom(dst.Addr(), 0)}},
		{"unspecified destination", udp.Message{Buf: make([]byte, 16), N: 16, Addr: netip.MustParseAddrPort("0.0.0.0:9")}},
		{"IPv6 to IPv4 Conn", udp.Message{Buf: make([]byte, 16), N: 16, Addr: netip.MustParseAddrPort("[::1]:9")}},
		{"too large", udp.Message{Buf: make([]byte, udp.MaxDatagram+1), N: udp.MaxDatagram + 1, Addr: dst}},
	}
	seq := 0
	for _, tc := range bad {
		msgs := []udp.Message{good(seq), good(seq + 1), tc.m, good(seq + 2)}
		n, err := a.WriteBatch(msgs)
		if n != 2 || !errors.Is(err, udp.ErrBadMessage) {
			t.Fatalf("%s: WriteBatch = %d, %v; want 2, ErrBadMessage", tc.name, n, err)
		}
		t.Logf("%s: %v", tc.name, err)
		for _, d := range receive(t, b, 2, 64, 4) {
			if _, s := tagOf(d.data); s != seq && s != seq+1 {
				t.Fatalf("%s: received seq %d", tc.name, s)
			}
		}
		seq += 3
	}
	expectQuiet(t, b, 20*time.Millisecond)

	v6 := listen(t, udp.Config{Addr: lo6})
	n, err := v6.WriteBatch([]udp.Message{{Buf: make([]byte, 4), N: 4, Addr: dst}})
	if n != 0 || !errors.Is(err, udp.ErrBadMessage) {
		t.Fatalf("IPv4 destination on IPv6 Conn: %d, %v", n, err)
	}
}

// TestSocketBuffers: buffer sizes are applied, past net.core.rmem_max
// when running as root (SO_RCVBUFFORCE).
func TestSocketBuffers(t *testing.T) {
	const want = 8 << 20
	c := listen(t, udp.Config{Addr: lo4, Paths: 2, RecvBuffer: want, SendBuffer: want})
	r, s, err := c.SocketBuffers()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SO_RCVBUF %d SO_SNDBUF %d", r, s)
	if os.Geteuid() != 0 {
		needCapability(t, "not root: SO_RCVBUFFORCE needs CAP_NET_ADMIN")
	}
	if r < want || s < want {
		t.Fatalf("buffers %d/%d, want at least %d", r, s, want)
	}
	d := listen(t, udp.Config{Addr: lo4})
	dr, _, err := d.SocketBuffers()
	if err != nil {
		t.Fatal(err)
	}
	if dr >= want {
		t.Fatalf("default receive buffer %d already >= %d: test proves nothing", dr, want)
	}
}

// TestBindToDevice binds to the loopback interface by name.
func TestBindToDevice(t *testing.T) {
	for _, fam := range families {
		a := listen(t, udp.Config{Addr: fam.addr, Interface: "lo", Paths: 2})
		b := listen(t, udp.Config{Addr: fam.addr, Interface: "lo"})
		send(t, a, []udp.Message{{Buf: []byte("dev"), N: 3, Addr: b.LocalAddr(0), Path: 1}})
		if d := receive(t, b, 1, 16, 2)[0]; string(d.data) != "dev" || d.from != a.LocalAddr(1) {
			t.Fatalf("%s: got %q from %v", fam.name, d.data, d.from)
		}
	}
}

// TestConcurrentReadWrite runs a reader and a writer on one Conn at once
// (for the race detector) while another Conn echoes.
func TestConcurrentReadWrite(t *testing.T) {
	a := listen(t, udp.Config{Addr: lo4, Paths: 2})
	b := listen(t, udp.Config{Addr: lo4, Paths: 2})
	const total = 2000
	errc := make(chan error, 1)
	go func() {
		msgs := make([]udp.Message, 16)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 64)
		}
		for got := 0; got < total; {
			n, err := b.ReadBatch(msgs)
			if err != nil {
				errc <- err
				return
			}
			got += n
			if _, err := b.WriteBatch(msgs[:n]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	go func() {
		for i := 0; i < total; i += 10 {
			msgs := make([]udp.Message, 10)
			for j := range msgs {
				msgs[j] = udp.Message{Buf: payload(32, j%2, i+j), N: 32, Addr: b.LocalAddr(j % 2), Path: j % 2}
			}
			if _, err := a.WriteBatch(msgs); err != nil {
				errc <- err
				return
			}
			time.Sleep(100 * time.Microsecond) // stay under the receive buffer
		}
	}()
	got := receive(t, a, total, 64, 32)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("echoed %d of %d", len(got), total)
	}
}

// TestCloseDuringTraffic closes a Conn while a reader and a writer are
// busy on it: both end with net.ErrClosed, nothing panics, and the race
// detector sees no unsynchronized fd use.
func TestCloseDuringTraffic(t *testing.T) {
	for _, paths := range []int{1, 4} {
		for _, mode := range offloadModes {
			cfg := udp.Config{Addr: lo4, Paths: paths, DisableGSO: mode.off, DisableGRO: mode.off}
			c := listen(t, cfg)
			errs := make(chan error, 2)
			go func() {
				msgs := make([]udp.Message, 8)
				for i := range msgs {
					msgs[i].Buf = make([]byte, 256)
				}
				for {
					if _, err := c.ReadBatch(msgs); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() {
				msgs := make([]udp.Message, 8)
				for i := range msgs {
					p := i % paths
					msgs[i] = udp.Message{Buf: make([]byte, 100), N: 100, Addr: c.LocalAddr((p + 1) % paths), Path: p}
				}
				for {
					if _, err := c.WriteBatch(msgs); err != nil {
						errs <- err
						return
					}
				}
			}()
			time.Sleep(20 * time.Millisecond)
			if st := c.Stats(); st.Truncated != 0 {
				t.Fatalf("truncated %d", st.Truncated)
			}
			c.Close()
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, net.ErrClosed) {
						t.Fatalf("paths=%d %s: %v, want net.ErrClosed", paths, mode.name, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("paths=%d %s: a goroutine did not stop after Close", paths, mode.name)
				}
			}
		}
	}
}
