package guestdriver

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// fakeDev plays the control path of a device over fakeTransport: it hands
// out CQ and QP numbers and doorbell indices by the conventions and
// records every request payload, so the driver's data path can be tested
// against plain memory.
type fakeDev struct {
	mu     sync.Mutex
	limits abi.Limits
	nextCQ uint32
	nextQP uint32
	reqs   map[abi.Opcode][][]byte
	// mutate lets a test play a misbehaving device.
	mutate func(op abi.Opcode, resp any)
	status map[abi.Opcode]abi.Status
}

func (fd *fakeDev) handle(op abi.Opcode, payload []byte) (abi.Status, []byte) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.reqs == nil {
		fd.reqs = map[abi.Opcode][][]byte{}
	}
	fd.reqs[op] = append(fd.reqs[op], append([]byte(nil), payload...))
	if st, ok := fd.status[op]; ok {
		return st, nil
	}
	var resp any
	switch op {
	case abi.OpAllocPD:
		resp = &abi.HandleResp{Handle: 1}
	case abi.OpCreateCQ:
		fd.nextCQ++
		resp = &abi.CreateCQResp{CQN: fd.nextCQ, DoorbellIndex: fd.limits.MaxQP + fd.nextCQ - 1}
	case abi.OpCreateQP:
		var req abi.CreateQPReq
		if err := abi.DecodePayload(payload, &req); err != nil {
			return abi.StatusFor(err), nil
		}
		fd.nextQP++
		qpn := fd.nextQP + 1
		resp = &abi.CreateQPResp{QPN: qpn, DoorbellIndex: qpn - 2,
			SQStride: abi.SendWQEStride(req.MaxSendSGE, req.MaxInlineData), RQStride: abi.RecvWQEStride(req.MaxRecvSGE)}
	case abi.OpRegMR:
		resp = &abi.RegMRResp{LKey: 0x1ab, RKey: 0x1ab}
	case abi.OpQueryQP:
		resp = &abi.QueryQPResp{Attr: abi.QPAttr{State: abi.QPStateSQD, SQDraining: 1}}
	}
	if resp == nil {
		return abi.StatusOK, nil
	}
	if fd.mutate != nil {
		fd.mutate(op, resp)
	}
	return abi.StatusOK, abi.EncodePayload(nil, resp)
}

func (fd *fakeDev) requests(op abi.Opcode) [][]byte {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.reqs[op]
}

// openFake opens a driver on a fake device with shmem doorbells (or the
// guest-RAM fallback).
func openFake(t *testing.T, fallback bool) (*Device, *fakeTransport, *fakeDev) {
	t.Helper()
	fd := &fakeDev{limits: abi.DefaultLimits}
	ft := &fakeTransport{handler: fd.handle, shmem: !fallback}
	ft.config = goodConfig(t, func(c *abi.Config) {
		if fallback {
			c.Status = abi.ConfigStatusDoorbellGuestRAM
		} else {
			c.Status = abi.ConfigStatusDoorbellShmem
		}
	})
	d, err := Open(context.Background(), ft)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, ft, fd
}

type fakeQP struct {
	d      *Device
	ft     *fakeTransport
	fd     *fakeDev
	cq     *CQ
	qp     *QP
	mr     *MR
	engine func(idle bool) // sets the device page's EngineIdle flag
}

func newFakeQP(t *testing.T, c QPCap) *fakeQP {
	t.Helper()
	ctx := context.Background()
	d, ft, fd := openFake(t, false)
	pd, err := d.AllocPD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ctx, QPInit{SendCQ: cq, RecvCQ: cq, Cap: c})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.Alloc(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(ctx, buf, abi.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeQP{d: d, ft: ft, fd: fd, cq: cq, qp: qp, mr: mr}
	f.engine = func(idle bool) {
		var v uint32
		if idle {
			v = abi.EngineIdle
		}
		ft.dbView.StoreUint32Release(abi.DevPageOffEngineFlags, v)
	}
	return f
}

// sendSlot decodes send ring slot i as the device would.
func (f *fakeQP) sendSlot(t *testing.T, i uint32) (abi.SendWQE, []abi.SGE, []byte) {
	t.Helper()
	wq := &f.qp.sq
	off := uint64(i&(wq.size-1)) * uint64(wq.stride)
	slot := append([]byte(nil), wq.ring.Bytes()[off:off+uint64(wq.stride)]...)
	w, err := abi.DecodeSendWQE(slot, wq.maxSGE, f.qp.inline)
	if err != nil {
		t.Fatalf("slot %d: %v", i, err)
	}
	var sges []abi.SGE
	if w.Flags&abi.SendInline == 0 {
		for j := range int(w.NumSGE) {
			sges = append(sges, abi.DecodeSGE(slot[abi.SendWQEHeaderSize+j*abi.SGESize:]))
		}
	}
	return w, sges, slot[abi.SendWQEHeaderSize:]
}

func TestCreateQPRequestAndRings(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 5, RQSize: 3, MaxSendSGE: 3, MaxRecvSGE: 2, MaxInline: 100})
	reqs := f.fd.requests(abi.OpCreateQP)
	if len(reqs) != 1 {
		t.Fatalf("%d CREATE_QP", len(reqs))
	}
	var req abi.CreateQPReq
	if err := abi.DecodePayload(reqs[0], &req); err != nil {
		t.Fatal(err)
	}
	if req.SQSize != 8 || req.RQSize != 4 || req.Type != abi.QPTypeRC || req.PDN != 1 ||
		req.SendCQN != f.cq.Num() || req.MaxInlineData != 100 || req.SigAll != 0 {
		t.Fatalf("CREATE_QP %+v", req)
	}
	sqStride, rqStride := abi.SendWQEStride(3, 100), abi.RecvWQEStride(2)
	if req.SQAddr%uint64(sqStride) != 0 || req.RQAddr%uint64(rqStride) != 0 {
		t.Fatalf("rings at %#x/%#x not aligned to strides %d/%d", req.SQAddr, req.RQAddr, sqStride, rqStride)
	}
	if f.qp.sq.ring.Len() != 8*uint64(sqStride) || f.qp.rq.ring.Len() != 4*uint64(rqStride) {
		t.Fatalf("ring sizes %d/%d", f.qp.sq.ring.Len(), f.qp.rq.ring.Len())
	}
	if f.qp.Num() != 2 {
		t.Fatalf("qpn %d", f.qp.Num())
	}
	// The record is the one the device named: QPN 2 -> index 0.
	rec0, _ := goodLayout(t).RecordOffset(0)
	if got, _ := f.ft.dbView.Sub(rec0, 64); &got.Bytes()[0] != &f.qp.rec.Bytes()[0] {
		t.Fatal("QP doorbell record is not record 0")
	}
}

func goodLayout(t *testing.T) abi.DoorbellLayout {
	l, err := abi.NewDoorbellLayout(abi.DefaultLimits, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPostSendEncodesWQEs(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 3, MaxRecvSGE: 2, MaxInline: 64})
	sgl := []abi.SGE{f.mr.SGE(0, 100), f.mr.SGE(200, 50), f.mr.SGE(1000, 8)}
	wrs := []SendWR{
		{WRID: 1, Opcode: abi.WRSend, SGL: sgl[:2], Signaled: true, Solicited: true},
		{WRID: 2, Opcode: abi.WRRDMAWriteWithImm, SGL: sgl, Imm: 0xabcd, RemoteAddr: 0x7000, RKey: 0x99, Fence: true},
		{WRID: 3, Opcode: abi.WRSend, Inline: []byte("hello, inline")},
		{WRID: 4, Opcode: abi.WRAtomicCmpSwap, SGL: sgl[2:], RemoteAddr: 0x8000, RKey: 7, CompareAdd: 5, Swap: 6, Signaled: true},
		{WRID: 5, Opcode: abi.WRRDMARead, SGL: sgl[:1], RemoteAddr: 0x9000, RKey: 8},
	}
	if err := f.qp.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	if got := f.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd); got != 5 {
		t.Fatalf("sq_prod %d, want 5", got)
	}
	for i, wr := range wrs {
		w, sges, payload := f.sendSlot(t, uint32(i))
		if w.WRID != wr.WRID || w.Opcode != wr.Opcode || w.Imm != wr.Imm || w.RemoteAddr != wr.RemoteAddr ||
			w.RKey != wr.RKey || w.CompareAdd != wr.CompareAdd || w.Swap != wr.Swap {
			t.Errorf("slot %d: %+v for %+v", i, w, wr)
		}
		if (w.Flags&abi.SendSignaled != 0) != wr.Signaled || (w.Flags&abi.SendSolicited != 0) != wr.Solicited ||
			(w.Flags&abi.SendFence != 0) != wr.Fence || (w.Flags&abi.SendInline != 0) != (wr.Inline != nil) {
			t.Errorf("slot %d: flags %#x for %+v", i, w.Flags, wr)
		}
		if wr.Inline != nil {
			if w.InlineLen != uint32(len(wr.Inline)) || string(payload[:w.InlineLen]) != string(wr.Inline) {
				t.Errorf("slot %d: inline %d %q", i, w.InlineLen, payload[:w.InlineLen])
			}
			continue
		}
		if len(sges) != len(wr.SGL) {
			t.Fatalf("slot %d: %d SGEs", i, len(sges))
		}
		for j := range sges {
			if sges[j] != wr.SGL[j] {
				t.Errorf("slot %d SGE %d: %+v, want %+v", i, j, sges[j], wr.SGL[j])
			}
		}
	}
	// Receive WQEs.
	if err := f.qp.PostRecv(RecvWR{WRID: 77, SGL: sgl[:2]}, RecvWR{WRID: 78}); err != nil {
		t.Fatal(err)
	}
	if got := f.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffRQProd); got != 2 {
		t.Fatalf("rq_prod %d", got)
	}
	rq := f.qp.rq.ring.Bytes()
	w, err := abi.DecodeRecvWQE(rq[:f.qp.rq.stride], 2)
	if err != nil || w.WRID != 77 || w.NumSGE != 2 ||
		abi.DecodeSGE(rq[abi.RecvWQEHeaderSize:]) != sgl[0] || abi.DecodeSGE(rq[abi.RecvWQEHeaderSize+abi.SGESize:]) != sgl[1] {
		t.Fatalf("recv slot 0: %+v %v", w, err)
	}
	if w, err := abi.DecodeRecvWQE(rq[f.qp.rq.stride:], 2); err != nil || w.WRID != 78 || w.NumSGE != 0 {
		t.Fatalf("recv slot 1: %+v %v", w, err)
	}
}

func TestPostWakeupProtocol(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	wr := SendWR{Opcode: abi.WRSend, SGL: []abi.SGE{f.mr.SGE(0, 1)}}
	f.engine(false)
	if err := f.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	if f.ft.wakeups != 0 {
		t.Fatalf("%d wake-up kicks to a busy engine", f.ft.wakeups)
	}
	f.engine(true)
	if err := f.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	if err := f.qp.PostRecv(RecvWR{}); err != nil {
		t.Fatal(err)
	}
	if f.ft.wakeups != 2 {
		t.Fatalf("%d wake-up kicks to an idle engine, want one per post", f.ft.wakeups)
	}
	// A refused post rings nothing.
	if err := f.qp.PostSend(SendWR{Opcode: 99}); !errors.Is(err, ErrBadWR) {
		t.Fatal(err)
	}
	if f.ft.wakeups != 2 {
		t.Fatal("a refused post kicked")
	}
}

func TestPostQueueFullAndWrap(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 4, RQSize: 2, MaxSendSGE: 1, MaxRecvSGE: 1})
	wr := func(id uint64) SendWR {
		return SendWR{WRID: id, Opcode: abi.WRSend, SGL: []abi.SGE{f.mr.SGE(0, 1)}}
	}
	err := f.qp.PostSend(wr(0), wr(1), wr(2), wr(3), wr(4), wr(5))
	var pe *PostError
	if !errors.As(err, &pe) || pe.Index != 4 || !errors.Is(err, ErrQueueFull) {
		t.Fatalf("posting 6 into 4: %v", err)
	}
	if got := f.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd); got != 4 {
		t.Fatalf("sq_prod %d after a partial post, want 4", got)
	}
	// The device retires three: three more fit, wrapping to slots 0-2.
	f.qp.rec.StoreUint32Release(abi.QPDoorbellOffSQCons, 3)
	if err := f.qp.PostSend(wr(10), wr(11), wr(12)); err != nil {
		t.Fatal(err)
	}
	if err := f.qp.PostSend(wr(13)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("8th post with 3 retired: %v", err)
	}
	for i, want := range []uint64{10, 11, 12, 3} {
		if w, _, _ := f.sendSlot(t, uint32(i)); w.WRID != want {
			t.Errorf("slot %d holds wr %d, want %d", i, w.WRID, want)
		}
	}
	// A consumer index ahead of the producer (a broken device) reads as
	// full, never as room to overwrite unretired WQEs.
	f.qp.rec.StoreUint32Release(abi.QPDoorbellOffSQCons, 100)
	if err := f.qp.PostSend(wr(20)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("post with sq_cons ahead of sq_prod: %v", err)
	}
	// Counters are free-running across the 32-bit wrap.
	g := newFakeQP(t, QPCap{SQSize: 4, RQSize: 2, MaxSendSGE: 1, MaxRecvSGE: 1})
	g.qp.sq.prod, g.qp.sq.cons = 1<<32-2, 1<<32-2
	g.qp.rec.StoreUint32Release(abi.QPDoorbellOffSQCons, 1<<32-2)
	if err := g.qp.PostSend(wr(1), wr(2), wr(3), wr(4)); err != nil {
		t.Fatal(err)
	}
	if got := g.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd); got != 2 {
		t.Fatalf("sq_prod %d after wrapping", got)
	}
	if w, _, _ := g.sendSlot(t, 1); w.WRID != 4 {
		t.Fatalf("slot 1 holds %d after the wrap", w.WRID)
	}
	// Receive ring: same rules.
	if err := g.qp.PostRecv(RecvWR{}, RecvWR{}, RecvWR{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("3 receives into 2: %v", err)
	}
}

func TestPostRefusesBadWRs(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 16, RQSize: 8, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: 16})
	s := f.mr.SGE(0, 8)
	for name, wr := range map[string]SendWR{
		"opcode":              {Opcode: 7},
		"3 SGEs":              {Opcode: abi.WRSend, SGL: []abi.SGE{s, s, s}},
		"inline too long":     {Opcode: abi.WRSend, Inline: make([]byte, 17)},
		"inline READ":         {Opcode: abi.WRRDMARead, Inline: []byte{1}},
		"inline and SGEs":     {Opcode: abi.WRSend, Inline: []byte{1}, SGL: []abi.SGE{s}},
		"atomic without SGE":  {Opcode: abi.WRAtomicFetchAdd},
		"atomic of 4 bytes":   {Opcode: abi.WRAtomicFetchAdd, SGL: []abi.SGE{f.mr.SGE(0, 4)}},
		"atomic with 2 SGEs":  {Opcode: abi.WRAtomicCmpSwap, SGL: []abi.SGE{s, s}},
		"inline atomic (nil)": {Opcode: abi.WRAtomicCmpSwap, Inline: []byte{}},
	} {
		err := f.qp.PostSend(SendWR{Opcode: abi.WRSend}, wr)
		var pe *PostError
		if !errors.Is(err, ErrBadWR) || !errors.As(err, &pe) || pe.Index != 1 {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Each batch posted its valid first WR and nothing else.
	if got := f.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd); got != 9 {
		t.Fatalf("sq_prod %d, want 9", got)
	}
	if err := f.qp.PostRecv(RecvWR{SGL: []abi.SGE{s, s}}); !errors.Is(err, ErrBadWR) {
		t.Fatalf("2 receive SGEs on a 1-SGE QP: %v", err)
	}
	// The raw path writes anything that fits a slot.
	raw := make([]byte, f.qp.sq.stride)
	raw[8] = 0xee // opcode
	if err := f.qp.PostRawSend(raw); err != nil {
		t.Fatal(err)
	}
	slot := f.qp.sq.ring.Bytes()[9*uint64(f.qp.sq.stride):]
	if slot[8] != 0xee {
		t.Fatalf("raw slot opcode %#x", slot[8])
	}
	if err := f.qp.PostRawSend(make([]byte, f.qp.sq.stride+1)); !errors.Is(err, ErrBadWR) {
		t.Fatalf("oversized raw WQE: %v", err)
	}
}

func TestPostAndPollDoNotAllocate(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 16, RQSize: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 32})
	sgl := []abi.SGE{f.mr.SGE(0, 64), f.mr.SGE(64, 64)}
	inline := []byte("0123456789")
	wcs := make([]WC, 4)
	allocs := testing.AllocsPerRun(200, func() {
		// Play the device: retire everything posted so far.
		f.qp.rec.StoreUint32Release(abi.QPDoorbellOffSQCons, f.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffSQProd))
		f.qp.rec.StoreUint32Release(abi.QPDoorbellOffRQCons, f.qp.rec.LoadUint32Acquire(abi.QPDoorbellOffRQProd))
		if err := f.qp.PostSend(SendWR{Opcode: abi.WRRDMAWrite, SGL: sgl, RemoteAddr: 1, RKey: 2, Signaled: true}); err != nil {
			t.Fatal(err)
		}
		if err := f.qp.PostSend(SendWR{Opcode: abi.WRSend, Inline: inline}); err != nil {
			t.Fatal(err)
		}
		if err := f.qp.PostRecv(RecvWR{SGL: sgl}); err != nil {
			t.Fatal(err)
		}
		f.cq.Poll(wcs)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post/poll round", allocs)
	}
}

// putCQE is the device writing a CQE and then publishing it.
func putCQE(cq *CQ, idx uint32, c abi.CQE) {
	off := (idx & (cq.entries - 1)) * abi.CQESize
	c.Put(cq.ring.Bytes()[off:])
}

func TestPollCQ(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 4, RQSize: 4})
	cq := f.cq
	if cq.Entries() != 16 {
		t.Fatalf("CQ of %d entries", cq.Entries())
	}
	wcs := make([]WC, 5)
	if n := cq.Poll(wcs); n != 0 {
		t.Fatalf("empty CQ polled %d", n)
	}
	// 12 CQEs: a batch of 5, 5, 2; then 10 more that wrap the ring.
	for i := range uint32(12) {
		putCQE(cq, i, abi.CQE{WRID: uint64(i), Status: abi.WCSuccess, Opcode: abi.WCRecv, ByteLen: i, QPN: 2, Flags: abi.WCWithImm, Imm: i * 3})
	}
	cq.rec.StoreUint32Release(abi.CQDoorbellOffProd, 12)
	var got []WC
	for {
		n := cq.Poll(wcs)
		if n == 0 {
			break
		}
		got = append(got, wcs[:n]...)
	}
	if len(got) != 12 {
		t.Fatalf("polled %d", len(got))
	}
	for i, wc := range got {
		if wc.WRID != uint64(i) || wc.ByteLen != uint32(i) || !wc.WithImm() || wc.Imm != uint32(i)*3 || wc.Err() != nil {
			t.Fatalf("wc %d: %+v", i, wc)
		}
	}
	if c := cq.rec.LoadUint32Acquire(abi.CQDoorbellOffCons); c != 12 {
		t.Fatalf("cons %d", c)
	}
	for i := uint32(12); i < 22; i++ {
		putCQE(cq, i, abi.CQE{WRID: uint64(i), Status: abi.WCRemAccessErr})
	}
	cq.rec.StoreUint32Release(abi.CQDoorbellOffProd, 22)
	big := make([]WC, 32)
	if n := cq.Poll(big); n != 10 || big[0].WRID != 12 || big[9].WRID != 21 || !errors.Is(big[9].Err(), abi.WCRemAccessErr) {
		t.Fatalf("wrapped poll: %d %+v", n, big[:n])
	}
	// A producer more than a ring ahead: the device overwrote CQEs.
	cq.rec.StoreUint32Release(abi.CQDoorbellOffProd, 22+17)
	if n := cq.Poll(big); n != 0 || !errors.Is(cq.Err(), ErrDevice) {
		t.Fatalf("poll past a broken producer: %d, %v", n, cq.Err())
	}
}

func TestReqNotifyArmWord(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 4, RQSize: 4})
	cq := f.cq
	for i, sol := range []bool{false, true, false} {
		if err := cq.ReqNotify(sol); err != nil {
			t.Fatal(err)
		}
		sn, flags := abi.SplitCQArmWord(cq.rec.LoadUint32Acquire(abi.CQDoorbellOffArm))
		want := abi.CQArmNextComp
		if sol {
			want = abi.CQArmSolicited
		}
		if sn != uint32(i+1) || flags != want {
			t.Fatalf("arm %d: sn %d flags %#x", i, sn, flags)
		}
	}
	cq.armSN = 1<<30 - 1
	cq.ReqNotify(false)
	if sn, _ := abi.SplitCQArmWord(cq.rec.LoadUint32Acquire(abi.CQDoorbellOffArm)); sn != 1 {
		t.Fatalf("arm sn after wrap %d, want 1 (0 is never used)", sn)
	}
}

func TestEventsRouting(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 4, RQSize: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n := f.ft.numPosted(); n != eventBuffers {
		t.Fatalf("%d event buffers posted, want %d", n, eventBuffers)
	}
	// A notification for our CQ wakes CQ.Wait, not WaitEvent.
	f.ft.deliverEvent(abi.Event{Type: abi.EventCQComp, Handle: f.cq.Num()})
	if err := f.cq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Everything else goes to WaitEvent, in order; the lost count adds up.
	f.ft.deliverEvent(abi.Event{Type: abi.EventQPFatal, Handle: f.qp.Num(), Info: uint32(abi.WCLocQPOpErr), Dropped: 3})
	f.ft.deliver([]byte{1, 2, 3}, 3) // malformed: too short, skipped
	f.ft.deliverEvent(abi.Event{Type: abi.EventCQComp, Handle: 999})
	f.ft.deliverEvent(abi.Event{Type: abi.EventCQErr, Handle: f.cq.Num()})
	for _, want := range []abi.Event{
		{Type: abi.EventQPFatal, Handle: f.qp.Num(), Info: uint32(abi.WCLocQPOpErr), Dropped: 3},
		{Type: abi.EventCQComp, Handle: 999},
		{Type: abi.EventCQErr, Handle: f.cq.Num()},
	} {
		ev, err := f.d.WaitEvent(ctx)
		if err != nil || ev != want {
			t.Fatalf("event %+v, %v; want %+v", ev, err, want)
		}
	}
	if err := f.cq.Wait(ctx); !errors.Is(err, ErrCQError) || !errors.Is(f.cq.Err(), ErrCQError) {
		t.Fatalf("CQ wait after CQ_ERR: %v / %v", err, f.cq.Err())
	}
	if f.d.EventsLost() != 3 {
		t.Fatalf("lost %d", f.d.EventsLost())
	}
	// Every used buffer was re-posted (including the malformed one).
	waitPosted(t, f.ft, eventBuffers)
	// A buffer the driver does not own (a predecessor's) is read but not
	// re-posted.
	foreign, _ := f.ft.AllocDMA(abi.EventSize, abi.EventSize)
	abi.Event{Type: abi.EventPortActive, Handle: 1}.Put(foreign.Bytes())
	f.ft.mu.Lock()
	f.ft.used = append(f.ft.used, fakeUsed{foreign, abi.EventSize})
	f.ft.mu.Unlock()
	f.ft.signal <- struct{}{}
	if ev, err := f.d.WaitEvent(ctx); err != nil || ev.Type != abi.EventPortActive {
		t.Fatalf("foreign buffer event %+v %v", ev, err)
	}
	if f.ft.numPosted() != eventBuffers {
		t.Fatal("a foreign buffer was re-posted")
	}
	// Close: waits end with ErrClosed.
	f.d.Close()
	if _, err := f.d.WaitEvent(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitEvent after Close: %v", err)
	}
	if err := f.cq.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("CQ.Wait after Close: %v", err)
	}
	f.d.Close() // idempotent
}

func TestFallbackDoorbellArea(t *testing.T) {
	d, ft, fd := openFake(t, true)
	ctx := context.Background()
	if len(fd.requests(abi.OpSetDoorbellArea)) != 0 {
		t.Fatal("doorbell area registered before any CQ or QP")
	}
	for range 2 {
		if _, err := d.CreateCQ(ctx, 4); err != nil {
			t.Fatal(err)
		}
	}
	reqs := fd.requests(abi.OpSetDoorbellArea)
	if len(reqs) != 1 {
		t.Fatalf("%d SET_DOORBELL_AREA", len(reqs))
	}
	var req abi.SetDoorbellAreaReq
	if err := abi.DecodePayload(reqs[0], &req); err != nil {
		t.Fatal(err)
	}
	layout := d.Config().Doorbell
	if req.Length != layout.Size() || req.Addr%uint64(layout.PageSize) != 0 {
		t.Fatalf("SET_DOORBELL_AREA %+v for a %d-byte layout", req, layout.Size())
	}
	// The CQ's record lives in that area.
	cq, err := d.CreateCQ(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	off, _ := layout.RecordOffset(cq.dbIndexForTest())
	cq.ReqNotify(false)
	if w := ft.gpaView(req.Addr+off, 16).LoadUint32Acquire(abi.CQDoorbellOffArm); w == 0 {
		t.Fatal("arm word not in the registered area")
	}

	// A device that refuses the area fails the first create, clearly.
	d2, _, fd2 := openFake(t, true)
	fd2.status = map[abi.Opcode]abi.Status{abi.OpSetDoorbellArea: abi.StatusBadAddress}
	if _, err := d2.CreateCQ(ctx, 4); !errors.Is(err, abi.StatusBadAddress) {
		t.Fatalf("CreateCQ with a refused area: %v", err)
	}
	if len(fd2.requests(abi.OpCreateCQ)) != 0 {
		t.Fatal("CREATE_CQ sent without doorbells")
	}
}

// dbIndexForTest recovers the record index from the record's position.
func (cq *CQ) dbIndexForTest() uint32 {
	db := cq.d.db
	rec := &cq.rec.Bytes()[0]
	for i := range db.layout.Records {
		off, _ := db.layout.RecordOffset(i)
		if &db.view.Bytes()[off] == rec {
			return i
		}
	}
	panic("record not found")
}

func TestHostileCreateResponses(t *testing.T) {
	ctx := context.Background()
	d, _, fd := openFake(t, false)
	pd, _ := d.AllocPD(ctx)
	fd.mutate = func(op abi.Opcode, resp any) {
		if r, ok := resp.(*abi.CreateCQResp); ok {
			r.DoorbellIndex = 1 << 30
		}
	}
	if _, err := d.CreateCQ(ctx, 4); !errors.Is(err, ErrDevice) {
		t.Fatalf("CQ with an out-of-range doorbell index: %v", err)
	}
	if len(fd.requests(abi.OpDestroyCQ)) != 1 {
		t.Fatal("the bogus CQ was not destroyed")
	}
	fd.mutate = nil
	cq, err := d.CreateCQ(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	fd.mutate = func(op abi.Opcode, resp any) {
		if r, ok := resp.(*abi.CreateQPResp); ok {
			r.SQStride *= 2
		}
	}
	if _, err := pd.CreateQP(ctx, QPInit{SendCQ: cq, RecvCQ: cq, Cap: QPCap{SQSize: 2, RQSize: 2, MaxSendSGE: 1}}); !errors.Is(err, ErrDevice) {
		t.Fatalf("QP with a different stride: %v", err)
	}
	if len(fd.requests(abi.OpDestroyQP)) != 1 {
		t.Fatal("the bogus QP was not destroyed")
	}
	// QUERY_QP's device-only field decodes.
	fd.mutate = nil
	qp, err := pd.CreateQP(ctx, QPInit{SendCQ: cq, RecvCQ: cq, Cap: QPCap{SQSize: 2, RQSize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := qp.Query(ctx); err != nil || r.Attr.State != abi.QPStateSQD || r.Attr.SQDraining != 1 {
		t.Fatalf("query %+v %v", r, err)
	}
	// Destroyed objects refuse to be used or destroyed again without
	// asking the device (the number may be someone else's by then).
	if err := qp.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := qp.Destroy(ctx); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("second destroy: %v", err)
	}
	if err := qp.PostSend(SendWR{Opcode: abi.WRSend}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("post on a destroyed QP: %v", err)
	}
	if len(fd.requests(abi.OpDestroyQP)) != 2 {
		t.Fatalf("%d DESTROY_QP sent", len(fd.requests(abi.OpDestroyQP)))
	}
}

func TestConnectTransitions(t *testing.T) {
	f := newFakeQP(t, QPCap{SQSize: 4, RQSize: 4})
	peer := NodeGID(0x0200_1122_3344_5566)
	if err := f.qp.ConnectTo(context.Background(), Endpoint{GID: peer, QPN: 77, PSN: 0xabcdef}); err != nil {
		t.Fatal(err)
	}
	reqs := f.fd.requests(abi.OpModifyQP)
	if len(reqs) != 3 {
		t.Fatalf("%d MODIFY_QP", len(reqs))
	}
	state := abi.QPStateReset
	for i, b := range reqs {
		var m abi.ModifyQPReq
		if err := abi.DecodePayload(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.QPN != f.qp.Num() {
			t.Fatalf("modify %d of QP %d", i, m.QPN)
		}
		next, err := abi.CheckModify(abi.QPTypeRC, state, m.AttrMask, &m.Attr)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if next == abi.QPStateRTR && (m.Attr.DestQPN != 77 || m.Attr.AH.DGID != peer || m.Attr.RQPSN != 0xabcdef ||
			m.Attr.PathMTU != abi.MTU4096 || m.Attr.AH.Port != 1) {
			t.Fatalf("RTR attrs %+v", m.Attr)
		}
		if next == abi.QPStateRTS && (m.Attr.SQPSN != f.qp.PSN() || m.Attr.RetryCnt != 7 || m.Attr.RNRRetry != 7 || m.Attr.Timeout == 0) {
			t.Fatalf("RTS attrs %+v", m.Attr)
		}
		state = next
	}
	if state != abi.QPStateRTS {
		t.Fatalf("ended in %v", state)
	}
	if g := NodeGID(0x0211223344556677); g != (abi.GID{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}) {
		t.Fatalf("NodeGID %x", g)
	}
}

// Every QP draws its own first send PSN: 24 bits, and not the same for
// QPs created one after another (a reused QP number starts a new packet
// stream). Two pairs of 8 draws would have to collide for the test to
// fail by chance (about 1 in 10^11).
func TestQPsDrawTheirPSNs(t *testing.T) {
	seen := map[uint32]bool{}
	for range 8 {
		f := newFakeQP(t, QPCap{SQSize: 4, RQSize: 4})
		p := f.qp.PSN()
		if p >= 1<<24 {
			t.Fatalf("PSN %#x is not 24 bits", p)
		}
		if e := f.qp.Endpoint(); e.PSN != p || e.QPN != f.qp.Num() {
			t.Fatalf("Endpoint %+v, QP %d PSN %#x", e, f.qp.Num(), p)
		}
		seen[p] = true
	}
	if len(seen) < 7 {
		t.Fatalf("8 QPs drew %d distinct PSNs", len(seen))
	}
}

func TestDMAPoolRecycles(t *testing.T) {
	ft := &fakeTransport{}
	p := newDMAPool(ft)
	a, err := p.alloc(100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != 100 || a.GPA%128 != 0 {
		t.Fatalf("100 bytes: %d at %#x (want 128-aligned)", a.Len(), a.GPA)
	}
	a.Bytes()[5] = 0xff
	p.release(a)
	p.release(a) // second release ignored
	b, _ := p.alloc(120, 64)
	if b.GPA != a.GPA || b.Bytes()[5] != 0 {
		t.Fatalf("recycled block at %#x (first at %#x), byte 5 = %#x", b.GPA, a.GPA, b.Bytes()[5])
	}
	c, _ := p.alloc(120, 64)
	if c.GPA == b.GPA {
		t.Fatal("one block handed out twice")
	}
	pg, _ := p.alloc(5000, 1)
	if pg.GPA%4096 != 0 {
		t.Fatalf("8 KiB class at %#x, not page-aligned", pg.GPA)
	}
	if _, err := p.alloc(64, 3); err == nil {
		t.Fatal("alignment 3 accepted")
	}
	if _, err := p.alloc(0, 1); err == nil {
		t.Fatal("zero-sized allocation accepted")
	}
	// Page-list registration writes the list into guest memory and frees
	// it afterwards.
	d, ft2, fd := openFake(t, false)
	pd, _ := d.AllocPD(context.Background())
	pages := []uint64{0x200000, 0x5000, 0x9000}
	if _, err := pd.RegMRPages(context.Background(), 0x10_0800, 3*4096-0x800, 12, pages, abi.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	var req abi.RegMRReq
	if err := abi.DecodePayload(fd.requests(abi.OpRegMR)[0], &req); err != nil {
		t.Fatal(err)
	}
	if req.NPages != 3 || req.PageShift != 12 || req.IOVA != 0x10_0800 || req.Length != 3*4096-0x800 {
		t.Fatalf("REG_MR %+v", req)
	}
	list := ft2.gpaView(req.Addr, 24).Bytes()
	for i, p := range pages {
		if binary.LittleEndian.Uint64(list[8*i:]) != p {
			t.Fatalf("page list entry %d", i)
		}
	}
	if _, ok := d.mem.live[req.Addr]; ok {
		t.Fatal("page list not freed")
	}
}
