package engine_test

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/virtio/abi"
)

// patient is the transport template of the cross-host tests: timeouts
// of 5 ms at least, so that a QP's retry budget (which a lost packet, a
// lost BUSY NAK or a peer's stalled loop uses) outlasts what the tests
// expect of it, however loaded the machine is.
var patient = transport.Config{RTOInit: 5 * time.Millisecond, RTOMin: 5 * time.Millisecond}

// crossHosts starts two cross-host fabrics on loopback that know each
// other, with connections made from template tc: the first serves the
// guests whose names start with "a", the second those with "b"
// (enginetest derives a guest's GID from its name).
func crossHosts(t *testing.T, tc transport.Config) (fa, fb *remote.Fabric) {
	t.Helper()
	prefix := func(c string) netip.Prefix {
		var g [16]byte
		copy(g[:], "fe80::"+c)
		return netip.PrefixFrom(netip.AddrFrom16(g), 56)
	}
	secret := []byte("engine-crosshost-secret")
	fs := make([]*remote.Fabric, 2)
	for i, c := range []string{"a", "b"} {
		f, err := remote.New(t.Context(), remote.Config{Listen: netip.MustParseAddrPort("127.0.0.1:0"), GIDPrefix: prefix(c), Secret: secret,
			Transport: tc})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Run(context.Background())
		}()
		t.Cleanup(func() {
			f.Close()
			<-done
		})
		fs[i] = f
	}
	for i, c := range []string{"b", "a"} {
		if err := fs[i].SetPeers([]remote.Peer{{GIDPrefix: prefix(c), Addr: fs[1-i].Addr()}}); err != nil {
			t.Fatal(err)
		}
	}
	return fs[0], fs[1]
}

// TestCrossHostControlChangeStallsOnlyItsDevice: two hosts joined by
// the cross-host fabric, two devices on each, a QP pair between a1 and
// b1 and one between a2 and b2. While a control change of b1 holds its
// gate (SetMemory, held in its quiesced section), a2's WRITEs to b2
// complete: the fabric's loop on b's host does not wait for b1. a1's
// WRITE to b1, sent meanwhile, is dropped there and completes, once and
// with the right bytes, after the change.
func TestCrossHostControlChangeStallsOnlyItsDevice(t *testing.T) {
	fa, fb := crossHosts(t, patient)
	conn := enginetest.ConnOpts{Access: abi.AccessAll, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, Timeout: 14}
	type side struct {
		g  *enginetest.Guest
		cq *enginetest.CQ
		qp *enginetest.QP
	}
	mk := func(f *remote.Fabric, name string) side {
		g := enginetest.NewGuest(t, f, name, enginetest.Options{RAM: 32 << 20})
		cq := g.CreateCQ(64)
		return side{g, cq, g.CreateQP(pd, cq, cq, enginetest.QPOpts{})}
	}
	a1, a2, b1, b2 := mk(fa, "a1"), mk(fa, "a2"), mk(fb, "b1"), mk(fb, "b2")
	enginetest.Connect(a1.qp, b1.qp, conn)
	enginetest.Connect(a2.qp, b2.qp, conn)
	const n = 64 << 10
	write := func(from, to side, wrid uint64, src, dst enginetest.Buf) {
		from.qp.PostSend(abi.SendWQE{WRID: wrid, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key},
			[]abi.SGE{src.SGE(0, n)}, nil)
	}

	// b1's control change, held until release.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b1.g.Eng.SetQuiet(func() {
		once.Do(func() { close(entered) })
		<-release
	})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	changed := make(chan error, 1)
	go func() { changed <- b1.g.Eng.SetMemory(b1.g.Mem) }()
	<-entered
	held := time.Now()

	src1, dst1 := a1.g.NewBuf(pd, 0, n), b1.g.NewBuf(pd, abi.AccessAll, n)
	fill(src1.Bytes(), 1)
	write(a1, b1, 1, src1, dst1)

	src2, dst2 := a2.g.NewBuf(pd, 0, n), b2.g.NewBuf(pd, abi.AccessAll, 8*n)
	fill(src2.Bytes(), 2)
	for i := range 8 {
		write(a2, b2, uint64(10+i), src2, enginetest.Buf{GPA: dst2.GPA + uint64(i)*n, Len: n, Key: dst2.Key})
		expect(t, a2.cq.Wait(), uint64(10+i), abi.WCSuccess, abi.WCRDMAWrite)
	}
	during := time.Since(held)
	for i := range 8 {
		if !bytes.Equal(dst2.Bytes()[i*n:(i+1)*n], src2.Bytes()) {
			t.Fatalf("WRITE %d to b2 landed wrong", i)
		}
	}
	a1.cq.ExpectNone(5 * time.Millisecond)
	busy := fb.Stats().Busy
	if busy == 0 {
		t.Fatal("b1's packets were not dropped as busy")
	}
	t.Logf("8 x 64 KiB a2 -> b2 in %v while b1 was held; %d packets to b1 dropped as busy", during, busy)

	releaseOnce()
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	expect(t, a1.cq.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
	if !bytes.Equal(dst1.Bytes(), src1.Bytes()) {
		t.Fatal("the WRITE to b1 landed wrong")
	}
	a1.cq.ExpectNone(5 * time.Millisecond)
}

// holdControlChange starts a control change of g's device (SetMemory)
// and holds it in its quiesced section, the data path's gate taken,
// until release; changed reports how the change ended. The test's
// cleanup releases it and waits for the end.
func holdControlChange(t *testing.T, g *enginetest.Guest) (release func(), changed <-chan error) {
	t.Helper()
	entered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	g.Eng.SetQuiet(func() {
		once.Do(func() { close(entered) })
		<-hold
	})
	release = sync.OnceFunc(func() { close(hold) })
	ch, finished := make(chan error, 1), make(chan struct{})
	go func() {
		ch <- g.Eng.SetMemory(g.Mem)
		close(finished)
	}()
	<-entered
	t.Cleanup(func() {
		release()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Error("the control change did not end")
		}
	})
	return release, ch
}

// TestCrossHostControlChangeKeepsPeerRetries: a control change of b1
// (SetMemory, held in its quiesced section) turns away every packet of
// a1's 64 KiB WRITE for 300 ms, twenty times the retry budget of a1's
// QP (retry_cnt 1, rnr_retry 0: an RTO of 5 ms, then 10). b's fabric
// says so (BUSY NAKs), and a1's QP uses neither retries nor RNR
// retries: the WRITE completes, once and with the right bytes, after
// the change. (When the packets were dropped silently, the WRITE failed
// RETRY_EXC_ERR 15 ms into the change.) A change that never ends fails
// the WRITE RETRY_EXC_ERR after (retry_cnt+1) x BusyTimeout.
func TestCrossHostControlChangeKeepsPeerRetries(t *testing.T) {
	for _, c := range []struct {
		name        string
		hold        time.Duration // 0: for ever
		busyTimeout time.Duration
	}{
		{"held 300 ms", 300 * time.Millisecond, 0},
		{"held for ever", 0, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := patient
			tc.BusyTimeout = c.busyTimeout
			fa, fb := crossHosts(t, tc)
			conn := enginetest.ConnOpts{Access: abi.AccessAll, RetryCnt: 1, RNRRetry: 0, MinRNRTimer: 1, Timeout: 14}
			ga, gb := enginetest.NewGuest(t, fa, "a1", enginetest.Options{RAM: 32 << 20}), enginetest.NewGuest(t, fb, "b1", enginetest.Options{RAM: 32 << 20})
			ca, cb := ga.CreateCQ(64), gb.CreateCQ(64)
			qa, qb := ga.CreateQP(pd, ca, ca, enginetest.QPOpts{}), gb.CreateQP(pd, cb, cb, enginetest.QPOpts{})
			enginetest.Connect(qa, qb, conn)
			const n = 64 << 10
			src, dst := ga.NewBuf(pd, 0, n), gb.NewBuf(pd, abi.AccessAll, n)
			fill(src.Bytes(), 3)

			release, changed := holdControlChange(t, gb)
			start := time.Now()
			qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key},
				[]abi.SGE{src.SGE(0, n)}, nil)
			if c.hold == 0 {
				cqe := ca.Wait()
				took, sa := time.Since(start), fa.Stats()
				t.Logf("failed %v after %v; a %+v", cqe.Status, took, sa)
				expect(t, cqe, 1, abi.WCRetryExcErr, abi.WCRDMAWrite)
				// (retry_cnt+1) x BusyTimeout; an ordinary timeout (a
				// loop starved for an RTO on a loaded machine) takes the
				// place of one BusyTimeout.
				if bound := time.Duration(2-min(int(sa.Timeouts), 2)) * c.busyTimeout; took < bound {
					t.Fatalf("failed after %v, before the bound %v", took, bound)
				}
				return
			}
			ca.ExpectNone(c.hold)
			sa := fa.Stats()
			release()
			if err := <-changed; err != nil {
				t.Fatal(err)
			}
			expect(t, ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)
			took := time.Since(start)
			if !bytes.Equal(dst.Bytes(), src.Bytes()) {
				t.Fatal("the WRITE landed wrong")
			}
			ca.ExpectNone(5 * time.Millisecond)
			sb := fb.Stats()
			t.Logf("held %v, WRITE done after %v; a: %d BUSY NAKs received, %d retransmissions, %d timeouts; b: %d packets turned away, %d BUSY NAKs sent",
				c.hold, took, sa.BusyNaksReceived, sa.Retransmits, sa.Timeouts, sb.Busy, sb.BusyNaksSent)
			if sa.BusyNaksReceived == 0 || sb.BusyNaksSent == 0 || sb.Busy == 0 || sa.RNRNaks != 0 {
				t.Errorf("a: %+v; b: %+v", sa, sb)
			}
		})
	}
}
