package remote_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/transport"
)

// patient connections time out after 5 ms at least: a peer whose
// packets a control change turns away is told so (BUSY NAKs) and counts
// no timeout, but a lost BUSY NAK or probe still costs one, and a
// loaded machine must not make that a failure.
var patient = opts{transport: transport.Config{RTOInit: 5 * time.Millisecond, RTOMin: 5 * time.Millisecond}}

// TestBusyDeviceStallsOnlyItself: while a control change holds one
// device's data path, the loop, which serves every device of the host,
// does not wait for it: another device's WRITEs and READs complete
// meanwhile, the held device's packets are dropped and counted (Busy),
// none of its responder's methods is called, and once the change ends its
// WRITE completes, exactly once and with the right bytes.
func TestBusyDeviceStallsOnlyItself(t *testing.T) {
	a, b := pair(t, patient)
	free := &host{f: b.f, dev: newDev(t, 1<<20), gid: gidOf("fd00:0:0:2::21")}
	if _, err := b.f.Register(free.gid, free.dev); err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, 1, 2, 7, 7)    // to the device that will be held
	connect(t, a, free, 3, 4, 7, 7) // to the other

	release := holdDevice(t, b) // a control change of b's first device begins
	held := time.Now()
	const n = 64 << 10
	r, src := writeOf(t, a, b, 1, 2, n, 1)
	wHeld := newWaiter()
	a.f.Post(r, wHeld)

	// The other device's traffic goes on: 16 WRITEs, then a READ back.
	w := newWaiter()
	vf, srcf := buffer(t, n)
	fill(srcf, 2)
	for i := range 16 {
		r := request(a, free, 3, 4, fabric.OpWrite)
		r.Len, r.Local, r.RemoteAddr = n, vf, uint64(i)*n
		a.f.Post(r, w)
		if res := w.next(t, 2*time.Second); res.o != fabric.OutcomeOK {
			t.Fatalf("WRITE %d to the free device: %v", i, res.o)
		}
	}
	vr, back := buffer(t, n)
	rd := request(a, free, 3, 4, fabric.OpRead)
	rd.Len, rd.Local, rd.RemoteAddr = n, vr, 15*n
	a.f.Post(rd, w)
	if res := w.next(t, 2*time.Second); res.o != fabric.OutcomeOK || !bytes.Equal(back, srcf) {
		t.Fatalf("READ from the free device: %v", res.o)
	}
	during := time.Since(held)
	wHeld.none(t, 20*time.Millisecond)
	st := b.f.Stats()
	if st.Busy == 0 {
		t.Fatal("no packet of the held device was dropped as busy")
	}
	if begins, _, _, _ := b.dev.snapshot(); begins != 0 {
		t.Fatalf("the held device's responder was called %d times", begins)
	}
	t.Logf("1 MiB to the free device and 64 KiB back in %v while the other was held; %d packets dropped as busy", during, st.Busy)

	release()
	if res := wHeld.next(t, 2*time.Second); res.o != fabric.OutcomeOK {
		t.Fatalf("WRITE to the held device after the change: %v", res.o)
	}
	b.dev.mu.Lock()
	landed := bytes.Equal(b.dev.mem[:n], src)
	b.dev.mu.Unlock()
	if !landed {
		t.Fatal("the held device's WRITE landed wrong")
	}
	wHeld.none(t, 10*time.Millisecond)
}

// TestBusyResponse: a control change that begins after a READ was
// committed holds back its response (which reads the device's memory)
// until it ends, without stalling the loop; the READ then completes with
// the right bytes.
func TestBusyResponse(t *testing.T) {
	a, b := pair(t, patient)
	const n = 32 << 10
	b.dev.mu.Lock()
	fill(b.dev.mem[:n], 7)
	want := bytes.Clone(b.dev.mem[:n])
	b.dev.mu.Unlock()
	locked := make(chan struct{})
	release := sync.OnceFunc(b.dev.gate.Unlock)
	t.Cleanup(func() {
		select {
		case <-locked:
			release()
		default:
		}
	})
	b.dev.onCommit = func(req *fabric.Request) {
		if req.Op != fabric.OpRead {
			return
		}
		// A control change comes while the READ commits: it waits for
		// the loop to leave the data path, and new entries fail from now.
		go func() {
			b.dev.gate.Lock()
			close(locked)
		}()
		time.Sleep(5 * time.Millisecond)
	}
	connect(t, a, b, 1, 2, 7, 7)
	w := newWaiter()
	v, got := buffer(t, n)
	rd := request(a, b, 1, 2, fabric.OpRead)
	rd.Len, rd.Local = n, v
	a.f.Post(rd, w)
	<-locked
	w.none(t, 10*time.Millisecond)
	if st := b.f.Stats(); st.BytesSent != 0 {
		t.Fatalf("%d response bytes sent while the device was held", st.BytesSent)
	}
	release()
	if res := w.next(t, 2*time.Second); res.o != fabric.OutcomeOK || !bytes.Equal(got, want) {
		t.Fatalf("READ after the change: %v", res.o)
	}
}

// TestBusyOutlastsRetryBudget: a QP with retry_cnt 1 and rnr_retry 0,
// whose retry budget (RTO 5 ms, doubled once) is 15 ms, WRITEs and
// READs to a device held in a control change for 200 ms. The peer's
// BUSY NAKs cost neither retries nor RNR retries: both complete OK,
// with the right bytes, once the change ends; a counts no timeout.
// (With the packets dropped silently, as before, the WRITE failed
// RETRY_EXCEEDED after 15 ms.)
func TestBusyOutlastsRetryBudget(t *testing.T) {
	const hold = 200 * time.Millisecond
	a, b := pair(t, patient)
	connect(t, a, b, 1, 2, 1, 0)
	const n = 64 << 10
	b.dev.mu.Lock()
	fill(b.dev.mem[n:2*n], 5)
	want := bytes.Clone(b.dev.mem[n : 2*n])
	b.dev.mu.Unlock()

	release := holdDevice(t, b)
	held := time.Now()
	wr, src := writeOf(t, a, b, 1, 2, n, 4)
	w := newWaiter()
	a.f.Post(wr, w)
	vr, got := buffer(t, n)
	rd := request(a, b, 1, 2, fabric.OpRead)
	rd.Len, rd.Local, rd.RemoteAddr = n, vr, n
	a.f.Post(rd, w)
	w.none(t, hold)
	release()
	for i, name := range []string{"WRITE", "READ"} {
		if res := w.next(t, 2*time.Second); res.o != fabric.OutcomeOK {
			t.Fatalf("%s %d after a %v hold: %v", name, i, hold, res.o)
		}
	}
	took := time.Since(held)
	b.dev.mu.Lock()
	landed := bytes.Equal(b.dev.mem[:n], src)
	b.dev.mu.Unlock()
	if !landed || !bytes.Equal(got, want) {
		t.Fatalf("bytes wrong: WRITE landed %v, READ right %v", landed, bytes.Equal(got, want))
	}
	sa, sb := a.f.Stats(), b.f.Stats()
	t.Logf("held %v, done after %v; a: %d BUSY NAKs received, %d retransmissions, %d timeouts; b: %d turned away, %d BUSY NAKs sent",
		hold, took, sa.BusyNaksReceived, sa.Retransmits, sa.Timeouts, sb.Busy, sb.BusyNaksSent)
	if sa.BusyNaksReceived == 0 || sb.BusyNaksSent == 0 || sb.Busy == 0 || sa.RNRNaks != 0 {
		t.Errorf("a: %+v; b: %+v", sa, sb)
	}
}

// TestBusyForeverFails: a device that never leaves its control change
// fails its peer's WRITE RETRY_EXCEEDED after (retry_cnt+1) x
// BusyTimeout (here 2 x 30 ms), not sooner (but for a retry an ordinary
// timeout used), and not never.
func TestBusyForeverFails(t *testing.T) {
	const busyTimeout = 30 * time.Millisecond
	o := patient
	o.transport.BusyTimeout = busyTimeout
	a, b := pair(t, o)
	connect(t, a, b, 1, 2, 1, 0)
	holdDevice(t, b)
	w := newWaiter()
	wr, _ := writeOf(t, a, b, 1, 2, 4096, 0)
	start := time.Now()
	a.f.Post(wr, w)
	res := w.next(t, 5*time.Second)
	took, st := time.Since(start), a.f.Stats()
	t.Logf("failed %v after %v; a %+v", res.o, took, st)
	// An ordinary timeout (the loop starved for an RTO on a loaded
	// machine) takes the place of one BusyTimeout.
	bound := time.Duration(2-min(int(st.Timeouts), 2)) * busyTimeout
	if res.o != fabric.OutcomeRetryExceeded || took < bound {
		t.Fatalf("%v after %v, want RETRY_EXCEEDED after %v", res.o, took, bound)
	}
}
