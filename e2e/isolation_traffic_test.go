package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// traffic is V's steady work with B for the whole suite: every round each
// side RDMA-WRITEs 4 KiB into the other's memory and SENDs it 2 KiB into a
// posted receive, and every completion and every byte that lands is
// checked. A round that fails stops the traffic and is reported by every
// later bystandersOK.
type traffic struct {
	v, b   trafficEnd
	rounds atomic.Int64
	stop   chan struct{}
	done   chan struct{}

	mu  sync.Mutex
	err error
}

// trafficEnd is one side: an RC QP with its own CQs, a source buffer and
// the destination the peer writes and sends into.
type trafficEnd struct {
	vm       *hostsim.VM
	scq, rcq *guestdriver.CQ
	qp       *guestdriver.QP
	src      guestdriver.Buffer
	srcMR    *guestdriver.MR
	dst      guestdriver.Buffer
	dstMR    *guestdriver.MR
}

// Where a round's data goes inside a destination: WRITEs into one of 8
// 4-KiB slots of [0, 32K), SENDs into one of 8 2-KiB slots of [32K, 48K).
const (
	writeSize = 4 << 10
	sendSize  = 2 << 10
	sendBase  = 32 << 10
	slots     = 8
)

// startTraffic connects V and B (V's destination is the start of the
// arena, registered in V's main PD) and runs rounds until the suite ends.
func (r *isoRig) startTraffic(t *testing.T) *traffic {
	t.Helper()
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	setup := func(e *trafficEnd, vm *hostsim.VM, pd *guestdriver.PD, dst guestdriver.Buffer) {
		t.Helper()
		e.vm, e.dst = vm, dst
		var err error
		if e.scq, err = vm.Driver.CreateCQ(r.ctx, 64); err != nil {
			t.Fatal(err)
		}
		if e.rcq, err = vm.Driver.CreateCQ(r.ctx, 64); err != nil {
			t.Fatal(err)
		}
		e.qp, err = pd.CreateQP(r.ctx, guestdriver.QPInit{SendCQ: e.scq, RecvCQ: e.rcq,
			Cap: guestdriver.QPCap{SQSize: 16, RQSize: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		e.src = r.alloc(t, vm, 16<<10)
		e.srcMR = r.regMR(t, pd, e.src, abi.AccessLocalWrite)
		e.dstMR = r.regMR(t, pd, dst, abi.AccessLocalWrite|abi.AccessRemoteWrite)
	}
	setup(&tr.v, r.v, r.vPD, r.slice(t, r.arena, 0, trafficLen))
	bPD := r.allocPD(t, r.b)
	setup(&tr.b, r.b, bPD, r.alloc(t, r.b, trafficLen))
	// B's traffic is not attacked; a default connection is what a
	// well-behaved guest uses.
	if err := tr.v.qp.ConnectTo(r.ctx, tr.b.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := tr.b.qp.ConnectTo(r.ctx, tr.v.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	go tr.run()
	t.Cleanup(tr.halt)
	r.tr = tr
	tr.waitRounds(t, 3)
	return tr
}

func (tr *traffic) run() {
	defer close(tr.done)
	for i := uint64(0); ; i++ {
		select {
		case <-tr.stop:
			return
		default:
		}
		if err := tr.round(i); err != nil {
			tr.mu.Lock()
			tr.err = fmt.Errorf("traffic round %d: %w", i, err)
			tr.mu.Unlock()
			return
		}
		tr.rounds.Add(1)
	}
}

// halt stops the traffic and waits for the round under way.
func (tr *traffic) halt() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	<-tr.done
}

func (tr *traffic) failure() error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.err
}

// waitRounds waits until n more rounds have completed, failing if the
// traffic failed or stalled.
func (tr *traffic) waitRounds(t *testing.T, n int64) {
	t.Helper()
	target := tr.rounds.Load() + n
	deadline := time.Now().Add(opTimeout)
	for tr.rounds.Load() < target {
		if err := tr.failure(); err != nil {
			t.Fatalf("V<->B traffic failed: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("V<->B traffic stalled at %d rounds", tr.rounds.Load())
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := tr.failure(); err != nil {
		t.Fatalf("V<->B traffic failed: %v", err)
	}
}

// pattern is round i's payload number k.
func pattern(b []byte, i uint64, k int) {
	seed := byte(i*37) + byte(k*61)
	for j := range b {
		b[j] = seed + byte(j*13) + byte(j>>8)
	}
}

func (tr *traffic) round(i uint64) error {
	v, b := &tr.v, &tr.b
	slot := i % slots
	wOff, sOff := slot*writeSize, sendBase+slot*sendSize
	// Receives first, so that no SEND finds an empty receive queue.
	for _, e := range []*trafficEnd{v, b} {
		if err := e.qp.PostRecv(guestdriver.RecvWR{WRID: i, SGL: []abi.SGE{e.dstMR.SGE(sOff, sendSize)}}); err != nil {
			return fmt.Errorf("%s: %w", e.vm.Name, err)
		}
	}
	for k, e := range []*trafficEnd{v, b} {
		peer := b
		if e == b {
			peer = v
		}
		pattern(e.src.Bytes()[:writeSize], i, 2*k)
		pattern(e.src.Bytes()[writeSize:writeSize+sendSize], i, 2*k+1)
		err := e.qp.PostSend(
			guestdriver.SendWR{WRID: 2 * i, Opcode: abi.WRRDMAWrite, Signaled: true,
				SGL:        []abi.SGE{e.srcMR.SGE(0, writeSize)},
				RemoteAddr: peer.dstMR.IOVA() + wOff, RKey: peer.dstMR.RKey()},
			guestdriver.SendWR{WRID: 2*i + 1, Opcode: abi.WRSend, Signaled: true,
				SGL: []abi.SGE{e.srcMR.SGE(writeSize, sendSize)}})
		if err != nil {
			return fmt.Errorf("%s: %w", e.vm.Name, err)
		}
	}
	want := make([]byte, writeSize)
	for k, e := range []*trafficEnd{v, b} {
		wcs, err := pollWCs(e.scq, 2, opTimeout)
		if err != nil {
			return fmt.Errorf("%s send CQ: %w", e.vm.Name, err)
		}
		if err := wcIs(wcs[0], 2*i, abi.WCRDMAWrite, 0); err != nil {
			return fmt.Errorf("%s WRITE: %w", e.vm.Name, err)
		}
		if err := wcIs(wcs[1], 2*i+1, abi.WCSend, 0); err != nil {
			return fmt.Errorf("%s SEND: %w", e.vm.Name, err)
		}
		wcs, err = pollWCs(e.rcq, 1, opTimeout)
		if err != nil {
			return fmt.Errorf("%s receive CQ: %w", e.vm.Name, err)
		}
		if err := wcIs(wcs[0], i, abi.WCRecv, sendSize); err != nil {
			return fmt.Errorf("%s RECV: %w", e.vm.Name, err)
		}
		// What landed in e came from its peer (k^1).
		pattern(want, i, 2*(k^1))
		if j := firstDiff(e.dst.Bytes()[wOff:wOff+writeSize], want); j >= 0 {
			return fmt.Errorf("%s: WRITE data wrong at byte %d of slot %d", e.vm.Name, j, slot)
		}
		pattern(want[:sendSize], i, 2*(k^1)+1)
		if j := firstDiff(e.dst.Bytes()[sOff:sOff+sendSize], want[:sendSize]); j >= 0 {
			return fmt.Errorf("%s: SEND data wrong at byte %d of slot %d", e.vm.Name, j, slot)
		}
	}
	return nil
}

// wcIs checks a successful completion's identity (and length, if n > 0).
func wcIs(wc guestdriver.WC, wrid uint64, op abi.WCOpcode, n uint32) error {
	if wc.Status != abi.WCSuccess {
		return fmt.Errorf("wr %d (%v): %w", wc.WRID, wc.Opcode, wc.Err())
	}
	if wc.WRID != wrid || wc.Opcode != op || (n > 0 && wc.ByteLen != n) {
		return fmt.Errorf("completion {wr %d %v len %d}, want {wr %d %v len %d}", wc.WRID, wc.Opcode, wc.ByteLen, wrid, op, n)
	}
	return nil
}
