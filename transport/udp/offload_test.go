package udp_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/udp"
)

// needOffload fails under CI, and skips elsewhere, on a kernel without
// UDP GSO/GRO (Linux < 5.0).
func needOffload(t *testing.T, c *udp.Conn) {
	t.Helper()
	if o := c.Offload(); !o.GSO || !o.GRO {
		needCapability(t, fmt.Sprintf("kernel lacks UDP offloads: %+v", o))
	}
}

// TestGSOGRO sends runs of equal-size datagrams (which WriteBatch hands
// to the kernel as segmented sends) to a GRO receiver (which gets them
// coalesced) and checks the datagrams come out exactly as sent, with
// segment boundaries kept, including short last segments, runs broken by
// a larger datagram, and read batches smaller than a coalesced buffer.
func TestGSOGRO(t *testing.T) {
	for _, fam := range families {
		for _, readBatch := range []int{64, 5, 1} {
			t.Run(fmt.Sprintf("%s/read=%d", fam.name, readBatch), func(t *testing.T) {
				a := listen(t, udp.Config{Addr: fam.addr})
				b := listen(t, udp.Config{Addr: fam.addr, MaxBatch: 64})
				needOffload(t, a)
				// 40 x 1000, then 100,100,100,50 (short last), 300
				// (breaks the run), 0 (empty), 7, 7.
				var sizes []int
				for range 40 {
					sizes = append(sizes, 1000)
				}
				sizes = append(sizes, 100, 100, 100, 50, 300, 0, 7, 7)
				msgs := make([]udp.Message, len(sizes))
				for i, s := range sizes {
					buf := make([]byte, max(s, 8))
					if s >= 8 {
						buf = payload(s, 0, i)
					}
					msgs[i] = udp.Message{Buf: buf, N: s, Addr: b.LocalAddr(0)}
				}
				send(t, a, msgs)
				got := receive(t, b, len(sizes), 2000, readBatch)
				for i, d := range got {
					if len(d.data) != sizes[i] {
						t.Fatalf("datagram %d: %d bytes, want %d", i, len(d.data), sizes[i])
					}
					if sizes[i] >= 8 && !bytes.Equal(d.data, payload(sizes[i], 0, i)) {
						t.Fatalf("datagram %d corrupted", i)
					}
					if d.from != a.LocalAddr(0) {
						t.Fatalf("datagram %d from %v", i, d.from)
					}
				}
				sa, sb := a.Stats(), b.Stats()
				t.Logf("sender %+v receiver %+v", sa, sb)
				if sa.GSOSends < 2 || sa.GSODatagrams < 44 {
					t.Errorf("sender made %d segmented sends of %d datagrams, want >= 2 of >= 44", sa.GSOSends, sa.GSODatagrams)
				}
				if sb.GROBuffers < 1 || sb.GRODatagrams < 2 {
					t.Errorf("receiver got %d coalesced buffers (%d datagrams), want some", sb.GROBuffers, sb.GRODatagrams)
				}
				if sa.GSOFallbacks != 0 || sb.Truncated != 0 {
					t.Errorf("fallbacks %d, truncated %d", sa.GSOFallbacks, sb.Truncated)
				}
				expectQuiet(t, b, 20*time.Millisecond)
			})
		}
	}
}

// TestGROTruncated: segments of a coalesced buffer that do not fit the
// caller's buffer are dropped one by one and counted, the rest delivered.
func TestGROTruncated(t *testing.T) {
	a := listen(t, udp.Config{Addr: lo4})
	b := listen(t, udp.Config{Addr: lo4})
	needOffload(t, a)
	// 4 x 100 coalesce; 100 does not fit 64-byte buffers. The 40-byte
	// tail segment does.
	sizes := []int{100, 100, 100, 100, 40}
	var msgs []udp.Message
	for i, s := range sizes {
		msgs = append(msgs, udp.Message{Buf: payload(s, 0, i), N: s, Addr: b.LocalAddr(0)})
	}
	send(t, a, msgs)
	got := receive(t, b, 1, 64, 8)
	if len(got) != 1 || len(got[0].data) != 40 || !bytes.Equal(got[0].data, payload(40, 0, 4)) {
		t.Fatalf("got %d datagrams (first %d bytes), want only the 40-byte one", len(got), len(got[0].data))
	}
	if st := b.Stats(); st.Truncated != 4 || st.GROBuffers != 1 {
		t.Fatalf("Stats %+v: want 4 truncated from 1 coalesced buffer", st)
	}
}

// TestOffloadForcedOff: with DisableGSO/DisableGRO the same traffic goes
// one datagram per send and per receive, and arrives the same.
func TestOffloadForcedOff(t *testing.T) {
	cfg := udp.Config{Addr: lo4, DisableGSO: true, DisableGRO: true}
	a, b := listen(t, cfg), listen(t, cfg)
	if o := a.Offload(); o.GSO || o.GRO {
		t.Fatalf("Offload() = %+v with both disabled", o)
	}
	var msgs []udp.Message
	for i := range 50 {
		msgs = append(msgs, udp.Message{Buf: payload(1000, 0, i), N: 1000, Addr: b.LocalAddr(0)})
	}
	send(t, a, msgs)
	got := receive(t, b, len(msgs), 1500, 64)
	for i, d := range got {
		if !bytes.Equal(d.data, payload(1000, 0, i)) {
			t.Fatalf("datagram %d wrong", i)
		}
	}
	if sa, sb := a.Stats(), b.Stats(); sa.GSOSends != 0 || sb.GROBuffers != 0 {
		t.Fatalf("offload used while disabled: sender %+v receiver %+v", sa, sb)
	}
	// A plain receiver next to a GSO sender: the kernel segments on
	// delivery to a socket without UDP_GRO.
	g := listen(t, udp.Config{Addr: lo4})
	needOffload(t, g)
	send(t, g, msgs)
	got = receive(t, b, len(msgs), 1500, 64)
	for i, d := range got {
		if !bytes.Equal(d.data, payload(1000, 0, i)) {
			t.Fatalf("GSO to plain receiver: datagram %d wrong", i)
		}
	}
	if g.Stats().GSOSends == 0 {
		t.Fatal("GSO sender made no segmented send")
	}
}
