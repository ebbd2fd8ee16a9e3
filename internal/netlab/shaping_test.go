//go:build linux

package netlab

import (
	"net"
	"slices"
	"testing"
	"time"
)

// countReceived counts the bytes rx receives from now on, on a goroutine
// of its own, until the returned stop is called; stop lets what is still
// arriving drain for 200 ms of quiet, then returns the count.
func countReceived(rx *net.UDPConn) (stop func() int64) {
	var received int64
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := rx.Read(buf)
			if err != nil {
				select {
				case <-quit:
					return
				default:
					continue
				}
			}
			received += int64(n)
		}
	}()
	return func() int64 {
		close(quit)
		<-done
		return received
	}
}

// blast sends payload-sized datagrams from tx to rx for dur and returns the
// payload bytes rx received, counting what drains within 200 ms after.
func blast(t *testing.T, tx, rx *net.UDPConn, payload int, dur time.Duration) (sent, received int64) {
	t.Helper()
	stop := countReceived(rx)
	msg := make([]byte, payload)
	dst := addrPort(rx)
	for start := time.Now(); time.Since(start) < dur; {
		if n, err := tx.WriteToUDPAddrPort(msg, dst); err == nil {
			sent += int64(n)
		}
	}
	return sent, stop()
}

func TestRateLimit(t *testing.T) {
	const rate = 100_000_000
	bed := newBed(t, Options{Rate: rate})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4300), listenUDP(t, b, 4300)
	warmUp(t, ca, cb)

	const payload = 1472
	// tbf counts L2 frames: payload + UDP/IP/Ethernet headers.
	goodput := func(bps uint64, d time.Duration) float64 {
		return float64(bps) / 8 * d.Seconds() * payload / (payload + 8 + 20 + 14)
	}
	check := func(name string, bps uint64, d time.Duration) {
		t.Helper()
		sent, got := blast(t, ca, cb, payload, d)
		want := goodput(bps, d)
		ratio := float64(got) / want
		t.Logf("%s: sent %d B, received %d B in %v = %.2f of the %d bit/s budget", name, sent, got, d, ratio, bps)
		// Upper bound: the limiter works (bucket and queue add a few %).
		// Lower bound: loose, a loaded 2-core machine can lag the sender.
		if ratio > 1.2 || ratio < 0.5 {
			t.Errorf("%s: received %.2f of the budget, want 0.5..1.2", name, ratio)
		}
	}
	check("100 Mbit/s", rate, time.Second)

	// Changing the rate at run time takes effect.
	if err := bed.SetRate(a, 20_000_000); err != nil {
		t.Fatal(err)
	}
	check("20 Mbit/s", 20_000_000, 500*time.Millisecond)

	// A burst that fits in the receive buffer shows the limit, not the
	// machine, is the cap: limited, tbf passes its bucket and queue
	// (~70 KB at 20 Mbit/s); unlimited, all of it arrives.
	const burst = 2000 // datagrams, 2.9 MB
	if got := sendBurst(t, ca, cb, payload, burst); got > burst/10 {
		t.Errorf("20 Mbit/s: burst of %d delivered %d, want < %d", burst, got, burst/10)
	} else {
		t.Logf("20 Mbit/s: burst of %d datagrams delivered %d", burst, got)
	}
	if err := bed.SetRate(a, 0); err != nil {
		t.Fatal(err)
	}
	if got := sendBurst(t, ca, cb, payload, burst); got < burst*95/100 {
		t.Errorf("unlimited: burst of %d delivered %d, want >= 95%%", burst, got)
	} else {
		t.Logf("unlimited: burst of %d datagrams delivered %d", burst, got)
	}
	// The other direction kept its own limit.
	warmUp(t, cb, ca)
	if _, got := blast(t, cb, ca, payload, 300*time.Millisecond); float64(got) > 1.2*goodput(rate, 300*time.Millisecond) {
		t.Errorf("b->a received %d B, above its 100 Mbit/s limit", got)
	}
}

// sendBurst sends n datagrams back to back, then counts what arrived.
func sendBurst(t *testing.T, tx, rx *net.UDPConn, payload, n int) int {
	t.Helper()
	drain(rx)
	msg := make([]byte, payload)
	for range n {
		tx.WriteToUDPAddrPort(msg, addrPort(rx)) // drops are what we measure
	}
	got := 0
	buf := make([]byte, 65536)
	for {
		rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := rx.Read(buf); err != nil {
			return got
		}
		got++
	}
}

// sendSeq sends n numbered datagrams from tx to rx and returns the sorted
// sequence numbers rx received.
func sendSeq(t *testing.T, tx, rx *net.UDPConn, n int) []uint32 {
	t.Helper()
	seen := sendOrdered(t, tx, rx, n, nil)
	slices.Sort(seen)
	return slices.Compact(seen)
}

func TestLoss(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4400), listenUDP(t, b, 4400)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)

	if err := bed.SetLoss(a, 0.10); err != nil {
		t.Fatal(err)
	}
	d0, p0, err := bed.lossCounters(a)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	got := sendSeq(t, ca, cb, n)
	lost := n - len(got)
	d1, p1, err := bed.lossCounters(a)
	if err != nil {
		t.Fatal(err)
	}
	frac := float64(lost) / n
	t.Logf("10%% loss: %d of %d lost (%.2f%%); filter dropped %d, passed %d", lost, n, 100*frac, d1-d0, p1-p0)
	// Binomial sd is 0.3%; 5..15% is far outside chance.
	if frac < 0.05 || frac > 0.15 {
		t.Errorf("lost %.2f%%, want 5..15%%", 100*frac)
	}
	// Every loss is the filter's doing (a few extra drops may be ARP or
	// IPv6 housekeeping frames that crossed the filter too).
	if drops := int(d1 - d0); drops < lost || drops > lost+20 {
		t.Errorf("filter dropped %d, receiver missed %d: losses not explained by the filter", drops, lost)
	}

	// Loss is per direction: b->a is untouched.
	if back := sendSeq(t, cb, ca, 1000); len(back) != 1000 {
		t.Errorf("b->a delivered %d of 1000 with loss only on a", len(back))
	}
	// 100% drops everything; 0 restores delivery.
	if err := bed.SetLoss(a, 1); err != nil {
		t.Fatal(err)
	}
	if got := sendSeq(t, ca, cb, 200); len(got) != 0 {
		t.Errorf("100%% loss delivered %d of 200", len(got))
	}
	if err := bed.SetLoss(a, 0); err != nil {
		t.Fatal(err)
	}
	if got := sendSeq(t, ca, cb, 1000); len(got) != 1000 {
		t.Errorf("0%% loss delivered %d of 1000", len(got))
	}
}

func TestLossAtConstruction(t *testing.T) {
	bed := newBed(t, Options{Loss: 0.3})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4450), listenUDP(t, b, 4450)
	warmUp(t, ca, cb) // retries through ARP losses
	warmUp(t, cb, ca)
	for _, dir := range []struct {
		name   string
		tx, rx *net.UDPConn
	}{{"a->b", ca, cb}, {"b->a", cb, ca}} {
		got := sendSeq(t, dir.tx, dir.rx, 2000)
		frac := 1 - float64(len(got))/2000
		t.Logf("%s: %.1f%% lost at 30%%", dir.name, 100*frac)
		if frac < 0.22 || frac > 0.38 {
			t.Errorf("%s: lost %.1f%%, want about 30%%", dir.name, 100*frac)
		}
	}
}

func TestLossCorrelated(t *testing.T) {
	const p, c = 0.2, 0.6
	bed := newBed(t, Options{LossCorrelation: c})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4500), listenUDP(t, b, 4500)
	warmUp(t, ca, cb)
	if err := bed.SetLoss(a, p); err != nil { // keeps the correlation
		t.Fatal(err)
	}
	const n = 10000
	got := sendSeq(t, ca, cb, n)
	lost := n - len(got)
	// Bursts: runs of consecutive missing sequence numbers.
	delivered := make([]bool, n)
	for _, s := range got {
		if int(s) < n {
			delivered[s] = true
		}
	}
	bursts := 0
	for i := range n {
		if !delivered[i] && (i == 0 || delivered[i-1]) {
			bursts++
		}
	}
	frac := float64(lost) / n
	mean := float64(lost) / float64(max(bursts, 1))
	// Stationary loss p; mean burst 1/((1-p)(1-c)) = 3.1 (uncorrelated:
	// 1.25). Standard errors: ~0.8% for the rate, ~0.1 for the burst.
	t.Logf("p=%.1f c=%.1f: lost %.2f%% in %d bursts, mean burst %.2f", p, c, 100*frac, bursts, mean)
	if frac < 0.15 || frac > 0.25 {
		t.Errorf("lost %.2f%%, want about 20%%", 100*frac)
	}
	if mean < 2.4 || mean > 4.0 {
		t.Errorf("mean loss burst %.2f, want about 3.1 (uncorrelated would be 1.25)", mean)
	}
}
