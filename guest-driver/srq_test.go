package guestdriver_test

import (
	"bytes"
	"errors"
	"testing"

	. "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestSRQ: one SRQ on b serves the receives of four QPs, each connected
// to a QP of a; every message lands once, in the WQE its completion
// names, on the QP it arrived at. The library refuses PostRecv on a QP
// of an SRQ, the device refuses to destroy an SRQ in use, and an armed
// limit reaches WaitEvent.
func TestSRQ(t *testing.T) {
	ctx := testCtx(t)
	a, b := newPair(t, endOpts{noConn: true})
	srq, err := b.pd.CreateSRQ(ctx, SRQInit{MaxWR: 30, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if attr, err := srq.Query(ctx); err != nil || attr.MaxWR != 32 || attr.MaxSGE != 1 || attr.PDN != b.pd.Num() {
		t.Fatalf("query %+v %v", attr, err)
	}
	const nQP, msg = 4, 512
	var qa, qb []*QP
	for range nQP {
		x, err := a.pd.CreateQP(ctx, QPInit{SendCQ: a.scq, RecvCQ: a.rcq, Cap: defaultCap})
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.pd.CreateQP(ctx, QPInit{SendCQ: b.scq, RecvCQ: b.rcq, Cap: defaultCap, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		if err := x.ConnectTo(ctx, y.Endpoint()); err != nil {
			t.Fatal(err)
		}
		if err := y.ConnectTo(ctx, x.Endpoint()); err != nil {
			t.Fatal(err)
		}
		qa, qb = append(qa, x), append(qb, y)
	}
	if err := qb[0].PostRecv(RecvWR{WRID: 1}); !errors.Is(err, ErrBadWR) {
		t.Fatalf("PostRecv on a QP of an SRQ: %v", err)
	}
	for i := range 2 * nQP {
		if err := srq.PostRecv(RecvWR{WRID: uint64(100 + i), SGL: []abi.SGE{b.mr.SGE(uint64(i*msg), msg)}}); err != nil {
			t.Fatal(err)
		}
	}
	fill(a.buf.Bytes()[:2*nQP*msg], 7)
	for i := range 2 * nQP {
		q := qa[i%nQP]
		if err := q.PostSend(SendWR{WRID: uint64(i), Opcode: abi.WRSend, Signaled: true, SGL: []abi.SGE{a.mr.SGE(uint64(i*msg), msg)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, wc := range pollN(t, a.scq, 2*nQP) {
		if wc.Status != abi.WCSuccess {
			t.Fatalf("send %s", fmtWCs([]WC{wc}))
		}
	}
	sent := map[uint32]int{} // per receiving QP: messages seen
	for _, wc := range pollN(t, b.rcq, 2*nQP) {
		if wc.Status != abi.WCSuccess || wc.Opcode != abi.WCRecv || wc.ByteLen != msg || wc.WRID < 100 || wc.WRID >= 100+2*nQP {
			t.Fatalf("recv %s", fmtWCs([]WC{wc}))
		}
		x := -1
		for k, y := range qb {
			if y.Num() == wc.QPN {
				x = k
			}
		}
		if x < 0 || qa[x].Num() != wc.SrcQP {
			t.Fatalf("recv %s on no pair", fmtWCs([]WC{wc}))
		}
		i := sent[wc.QPN]*nQP + x // the i-th message a sent
		sent[wc.QPN]++
		w := int(wc.WRID - 100)
		if !bytes.Equal(b.buf.Bytes()[w*msg:(w+1)*msg], a.buf.Bytes()[i*msg:(i+1)*msg]) {
			t.Fatalf("message %d landed wrong in WQE %d", i, wc.WRID)
		}
	}
	if err := srq.ArmLimit(ctx, 1); err != nil { // empty now: fires at once
		t.Fatal(err)
	}
	ev, err := b.d.WaitEvent(ctx)
	if err != nil || ev.Type != abi.EventSRQLimit || ev.Handle != srq.Num() {
		t.Fatalf("event %+v %v, want SRQ_LIMIT", ev, err)
	}
	if err := srq.Destroy(ctx); !errors.Is(err, abi.StatusBusy) {
		t.Fatalf("destroy of an SRQ in use: %v", err)
	}
	for _, y := range qb {
		if err := y.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(RecvWR{WRID: 1}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("PostRecv after Destroy: %v", err)
	}
}
