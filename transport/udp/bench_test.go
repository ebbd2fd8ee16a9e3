package udp_test

import (
	"context"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/udp"
)

// TestBlastThroughput blasts over loopback, with offloads and without,
// and checks the accounting adds up.
func TestBlastThroughput(t *testing.T) {
	for _, mode := range offloadModes {
		for _, fam := range families {
			t.Run(mode.name+"/"+fam.name, func(t *testing.T) {
				cfg := udp.Config{Addr: fam.addr, DisableGSO: mode.off, DisableGRO: mode.off}
				scfg := cfg
				scfg.Paths = 4
				rcfg := cfg
				rcfg.RecvBuffer = 8 << 20
				s, r := listen(t, scfg), listen(t, rcfg)
				res, err := udp.BlastThroughput(t.Context(), s, r, r.LocalAddr(0), 1400, 200*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%.2f Gbit/s received, %.0f pkts/s, sent %d received %d (loss %.2f%%), offered %.2f Gbit/s, offload %+v",
					res.Gbps, res.PacketsPerSec, res.Sent, res.Received, 100*res.Loss(), res.SentGbps, s.Offload())
				if res.Received == 0 || res.Received > res.Sent || res.Gbps <= 0 || res.Duration <= 0 {
					t.Fatalf("implausible result %+v", res)
				}
				if res.Size != 1400 {
					t.Fatalf("Size = %d", res.Size)
				}
				// All datagrams must have fit: none truncated.
				if tr := r.Stats().Truncated; tr != 0 {
					t.Fatalf("%d truncated", tr)
				}
				// The receiver is usable afterwards: its deadline was reset.
				send(t, s, []udp.Message{{Buf: []byte("after"), N: 5, Addr: r.LocalAddr(0)}})
				time.Sleep(10 * time.Millisecond)
				got := receive(t, r, 1, 2000, 64)
				if string(got[len(got)-1].data) != "after" {
					t.Fatalf("after blast got %q", got[len(got)-1].data)
				}
			})
		}
	}
}

// TestPingPong measures round trips over loopback.
func TestPingPong(t *testing.T) {
	for _, fam := range families {
		a := listen(t, udp.Config{Addr: fam.addr, Paths: 2})
		b := listen(t, udp.Config{Addr: fam.addr})
		res, err := udp.PingPong(t.Context(), a, b, 500, 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", fam.name, res)
		if res.N != 500 || res.Min <= 0 || res.Min > res.P50 || res.P50 > res.P99 || res.P99 > res.Max {
			t.Fatalf("implausible %+v", res)
		}
		if res.Mean < res.Min || res.Mean > res.Max {
			t.Fatalf("mean outside range: %+v", res)
		}
		if res.P99 > 100*time.Millisecond {
			t.Fatalf("loopback p99 %v", res.P99)
		}
	}
	// Unspecified local address: PingPong aims at loopback.
	a := listen(t, udp.Config{Addr: lo4})
	b := listen(t, udp.Config{Addr: netip0()})
	if _, err := udp.PingPong(t.Context(), a, b, 10, 64); err != nil {
		t.Fatalf("to 0.0.0.0-bound peer: %v", err)
	}
}

func TestBenchToolsBadArgs(t *testing.T) {
	a := listen(t, udp.Config{Addr: lo4})
	b := listen(t, udp.Config{Addr: lo4})
	ctx := t.Context()
	if _, err := udp.BlastThroughput(ctx, a, b, b.LocalAddr(0), 0, time.Millisecond); err == nil {
		t.Fatal("blast size 0 accepted")
	}
	if _, err := udp.BlastThroughput(ctx, a, b, b.LocalAddr(0), 100, 0); err == nil {
		t.Fatal("blast duration 0 accepted")
	}
	if _, err := udp.PingPong(ctx, a, b, 0, 8); err == nil {
		t.Fatal("pingpong n 0 accepted")
	}
	if _, err := udp.PingPong(ctx, a, b, 1, 7); err == nil {
		t.Fatal("pingpong size 7 accepted")
	}
	// Nobody listens at the destination: the blast says so.
	c := listen(t, udp.Config{Addr: lo4})
	dead := c.LocalAddr(0)
	c.Close()
	if _, err := udp.BlastThroughput(ctx, a, b, dead, 100, 20*time.Millisecond); err == nil {
		t.Fatal("blast to a closed port reported success")
	}
	// A cancelled context stops a long ping-pong early.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := udp.PingPong(cctx, a, b, 1<<30, 8); err == nil {
		t.Fatal("cancelled pingpong reported success")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancel did not stop pingpong")
	}
}
