package udp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"
)

// Raw-UDP baselines: what the sockets alone do, before any transport
// runs over them. vstellar-bench wire reports these next to the
// transport's own numbers.

// blastDrain is how long the receiver keeps reading after the sender
// stops: enough to empty its socket buffer.
const blastDrain = 200 * time.Millisecond

// pingTimeout bounds the wait for one ping's reply.
const pingTimeout = time.Second

// BlastResult is what BlastThroughput measured.
type BlastResult struct {
	Size           int           // payload bytes per datagram
	Sent, Received uint64        // datagrams
	Duration       time.Duration // first send to last datagram received
	Gbps           float64       // received payload, 1e9 bits per second
	PacketsPerSec  float64       // received datagrams per second
	SentGbps       float64       // offered payload over the send time
}

// Loss is the fraction of sent datagrams that never arrived (dropped by a
// full receive buffer, typically).
func (r BlastResult) Loss() float64 {
	if r.Sent == 0 {
		return 0
	}
	return 1 - float64(r.Received)/float64(r.Sent)
}

// BlastThroughput sends size-byte datagrams from sender to dst, which must
// be an address receiver is bound to, in batches of sender's MaxBatch as
// fast as the sockets take them for d, cycling the batches over sender's
// paths, while receiver counts what arrives. It uses receiver's read
// deadline, so nothing else may read from receiver meanwhile.
func BlastThroughput(ctx context.Context, sender, receiver *Conn, dst netip.AddrPort, size int, d time.Duration) (BlastResult, error) {
	res := BlastResult{Size: size}
	if size < 1 || size > MaxDatagram {
		return res, fmt.Errorf("udp: blast: size %d outside 1..%d", size, MaxDatagram)
	}
	if d <= 0 {
		return res, fmt.Errorf("udp: blast: duration %v not positive", d)
	}
	batch := len(sender.wr.hdrs)
	out := make([]Message, batch)
	for i := range out {
		out[i] = Message{Buf: make([]byte, size), N: size, Addr: dst}
	}
	in := make([]Message, len(receiver.rd.hdrs))
	for i := range in {
		in[i].Buf = make([]byte, size)
	}

	var (
		wg       sync.WaitGroup
		received uint64
		last     time.Time
		rerr     error
	)
	wg.Go(func() {
		for {
			n, err := receiver.ReadBatch(in)
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					rerr = err
				}
				return
			}
			received += uint64(n)
			last = time.Now()
		}
	})
	stop := context.AfterFunc(ctx, func() { receiver.SetReadDeadline(time.Now()) })
	defer stop()

	start := time.Now()
	var serr error
	for k := 0; time.Since(start) < d && ctx.Err() == nil; k++ {
		path := k % sender.Paths()
		for i := range out {
			out[i].Path = path
		}
		n, err := sender.WriteBatch(out)
		res.Sent += uint64(n)
		if err != nil {
			serr = err
			break
		}
	}
	sendTime := time.Since(start)
	receiver.SetReadDeadline(time.Now().Add(blastDrain))
	wg.Wait()
	receiver.SetReadDeadline(time.Time{})

	res.Received = received
	if err := errors.Join(serr, rerr, ctx.Err()); err != nil {
		return res, fmt.Errorf("udp: blast: %w", err)
	}
	if received == 0 {
		return res, fmt.Errorf("udp: blast: none of %d datagrams arrived at %v", res.Sent, dst)
	}
	res.Duration = last.Sub(start)
	secs := res.Duration.Seconds()
	res.Gbps = float64(received) * float64(size) * 8 / secs / 1e9
	res.PacketsPerSec = float64(received) / secs
	res.SentGbps = float64(res.Sent) * float64(size) * 8 / sendTime.Seconds() / 1e9
	return res, nil
}

// LatencyResult summarizes round-trip times.
type LatencyResult struct {
	N                  int
	Min, P50, P99, Max time.Duration
	Mean               time.Duration
	// RTTs are the samples, sorted (for pooling several runs).
	RTTs []time.Duration
}

// PingPong measures n round trips of one size-byte datagram (at least 8:
// it carries a sequence number) from a to b's path 0 address (loopback if
// b is bound to an unspecified address), which b echoes back, one at a
// time. It uses both Conns' read deadlines, so nothing else may read from
// them meanwhile.
func PingPong(ctx context.Context, a, b *Conn, n, size int) (LatencyResult, error) {
	var res LatencyResult
	if n < 1 {
		return res, fmt.Errorf("udp: pingpong: n %d not positive", n)
	}
	if size < 8 || size > MaxDatagram {
		return res, fmt.Errorf("udp: pingpong: size %d outside 8..%d", size, MaxDatagram)
	}
	dst := b.LocalAddr(0)
	if dst.Addr().IsUnspecified() {
		lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if dst.Addr().Is6() {
			lo = netip.IPv6Loopback()
		}
		dst = netip.AddrPortFrom(lo, dst.Port())
	}

	var wg sync.WaitGroup
	var eerr error
	wg.Go(func() {
		echo := []Message{{Buf: make([]byte, size)}}
		for {
			if _, err := b.ReadBatch(echo); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					eerr = err
				}
				return
			}
			if _, err := b.WriteBatch(echo); err != nil { // back to its source, same path
				eerr = err
				return
			}
		}
	})
	stop := context.AfterFunc(ctx, func() {
		a.SetReadDeadline(time.Now())
	})
	defer stop()

	// Grown as replies come: a long run cut short by ctx must not have
	// allocated room for all n up front.
	rtts := make([]time.Duration, 0, min(n, 1<<16))
	ping := []Message{{Buf: make([]byte, size), N: size, Addr: dst}}
	pong := []Message{{Buf: make([]byte, size)}}
	var perr error
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		binary.BigEndian.PutUint64(ping[0].Buf, uint64(i))
		a.SetReadDeadline(time.Now().Add(pingTimeout))
		t0 := time.Now()
		if _, err := a.WriteBatch(ping); err != nil {
			perr = fmt.Errorf("ping %d: %w", i, err)
			break
		}
		for perr == nil {
			if _, err := a.ReadBatch(pong); err != nil {
				perr = fmt.Errorf("ping %d: %w", i, err)
			} else if pong[0].N >= 8 && binary.BigEndian.Uint64(pong[0].Buf) == uint64(i) {
				break // else a late reply to an earlier ping: keep waiting
			}
		}
		if perr != nil {
			break
		}
		rtts = append(rtts, time.Since(t0))
	}
	b.SetReadDeadline(time.Now())
	wg.Wait()
	b.SetReadDeadline(time.Time{})
	a.SetReadDeadline(time.Time{})
	if err := errors.Join(perr, eerr, ctx.Err()); err != nil {
		return res, fmt.Errorf("udp: pingpong to %v: %w", dst, err)
	}
	return summarize(rtts), nil
}

// summarize sorts rtts and reads the percentiles off it.
func summarize(rtts []time.Duration) LatencyResult {
	slices.Sort(rtts)
	var sum time.Duration
	for _, d := range rtts {
		sum += d
	}
	n := len(rtts)
	return LatencyResult{
		N:    n,
		Min:  rtts[0],
		P50:  rtts[(n-1)*50/100],
		P99:  rtts[(n-1)*99/100],
		Max:  rtts[n-1],
		Mean: sum / time.Duration(n),
		RTTs: rtts,
	}
}
