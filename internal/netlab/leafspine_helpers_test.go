//go:build linux

package netlab

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
)

// lsPrefix names the namespaces of the leaf-spine tests.
const lsPrefix = testPrefix + "ls"

func newFabric(t *testing.T, o LeafSpineOptions) *Fabric {
	t.Helper()
	requireNetlab(t)
	if o.Prefix == "" {
		o.Prefix = lsPrefix
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	f, err := LeafSpine(ctx, o)
	if err != nil {
		t.Fatalf("LeafSpine: %v", err)
	}
	t.Logf("fabric of %d namespaces built in %v", len(f.Namespaces()), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// openFlows opens n UDP sockets in h, each on its own ephemeral port, so
// each is a distinct 5-tuple toward one destination.
func openFlows(t *testing.T, h *Host, n int) []*net.UDPConn {
	t.Helper()
	cs := make([]*net.UDPConn, 0, n)
	err := h.Do(func() error {
		for range n {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.Addr(), 0)))
			if err != nil {
				return err
			}
			cs = append(cs, c)
		}
		return nil
	})
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	if err != nil {
		t.Fatalf("open flows in %s: %v", h.Name(), err)
	}
	return cs
}

// flowMsg is a 64-byte datagram carrying the flow index and a sequence
// number, so the receiver can attribute it.
func flowMsg(flow, seq int) []byte {
	m := make([]byte, 64)
	binary.BigEndian.PutUint32(m, uint32(flow))
	binary.BigEndian.PutUint32(m[4:], uint32(seq))
	return m
}

// sendFlows sends perFlow datagrams on every flow to dst (interleaved
// across flows) and returns how many rx received per flow, reading until
// rx has been silent for quiet.
func sendFlows(t *testing.T, flows []*net.UDPConn, rx *net.UDPConn, perFlow int, quiet time.Duration) []int {
	t.Helper()
	got := make([]int, len(flows))
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			rx.SetReadDeadline(time.Now().Add(quiet))
			n, err := rx.Read(buf)
			if err != nil {
				return
			}
			if n == 64 {
				if f := int(binary.BigEndian.Uint32(buf)); f < len(got) {
					got[f]++
				}
			}
		}
	}()
	dst := addrPort(rx)
	for seq := range perFlow {
		for i, c := range flows {
			if _, err := c.WriteToUDPAddrPort(flowMsg(i, seq), dst); err != nil {
				t.Errorf("flow %d send: %v", i, err)
			}
		}
		if seq%8 == 7 {
			time.Sleep(time.Millisecond) // keep the receive path unhurried
		}
	}
	<-done
	return got
}

// learnSpines finds the spine each flow's packets leave leaf through, from
// the leaf's per-spine counters: one flow at a time, send a few datagrams,
// wait until rx has them all (so the leaf has forwarded them), and see
// which link's Routed count grew by that much.
func learnSpines(t *testing.T, f *Fabric, leaf int, flows []*net.UDPConn, rx *net.UDPConn) []int {
	t.Helper()
	const probes = 3
	spines := make([]int, len(flows))
	for i, c := range flows {
		before, err := f.LeafCounters(leaf)
		if err != nil {
			t.Fatal(err)
		}
		for seq := range probes {
			if _, err := c.WriteToUDPAddrPort(flowMsg(i, seq), addrPort(rx)); err != nil {
				t.Fatal(err)
			}
		}
		for range probes {
			if _, _, err := recvOne(rx, 2*time.Second); err != nil {
				t.Fatalf("flow %d: probe lost: %v", i, err)
			}
		}
		after, err := f.LeafCounters(leaf)
		if err != nil {
			t.Fatal(err)
		}
		spines[i] = -1
		for s := range after {
			if after[s].Sub(before[s]).Routed() >= probes {
				if spines[i] >= 0 {
					t.Fatalf("flow %d: probes counted on spines %d and %d", i, spines[i], s)
				}
				spines[i] = s
			}
		}
		if spines[i] < 0 {
			t.Fatalf("flow %d: no spine link counted its %d probes", i, probes)
		}
	}
	return spines
}

// routedDelta returns the per-spine Routed growth of leaf since before.
func routedDelta(t *testing.T, f *Fabric, leaf int, before []LinkCounters) []uint64 {
	t.Helper()
	after, err := f.LeafCounters(leaf)
	if err != nil {
		t.Fatal(err)
	}
	d := make([]uint64, len(after))
	for s := range after {
		d[s] = after[s].Sub(before[s]).Routed()
	}
	return d
}

// paceBlast sends payload-byte datagrams round-robin over flows to rx at
// about offered bits/s of L2 frames for dur, and returns the payload bytes
// rx received (counting what drains within 200 ms after). Pacing, rather
// than sending flat out, keeps a rate test from starving the receiver and
// the other tests of this 2-core machine while still overloading the links.
func paceBlast(t *testing.T, flows []*net.UDPConn, rx *net.UDPConn, payload int, offered uint64, dur time.Duration) int64 {
	t.Helper()
	stop := countReceived(rx)
	msg := make([]byte, payload)
	dst := addrPort(rx)
	frameBits := float64(8 * (payload + 8 + 20 + ethHeader))
	start := time.Now()
	sent := 0
	for time.Since(start) < dur {
		due := int(time.Since(start).Seconds() * float64(offered) / frameBits)
		for ; sent < due; sent++ {
			flows[sent%len(flows)].WriteToUDPAddrPort(msg, dst) // drops are what we measure
		}
		time.Sleep(time.Millisecond)
	}
	return stop()
}
