package engine_test

import (
	"bytes"
	"testing"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// pair is two guests on one local fabric with one connected QP each.
type pair struct {
	fab    *fabric.Local
	a, b   *enginetest.Guest
	qa, qb *enginetest.QP
	ca, cb *enginetest.CQ
}

const pd = 1

func newPair(t *testing.T, conn enginetest.ConnOpts, o enginetest.QPOpts) *pair {
	t.Helper()
	fab := fabric.NewLocal()
	p := &pair{fab: fab, a: enginetest.NewGuest(t, fab, "a", enginetest.Options{}), b: enginetest.NewGuest(t, fab, "b", enginetest.Options{})}
	p.ca, p.cb = p.a.CreateCQ(64), p.b.CreateCQ(64)
	p.qa = p.a.CreateQP(pd, p.ca, p.ca, o)
	p.qb = p.b.CreateQP(pd, p.cb, p.cb, o)
	enginetest.Connect(p.qa, p.qb, conn)
	return p
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func expect(t *testing.T, cqe abi.CQE, wrid uint64, st abi.WCStatus, op abi.WCOpcode) {
	t.Helper()
	if cqe.WRID != wrid || cqe.Status != st || cqe.Opcode != op {
		t.Fatalf("cqe %+v (status %v, opcode %v), want wr_id %d %v %v", cqe, cqe.Status, cqe.Opcode, wrid, st, op)
	}
}

func TestSendRecvScatterGather(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, abi.AccessLocalWrite, 4096)
	dst := p.b.NewBuf(pd, abi.AccessLocalWrite, 4096)
	fill(src.Bytes(), 1)
	// Receive into three pieces, send from two.
	p.qb.PostRecv(77, dst.SGE(0, 100), dst.SGE(1000, 200), dst.SGE(3000, 1000))
	p.qa.PostSend(abi.SendWQE{WRID: 5, Opcode: abi.WRSendWithImm, Flags: abi.SendSignaled, Imm: 0xabcd},
		[]abi.SGE{src.SGE(0, 250), src.SGE(2000, 50)}, nil)
	expect(t, p.ca.Wait(), 5, abi.WCSuccess, abi.WCSend)
	r := p.cb.Wait()
	expect(t, r, 77, abi.WCSuccess, abi.WCRecv)
	if r.ByteLen != 300 || r.Imm != 0xabcd || r.Flags&abi.WCWithImm == 0 || r.SrcQP != p.qa.QPN || r.QPN != p.qb.QPN {
		t.Fatalf("recv cqe %+v", r)
	}
	msg := append(append([]byte{}, src.Bytes()[:250]...), src.Bytes()[2000:2050]...)
	got := append(append([]byte{}, dst.Bytes()[:100]...), dst.Bytes()[1000:1200]...)
	if !bytes.Equal(got, msg[:300]) {
		t.Fatalf("received bytes differ")
	}
	if p.qa.SQCons() != 1 || p.qb.RQCons() != 1 {
		t.Fatalf("cons sq %d rq %d", p.qa.SQCons(), p.qb.RQCons())
	}
}

func newFabric() *fabric.Local { return fabric.NewLocal() }

func (p *pair) fabric() *fabric.Local { return p.fab }
