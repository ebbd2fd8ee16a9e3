package guestdriver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	. "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/internal/testkit/verbstest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// end is one side of an end-to-end test: a VM with its device, a PD, send
// and receive CQs, an RC QP and a registered buffer.
type end struct {
	r    *rig
	d    *Device
	v    *verbstest.End // the objects below
	pd   *PD
	scq  *CQ
	rcq  *CQ
	qp   *QP
	buf  Buffer
	mr   *MR
	name string
}

// endOpts tune newPair.
type endOpts struct {
	cap    QPCap
	sigAll bool
	vm     func(*vmsim.Config) // e.g. no SHMEM: the guest-RAM fallback
	noConn bool                // leave the QPs in RESET
}

const bufSize = 64 << 10

var defaultCap = QPCap{SQSize: 64, RQSize: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 128}

// newPair starts two VMs whose devices share one in-process fabric and
// connects an RC QP on each to the other.
func newPair(t *testing.T, o endOpts) (a, b *end) {
	t.Helper()
	fab := fabric.NewLocal()
	if o.cap == (QPCap{}) {
		o.cap = defaultCap
	}
	a = newEnd(t, t.Name()+"-a", fab, o)
	b = newEnd(t, t.Name()+"-b", fab, o)
	if !o.noConn {
		if err := verbstest.Connect(testCtx(t), a.v, b.v); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func newEnd(t *testing.T, name string, fab fabric.Fabric, o endOpts) *end {
	t.Helper()
	r := startRigOn(t, name, fab, o.vm)
	v, err := verbstest.New(testCtx(t), r.drv, verbstest.Options{CQSize: 128, SplitCQ: true,
		Cap: o.cap, SigAll: o.sigAll, BufSize: bufSize})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &end{r: r, d: r.drv, v: v, pd: v.PD, scq: v.SCQ, rcq: v.RCQ, qp: v.QP, buf: v.Buf, mr: v.MR, name: name}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pollN polls cq until it has n completions (failing after a timeout)
// and checks that no more arrive right after.
func pollN(t *testing.T, cq *CQ, n int) []WC {
	t.Helper()
	var got []WC
	wcs := make([]WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		k := cq.Poll(wcs)
		got = append(got, wcs[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("CQ %d: %d of %d completions after 10s: %s (CQ err %v)", cq.Num(), len(got), n, fmtWCs(got), cq.Err())
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	if len(got) > n {
		t.Fatalf("CQ %d: %d completions, want %d: %s", cq.Num(), len(got), n, fmtWCs(got))
	}
	return got
}

// pollOne is pollN for a single completion.
func pollOne(t *testing.T, cq *CQ) WC {
	t.Helper()
	return pollN(t, cq, 1)[0]
}

// expectNoWC fails if cq yields a completion within d.
func expectNoWC(t *testing.T, cq *CQ, d time.Duration) {
	t.Helper()
	wcs := make([]WC, 4)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if n := cq.Poll(wcs); n > 0 {
			t.Fatalf("CQ %d: unexpected completions %s", cq.Num(), fmtWCs(wcs[:n]))
		}
	}
}

func fmtWCs(wcs []WC) string {
	s := "["
	for i, wc := range wcs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("{wr %d %v %v len %d qp %d}", wc.WRID, wc.Opcode, wc.Status.String(), wc.ByteLen, wc.QPN)
	}
	return s + "]"
}

// checkWC checks a completion's identity and success.
func checkWC(t *testing.T, wc WC, wrid uint64, op abi.WCOpcode, status abi.WCStatus) {
	t.Helper()
	if wc.WRID != wrid || wc.Opcode != op || wc.Status != status {
		t.Fatalf("completion %s, want wr %d %v %v", fmtWCs([]WC{wc}), wrid, op, status)
	}
}

// fill writes a pattern derived from seed.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}
