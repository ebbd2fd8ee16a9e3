package remote_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/transport"
)

// checkPaths checks the RTT records: the paths listed are want, in
// order, each with samples, a positive sum and its buckets adding up to
// its count.
func checkPaths(t *testing.T, who string, ps []remote.PathStats, want ...int) {
	t.Helper()
	if len(ps) != len(want) {
		t.Fatalf("%s: RTT of paths %+v, want paths %v", who, ps, want)
	}
	for i, p := range ps {
		var n uint64
		for _, c := range p.RTT.Counts {
			n += c
		}
		if p.Path != want[i] || p.RTT.Count == 0 || p.RTT.Sum <= 0 || n != p.RTT.Count {
			t.Fatalf("%s: path %+v", who, p)
		}
		// Loopback round trips take microseconds to milliseconds, far
		// below the last bound (about a second).
		if inf := p.RTT.Counts[latency.Buckets-1]; inf != 0 {
			t.Errorf("%s: path %d: %d of %d samples above %v", who, p.Path, inf, p.RTT.Count, latency.Bound(latency.Buckets-2))
		}
	}
}

// TestStatsTotals: the fabric's totals after real traffic between two
// fabrics on loopback. A WRITE posted before the peer's QP connects is
// retransmitted on timeouts until it does, then lands; one the peer's
// device turns away busy comes back with BUSY NAKs and then lands, one
// it turns away as stopped with an RNR NAK. The counters say so on each
// side (the sender's RTT samples on its one
// path; the receiver, which sent no data, has none), and they stay
// when the connections are gone.
func TestStatsTotals(t *testing.T) {
	a, b := pair(t, opts{transport: transport.Config{RTOInit: 20 * time.Millisecond, RTOMax: 200 * time.Millisecond}})
	for _, send := range []bool{false, true} {
		if err := a.f.Connect(connection(a, b, 1, 2, send, 7, 7)); err != nil {
			t.Fatal(err)
		}
	}
	w := newWaiter()
	const n1, n2 = 100000, 3000
	v, p := buffer(t, n1)
	fill(p, 3)
	r := request(a, b, 1, 2, fabric.OpWrite)
	r.Len, r.Local = n1, v
	a.f.Post(r, w)
	wait.For(t, "a retransmission timeout", func() bool { return a.f.Stats().Timeouts > 0 })
	for _, send := range []bool{false, true} {
		if err := b.f.Connect(connection(b, a, 2, 1, send, 7, 7)); err != nil {
			t.Fatal(err)
		}
	}
	if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
		t.Fatalf("first WRITE: %v", res.o)
	}
	b.dev.mu.Lock()
	b.dev.refuse, b.dev.refuseN = fabric.OutcomeBusy, 2
	b.dev.mu.Unlock()
	v2, _ := buffer(t, n2)
	r2 := request(a, b, 1, 2, fabric.OpWrite)
	r2.Len, r2.Local, r2.RemoteAddr = n2, v2, n1
	a.f.Post(r2, w)
	if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
		t.Fatalf("second WRITE: %v", res.o)
	}
	if st := a.f.Stats(); st.RNRNaks != 0 || st.BusyNaksReceived == 0 {
		t.Errorf("a after the busy device's WRITE: %d RNR NAKs, %d BUSY NAKs", st.RNRNaks, st.BusyNaksReceived)
	}
	b.dev.mu.Lock()
	b.dev.refuse, b.dev.refuseN = fabric.OutcomeRetry, 1
	b.dev.mu.Unlock()
	r3 := request(a, b, 1, 2, fabric.OpWrite)
	r3.Len, r3.Local, r3.RemoteAddr = n2, v2, n1
	a.f.Post(r3, w)
	if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
		t.Fatalf("third WRITE: %v", res.o)
	}

	sa, sb := a.f.Stats(), b.f.Stats()
	t.Logf("a %+v", sa)
	t.Logf("b %+v", sb)
	payload := uint64(1500 - 20 - 8 - 80) // MTU 1500, IPv4
	if minPkts := (n1+payload-1)/payload + 1; sa.DataSent < minPkts {
		t.Errorf("a sent %d DATA packets, want at least %d", sa.DataSent, minPkts)
	}
	if sa.Connections != 1 || sa.Retransmits == 0 || sa.Timeouts == 0 || sa.RNRNaks == 0 || sa.BusyNaksReceived == 0 || sa.BytesSent < n1+2*n2 || sa.DataReceived != 0 || sa.BytesPlaced != 0 {
		t.Errorf("a: %+v", sa)
	}
	if sb.BytesPlaced != n1+2*n2 || sb.DataReceived != sa.DataSent || sb.BytesReceived < n1+2*n2 || sb.DataSent != 0 || sb.UnknownConn == 0 ||
		sb.Busy == 0 || sb.BusyNaksSent != sa.BusyNaksReceived || sb.BusyNaksReceived != 0 {
		t.Errorf("b: %+v (a sent %d packets)", sb, sa.DataSent)
	}
	checkPaths(t, "a", sa.Paths, 0)
	checkPaths(t, "b", sb.Paths)

	a.f.Disconnect(fabric.Addr{GID: a.gid, QPN: 1})
	b.f.Disconnect(fabric.Addr{GID: b.gid, QPN: 2})
	after := a.f.Stats()
	if after.Connections != 0 || after.DataSent != sa.DataSent || after.Retransmits != sa.Retransmits || after.Timeouts != sa.Timeouts ||
		after.RNRNaks != sa.RNRNaks || after.BusyNaksReceived != sa.BusyNaksReceived || after.BytesSent != sa.BytesSent || len(after.Paths) != 1 || after.Paths[0].RTT.Count != sa.Paths[0].RTT.Count {
		t.Errorf("a after disconnecting: %+v, before: %+v", after, sa)
	}
	if bAfter := b.f.Stats(); bAfter.BytesPlaced != sb.BytesPlaced || bAfter.DataReceived != sb.DataReceived || bAfter.BusyNaksSent != sb.BusyNaksSent {
		t.Errorf("b after disconnecting: %+v, before: %+v", bAfter, sb)
	}
}

// TestStatsPerPath: each connection sends on its own source port (path
// id mod Paths, the default single-path spray, as RoCE's ECMP hashing
// does): with QP pairs chosen to cover all four paths, each path gets
// RTT samples under its own index, and no sample is lost or invented.
func TestStatsPerPath(t *testing.T) {
	const paths = 4
	a, b := pair(t, opts{paths: paths})
	var qps [paths]uint32 // a's QP whose connection takes path i
	for qa, found := uint32(1), 0; found < paths; qa++ {
		id, _ := remote.ConnIdentity(secret, tenant, fabric.Addr{GID: b.gid, QPN: qa + 1000}, fabric.Addr{GID: a.gid, QPN: qa}, 0)
		if p := id % paths; qps[p] == 0 {
			qps[p] = qa
			found++
		}
	}
	w := newWaiter()
	for _, qa := range qps {
		connect(t, a, b, qa, qa+1000, 7, 7)
		v, _ := buffer(t, 50000)
		r := request(a, b, qa, qa+1000, fabric.OpWrite)
		r.Len, r.Local = 50000, v
		a.f.Post(r, w)
		if res := w.next(t, 10*time.Second); res.o != fabric.OutcomeOK {
			t.Fatal(res.o)
		}
	}
	sa := a.f.Stats()
	checkPaths(t, "a", sa.Paths, 0, 1, 2, 3)
	var sum uint64
	for _, p := range sa.Paths {
		sum += p.RTT.Count
	}
	// Every acknowledgement that arrived with an RTT echo is one sample.
	if sum == 0 || sum > sa.Received {
		t.Errorf("%d RTT samples from %d datagrams received", sum, sa.Received)
	}
}
