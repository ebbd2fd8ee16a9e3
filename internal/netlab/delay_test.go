//go:build linux

package netlab

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// echo answers every datagram on c with the same bytes until stop is
// called.
func echo(t *testing.T, c *net.UDPConn) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, from, err := c.ReadFromUDPAddrPort(buf)
			select {
			case <-done:
				return
			default:
			}
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue
				}
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// pingRTTs sends n numbered pings from c to an echoing peer, one at a
// time, and returns the round-trip times of those answered within wait.
func pingRTTs(t *testing.T, c, peer *net.UDPConn, n int, wait time.Duration) []time.Duration {
	t.Helper()
	var rtts []time.Duration
	msg := make([]byte, 64)
	buf := make([]byte, 2048)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		start := time.Now()
		if _, err := c.WriteToUDPAddrPort(msg, addrPort(peer)); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		c.SetReadDeadline(start.Add(wait))
		for {
			m, err := c.Read(buf)
			if err != nil {
				break // lost
			}
			if m == len(msg) && binary.BigEndian.Uint32(buf) == uint32(i) {
				rtts = append(rtts, time.Since(start))
				break
			}
		}
	}
	return rtts
}

// rttStats returns the minimum and median of rtts.
func rttStats(t *testing.T, rtts []time.Duration) (lo, med time.Duration) {
	t.Helper()
	if len(rtts) == 0 {
		t.Fatal("no ping answered")
	}
	s := slices.Clone(rtts)
	slices.Sort(s)
	return s[0], s[len(s)/2]
}

// checkRTT asserts RTTs fit a path adding oneWay in total (both directions
// together) to a base median RTT: no packet is early (the line never
// releases one before its time, so even the fastest ping took oneWay), and
// the median is at most 25% + 0.6 ms above base+oneWay: the slack of a
// loaded 2-core machine waking threads, tight enough that a doubled delay
// fails.
func checkRTT(t *testing.T, what string, rtts []time.Duration, base, oneWay time.Duration) {
	t.Helper()
	lo, med := rttStats(t, rtts)
	hi := base + oneWay + oneWay/4 + 600*time.Microsecond
	t.Logf("%s: %d RTTs, min %v, median %v (base median %v, want min >= %v, median <= %v)",
		what, len(rtts), lo, med, base, oneWay, hi)
	if lo < oneWay {
		t.Errorf("%s: fastest RTT %v below the %v the delays add up to", what, lo, oneWay)
	}
	if med > hi {
		t.Errorf("%s: median RTT %v above %v", what, med, hi)
	}
}

func setDelays(t *testing.T, bed *Bed, d time.Duration) {
	t.Helper()
	for _, h := range bed.Hosts() {
		if err := bed.SetDelay(h, d); err != nil {
			t.Fatalf("SetDelay(%s, %v): %v", h.Name(), d, err)
		}
	}
}

// TestDelayRTT: a ping-pong's RTT rises by twice the one-way delay.
func TestDelayRTT(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4600), listenUDP(t, b, 4600)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)
	echo(t, cb)

	const pings = 150
	_, base := rttStats(t, pingRTTs(t, ca, cb, pings, time.Second))
	for _, d := range []time.Duration{500 * time.Microsecond, 2 * time.Millisecond} {
		setDelays(t, bed, d)
		pingRTTs(t, ca, cb, 10, time.Second) // let the lines' timers adapt
		rtts := pingRTTs(t, ca, cb, pings, time.Second)
		if len(rtts) != pings {
			t.Fatalf("delay %v: %d of %d pings answered", d, len(rtts), pings)
		}
		checkRTT(t, "delay "+d.String(), rtts, base, 2*d)
	}
	for _, h := range []*Host{a, b} {
		fwd, dropped, err := bed.delayCounters(h)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: line forwarded %d, dropped %d", h.Name(), fwd, dropped)
		if fwd < 2*pings || dropped != 0 {
			t.Errorf("%s: line forwarded %d, dropped %d; want >= %d pings through, none dropped", h.Name(), fwd, dropped, 2*pings)
		}
	}
}

// TestDelayWithRate: the rate limit still holds behind the delay line, and
// the delay still adds to the RTT.
func TestDelayWithRate(t *testing.T) {
	const rate, delay = 20_000_000, 2 * time.Millisecond
	bed := newBed(t, Options{Rate: rate, Delay: delay})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4610), listenUDP(t, b, 4610)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)

	// The base RTT of an undelayed bed is tens of µs; 0 keeps the bound
	// conservative for the lower side and costs 20 µs of slack above.
	stop := echo(t, cb)
	checkRTT(t, "rate+delay", pingRTTs(t, ca, cb, 60, time.Second), 0, 2*delay)
	stop()

	const payload = 1472
	check := func(bps uint64, d time.Duration) {
		t.Helper()
		f0, _, err := bed.delayCounters(a)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(bps) / 8 * d.Seconds() * payload / (payload + 8 + 20 + 14)
		sent, got := blast(t, ca, cb, payload, d)
		f1, _, err := bed.delayCounters(a)
		if err != nil {
			t.Fatal(err)
		}
		ratio := float64(got) / want
		t.Logf("%d bit/s + 2 ms: sent %d B, received %d B in %v = %.2f of the budget; line carried %d datagrams",
			bps, sent, got, d, ratio, f1-f0)
		if ratio > 1.2 || ratio < 0.5 {
			t.Errorf("received %.2f of the rate budget, want 0.5..1.2", ratio)
		}
		// The limit applies before the line: it carries what the rate
		// lets through, not the sender's excess.
		if carried := float64(f1 - f0); carried > 1.3*float64(got)/payload+100 {
			t.Errorf("line carried %.0f datagrams for %d delivered: the excess went through it", carried, got/payload)
		}
	}
	check(rate, time.Second)
	// A rate change at run time reaches the limiter in front of the line.
	if err := bed.SetRate(a, 5_000_000); err != nil {
		t.Fatal(err)
	}
	check(5_000_000, 500*time.Millisecond)
	// The limiter's queue still bounds a burst (it meets the burst when
	// the line lets it out).
	if n := sendBurst(t, ca, cb, payload, 2000); n > 200 {
		t.Errorf("burst of 2000 delivered %d through 20 Mbit/s, want < 200", n)
	}
}

// sendOrdered sends n numbered datagrams (calling at(i) before datagram i,
// if set) and returns the numbers in the order they arrived.
func sendOrdered(t *testing.T, tx, rx *net.UDPConn, n int, at func(i int)) []uint32 {
	t.Helper()
	var wg sync.WaitGroup
	var seen []uint32
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			m, err := rx.Read(buf)
			if err != nil {
				select {
				case <-done:
					return
				default:
					continue
				}
			}
			if m == 64 {
				seen = append(seen, binary.BigEndian.Uint32(buf))
			}
		}
	}()
	msg := make([]byte, 64)
	for i := range n {
		if at != nil {
			at(i)
		}
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := tx.WriteToUDPAddrPort(msg, addrPort(rx)); err != nil {
			t.Errorf("send %d: %v", i, err)
		}
		if i%100 == 99 {
			time.Sleep(200 * time.Microsecond) // keep the receiver unhurried
		}
	}
	close(done)
	wg.Wait()
	return seen
}

func checkInOrder(t *testing.T, what string, seen []uint32) {
	t.Helper()
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("%s: %d arrived after %d: reordered or duplicated", what, seen[i], seen[i-1])
		}
	}
}

// TestDelayWithLoss: loss applies to delayed traffic at its rate, the loss
// filter's counters explain it, and the line keeps order.
func TestDelayWithLoss(t *testing.T) {
	const delay = time.Millisecond
	bed := newBed(t, Options{Delay: delay, Loss: 0.1})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4620), listenUDP(t, b, 4620)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)

	d0, _, err := bed.lossCounters(a)
	if err != nil {
		t.Fatal(err)
	}
	f0, _, err := bed.delayCounters(a)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	seen := sendOrdered(t, ca, cb, n, nil)
	d1, _, err := bed.lossCounters(a)
	if err != nil {
		t.Fatal(err)
	}
	f1, _, err := bed.delayCounters(a)
	if err != nil {
		t.Fatal(err)
	}
	lost := n - len(seen)
	frac := float64(lost) / n
	t.Logf("10%% loss + 1 ms: %d of %d lost (%.1f%%); loss filter dropped %d; line forwarded %d",
		lost, n, 100*frac, d1-d0, f1-f0)
	checkInOrder(t, "loss+delay", seen)
	if frac < 0.05 || frac > 0.15 {
		t.Errorf("lost %.1f%%, want 5..15%%", 100*frac)
	}
	if drops := int(d1 - d0); drops < lost || drops > lost+20 {
		t.Errorf("loss filter dropped %d, receiver missed %d: losses not explained by the filter", drops, lost)
	}
	// Every datagram went through the line, before the loss filter.
	if int(f1-f0) < n {
		t.Errorf("line forwarded %d of %d datagrams", f1-f0, n)
	}
	// Pings lose ~19% (two lossy legs) but the answered ones are delayed.
	stop := echo(t, cb)
	checkRTT(t, "loss+delay", pingRTTs(t, ca, cb, 60, 30*time.Millisecond), 0, 2*delay)
	stop()
}

// TestSetDelay: the delay changes at run time, per direction, without
// reordering what is in flight, and goes away again.
func TestSetDelay(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4630), listenUDP(t, b, 4630)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)
	echo(t, cb)
	_, base := rttStats(t, pingRTTs(t, ca, cb, 50, time.Second))

	// a->b only: the RTT carries it once.
	if err := bed.SetDelay(a, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	checkRTT(t, "a->b 5 ms", pingRTTs(t, ca, cb, 40, time.Second), base, 5*time.Millisecond)

	// Shortening the delay mid-stream: datagrams sent after the change
	// wait for those ahead of them instead of overtaking them.
	const n = 1000
	seen := sendOrdered(t, ca, listenUDP(t, b, 4631), n, func(i int) {
		if i == n/2 {
			if err := bed.SetDelay(a, 200*time.Microsecond); err != nil {
				t.Error(err)
			}
		}
	})
	if len(seen) != n {
		t.Errorf("delivered %d of %d across the change", len(seen), n)
	}
	checkInOrder(t, "delay 5 ms -> 200 µs", seen)
	checkRTT(t, "a->b 200 µs", pingRTTs(t, ca, cb, 40, time.Second), base, 200*time.Microsecond)

	// Removing it restores the undelayed path.
	if err := bed.SetDelay(a, 0); err != nil {
		t.Fatal(err)
	}
	pingRTTs(t, ca, cb, 5, time.Second) // what was in the line drains
	lo, med := rttStats(t, pingRTTs(t, ca, cb, 50, time.Second))
	t.Logf("delay removed: RTT min %v median %v (base %v)", lo, med, base)
	if lo > 150*time.Microsecond {
		t.Errorf("fastest RTT %v after removing a 200 µs delay, want undelayed", lo)
	}

	for name, err := range map[string]error{
		"negative":     bed.SetDelay(a, -time.Millisecond),
		"over maximum": bed.SetDelay(a, MaxDelay+1),
		"nil host":     bed.SetDelay(nil, time.Millisecond),
	} {
		if err == nil {
			t.Errorf("SetDelay %s: accepted", name)
		}
	}
}

// TestDelayTCP: TCP (its large segments are split on the way into the
// line, checksums filled in) crosses a delayed link intact.
func TestDelayTCP(t *testing.T) {
	bed := newBed(t, Options{Delay: 500 * time.Microsecond})
	a, b := bed.Host("a"), bed.Host("b")
	var ln net.Listener
	if err := b.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(b.Addr(), 4640).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conn net.Conn
	if err := a.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	data := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	deadline := time.Now().Add(10 * time.Second)
	conn.SetDeadline(deadline)
	peer.SetDeadline(deadline)
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		errc <- errors.Join(err, conn.(*net.TCPConn).CloseWrite())
	}()
	h := sha256.New()
	n, err := io.Copy(h, peer)
	if err != nil {
		t.Fatalf("receive after %d bytes: %v", n, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("received %d bytes, want %d intact", n, len(data))
	}
	t.Logf("4 MiB over TCP with 0.5 ms each way in %v", time.Since(start))
}

// TestDelaySetupFailure: a delay line that cannot be built (here: its tap's
// name is taken) leaves no fd, thread or redirect behind, and the link
// keeps working undelayed until a later SetDelay succeeds.
func TestDelaySetupFailure(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4650), listenUDP(t, b, 4650)
	warmUp(t, ca, cb)
	echo(t, cb)

	attrs := netlink.NewLinkAttrs()
	attrs.Name = delayTapName
	clash := &netlink.Veth{LinkAttrs: attrs, PeerName: "netlab-dl1"}
	if err := a.ns.nl.LinkAdd(clash); err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	err := bed.SetDelay(a, time.Millisecond)
	t.Logf("SetDelay with the tap name taken: %v", err)
	if err == nil {
		t.Fatal("SetDelay succeeded without its tap")
	}
	if n := openFDs(t); n != fds || a.port.delay != nil {
		t.Fatalf("failed SetDelay left %d fds (was %d), line %v", n, fds, a.port.delay)
	}
	if lo, _ := rttStats(t, pingRTTs(t, ca, cb, 20, time.Second)); lo > time.Millisecond {
		t.Fatalf("fastest RTT %v after a failed SetDelay, want undelayed", lo)
	}

	if err := a.ns.nl.LinkDel(clash); err != nil {
		t.Fatal(err)
	}
	if err := bed.SetDelay(a, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	checkRTT(t, "after the clash", pingRTTs(t, ca, cb, 20, time.Second), 0, time.Millisecond)
}
