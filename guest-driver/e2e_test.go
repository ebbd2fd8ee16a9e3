package guestdriver_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/fabric"
	. "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestE2EPortAndGIDs(t *testing.T) {
	fab := fabric.NewLocal()
	a := startRigOn(t, "gid-a", fab, nil)
	b := startRigOn(t, "gid-b", fab, nil)
	ctx := testCtx(t)
	p, err := a.drv.QueryPort(ctx, Port)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != abi.PortActive || p.LinkLayer != abi.LinkLayerEthernet || p.GIDTableLen != a.drv.Limits().MaxGID || !p.ActiveMTU.Valid() {
		t.Fatalf("port %+v", p)
	}
	if _, err := a.drv.QueryPort(ctx, 2); !errors.Is(err, abi.StatusInvalidArgument) && !errors.Is(err, abi.StatusNotFound) {
		t.Fatalf("port 2: %v", err)
	}
	e, err := a.drv.QueryGID(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.GID != a.drv.GID() || e.GID != NodeGID(a.dev.NodeGUID()) || e.Type != abi.GIDTypeRoCE2 || e.Flags&abi.GIDFlagDevice == 0 {
		t.Fatalf("GID 0 %+v, driver computes %x", e, a.drv.GID())
	}
	extra := abi.GID{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	if err := a.drv.AddGID(ctx, 3, extra); err != nil {
		t.Fatal(err)
	}
	if e, err := a.drv.QueryGID(ctx, 3); err != nil || e.GID != extra || e.Flags&abi.GIDFlagGuest == 0 {
		t.Fatalf("GID 3 %+v %v", e, err)
	}
	// Another tenant cannot capture a GID this one holds, nor replace
	// the device's own; link-local GIDs are the devices' alone.
	if err := b.drv.AddGID(ctx, 1, extra); !errors.Is(err, abi.StatusBusy) {
		t.Fatalf("B adding A's GID: %v", err)
	}
	if err := b.drv.AddGID(ctx, 1, a.drv.GID()); !errors.Is(err, abi.StatusPermission) {
		t.Fatalf("B adding A's device GID: %v", err)
	}
	if err := a.drv.AddGID(ctx, 0, extra); err == nil {
		t.Fatal("GID index 0 replaced")
	}
	if err := a.drv.DelGID(ctx, 0); err == nil {
		t.Fatal("GID index 0 deleted")
	}
	if err := a.drv.DelGID(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if e, err := a.drv.QueryGID(ctx, 3); err != nil || e.Type != abi.GIDTypeNone {
		t.Fatalf("deleted GID 3 %+v %v", e, err)
	}
	// Released: now B may have it.
	if err := b.drv.AddGID(ctx, 1, extra); err != nil {
		t.Fatal(err)
	}
}

func TestE2EConnectAndQuery(t *testing.T) {
	a, b := newPair(t, endOpts{})
	ctx := testCtx(t)
	r, err := a.qp.Query(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Attr.State != abi.QPStateRTS || r.Attr.DestQPN != b.qp.Num() || r.Attr.AH.DGID != b.d.GID() ||
		r.Attr.PathMTU != abi.MTU4096 || r.Cap.SendCQN != a.scq.Num() || r.Cap.RecvCQN != a.rcq.Num() ||
		r.Cap.SQSize != 64 || r.Cap.MaxInlineData != 128 || r.Cap.PDN != a.pd.Num() {
		t.Fatalf("query %+v", r)
	}
	// The state machine is the device's to enforce.
	if err := a.qp.Modify(ctx, abi.QPAttrState, abi.QPAttr{State: abi.QPStateRTR}); !errors.Is(err, abi.StatusBadState) {
		t.Fatalf("RTS -> RTR: %v", err)
	}
	// Objects in use cannot go.
	if err := a.scq.Destroy(ctx); !errors.Is(err, abi.StatusBusy) {
		t.Fatalf("destroying a CQ a QP uses: %v", err)
	}
	if err := a.pd.Dealloc(ctx); !errors.Is(err, abi.StatusBusy) {
		t.Fatalf("deallocating a PD in use: %v", err)
	}
	// Teardown in order works, and double destroy is the device's NOT_FOUND.
	qpn := a.qp.Num()
	if err := a.qp.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.d.CallForTest(ctx, abi.OpDestroyQP, &abi.HandleReq{Handle: qpn}, nil); !errors.Is(err, abi.StatusNotFound) {
		t.Fatalf("second DESTROY_QP: %v", err)
	}
	for _, cq := range []*CQ{a.scq, a.rcq} {
		if err := cq.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.mr.Dereg(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.mr.Dereg(ctx); !errors.Is(err, abi.StatusNotFound) {
		t.Fatalf("second DEREG_MR: %v", err)
	}
	ah, err := a.pd.CreateAH(ctx, abi.AHAttr{DGID: b.d.GID(), HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := ah.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.pd.Dealloc(ctx); err != nil {
		t.Fatal(err)
	}
	// CQ resize keeps working on the other side.
	if err := b.scq.Resize(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if b.scq.Entries() != 1024 {
		t.Fatalf("resized to %d", b.scq.Entries())
	}
}

func TestE2ESendRecvSGL(t *testing.T) {
	a, b := newPair(t, endOpts{})
	src, dst := a.buf.Bytes(), b.buf.Bytes()
	fill(src[:4096], 1)
	// Scatter 250 bytes into two receive SGEs of B (100 + 200 bytes room).
	if err := b.qp.PostRecv(RecvWR{WRID: 10, SGL: []abi.SGE{b.mr.SGE(0, 100), b.mr.SGE(1000, 200)}}); err != nil {
		t.Fatal(err)
	}
	// Gather from three SGEs of A.
	gather := []abi.SGE{a.mr.SGE(0, 50), a.mr.SGE(500, 150), a.mr.SGE(3000, 50)}
	if err := a.qp.PostSend(SendWR{WRID: 20, Opcode: abi.WRSend, SGL: gather, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 20, abi.WCSend, abi.WCSuccess)
	wc := pollOne(t, b.rcq)
	checkWC(t, wc, 10, abi.WCRecv, abi.WCSuccess)
	if wc.ByteLen != 250 || wc.WithImm() || wc.QPN != b.qp.Num() {
		t.Fatalf("recv completion %+v", wc)
	}
	msg := append(append(append([]byte(nil), src[0:50]...), src[500:650]...), src[3000:3050]...)
	got := append(append([]byte(nil), dst[0:100]...), dst[1000:1150]...)
	if !bytes.Equal(got, msg) {
		t.Fatal("scattered payload differs from the gathered one")
	}
	if dst[1150] != 0 || dst[100] != 0 {
		t.Fatal("bytes beyond the message were written")
	}

	// SEND_WITH_IMM, solicited, into a single SGE.
	if err := b.qp.PostRecv(RecvWR{WRID: 11, SGL: []abi.SGE{b.mr.SGE(8192, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{WRID: 21, Opcode: abi.WRSendWithImm, SGL: []abi.SGE{a.mr.SGE(0, 4000)}, Imm: 0xfeedf00d, Signaled: true, Solicited: true}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 21, abi.WCSend, abi.WCSuccess)
	wc = pollOne(t, b.rcq)
	checkWC(t, wc, 11, abi.WCRecv, abi.WCSuccess)
	if !wc.WithImm() || wc.Imm != 0xfeedf00d || wc.ByteLen != 4000 || !bytes.Equal(dst[8192:8192+4000], src[:4000]) {
		t.Fatalf("recv with imm %+v", wc)
	}
	// A receive buffer too small: responder LOC_LEN_ERR, requester
	// REM_INV_REQ_ERR.
	if err := b.qp.PostRecv(RecvWR{WRID: 12, SGL: []abi.SGE{b.mr.SGE(0, 10)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{WRID: 22, Opcode: abi.WRSend, SGL: []abi.SGE{a.mr.SGE(0, 11)}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 22, abi.WCSend, abi.WCRemInvReqErr)
	checkWC(t, pollOne(t, b.rcq), 12, abi.WCRecv, abi.WCLocLenErr)
}

func TestE2EWriteAndWriteImm(t *testing.T) {
	a, b := newPair(t, endOpts{})
	src, dst := a.buf.Bytes(), b.buf.Bytes()
	fill(src[:16384], 3)
	// 8 KiB from two SGEs into B at offset 4096.
	wr := SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL:        []abi.SGE{a.mr.SGE(0, 4096), a.mr.SGE(8192, 4096)},
		RemoteAddr: b.mr.IOVA() + 4096, RKey: b.mr.RKey()}
	if err := a.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	wc := pollOne(t, a.scq)
	checkWC(t, wc, 1, abi.WCRDMAWrite, abi.WCSuccess)
	if !bytes.Equal(dst[4096:8192], src[0:4096]) || !bytes.Equal(dst[8192:12288], src[8192:12288]) {
		t.Fatal("WRITE payload differs")
	}
	if dst[4095] != 0 || dst[12288] != 0 {
		t.Fatal("WRITE spilled")
	}
	// A plain WRITE consumes no receive and completes nothing at B.
	expectNoWC(t, b.rcq, 20*time.Millisecond)

	// WRITE_WITH_IMM consumes a receive WQE at B.
	if err := b.qp.PostRecv(RecvWR{WRID: 50}); err != nil {
		t.Fatal(err)
	}
	fill(src[:100], 9)
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: abi.WRRDMAWriteWithImm, Signaled: true, Imm: 4242,
		SGL: []abi.SGE{a.mr.SGE(0, 100)}, RemoteAddr: b.mr.IOVA() + 30000, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 2, abi.WCRDMAWrite, abi.WCSuccess)
	wc = pollOne(t, b.rcq)
	checkWC(t, wc, 50, abi.WCRecvRDMAWithImm, abi.WCSuccess)
	if !wc.WithImm() || wc.Imm != 4242 || wc.ByteLen != 100 || !bytes.Equal(dst[30000:30100], src[:100]) {
		t.Fatalf("write with imm %+v", wc)
	}
}

func TestE2ERead(t *testing.T) {
	a, b := newPair(t, endOpts{})
	fill(b.buf.Bytes()[20000:30000], 5)
	if err := a.qp.PostSend(SendWR{WRID: 7, Opcode: abi.WRRDMARead, Signaled: true,
		SGL:        []abi.SGE{a.mr.SGE(100, 6000), a.mr.SGE(10000, 4000)},
		RemoteAddr: b.mr.IOVA() + 20000, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := pollOne(t, a.scq)
	checkWC(t, wc, 7, abi.WCRDMARead, abi.WCSuccess)
	if wc.ByteLen != 10000 {
		t.Fatalf("READ byte_len %d", wc.ByteLen)
	}
	got := append(append([]byte(nil), a.buf.Bytes()[100:6100]...), a.buf.Bytes()[10000:14000]...)
	if !bytes.Equal(got, b.buf.Bytes()[20000:30000]) {
		t.Fatal("READ data differs")
	}
	expectNoWC(t, b.rcq, 10*time.Millisecond)
}

func TestE2EAtomics(t *testing.T) {
	a, b := newPair(t, endOpts{})
	word := b.buf.View
	word.PutUint64(512, 1000)
	// FETCH_ADD: A gets the old value, B's word grows.
	if err := a.qp.PostSend(SendWR{WRID: 1, Opcode: abi.WRAtomicFetchAdd, Signaled: true, CompareAdd: 234,
		SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA() + 512, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 1, abi.WCFetchAdd, abi.WCSuccess)
	if old, now := a.buf.View.Uint64(0), word.Uint64(512); old != 1000 || now != 1234 {
		t.Fatalf("FETCH_ADD: old %d, now %d", old, now)
	}
	// CMP_SWAP that matches, then one that does not.
	cas := func(wrid, cmp, swap uint64) uint64 {
		t.Helper()
		if err := a.qp.PostSend(SendWR{WRID: wrid, Opcode: abi.WRAtomicCmpSwap, Signaled: true, CompareAdd: cmp, Swap: swap,
			SGL: []abi.SGE{a.mr.SGE(8, 8)}, RemoteAddr: b.mr.IOVA() + 512, RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		checkWC(t, pollOne(t, a.scq), wrid, abi.WCCompSwap, abi.WCSuccess)
		return a.buf.View.Uint64(8)
	}
	if old := cas(2, 1234, 7); old != 1234 || word.Uint64(512) != 7 {
		t.Fatalf("matching CMP_SWAP: old %d, now %d", old, word.Uint64(512))
	}
	if old := cas(3, 1234, 99); old != 7 || word.Uint64(512) != 7 {
		t.Fatalf("failing CMP_SWAP: old %d, now %d", old, word.Uint64(512))
	}
	// A misaligned atomic is the responder's to refuse.
	if err := a.qp.PostSend(SendWR{WRID: 4, Opcode: abi.WRAtomicFetchAdd, Signaled: true, CompareAdd: 1,
		SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA() + 513, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, a.scq); wc.WRID != 4 || wc.Status == abi.WCSuccess {
		t.Fatalf("misaligned atomic: %s", fmtWCs([]WC{wc}))
	}
	if word.Uint64(512) != 7 {
		t.Fatal("misaligned atomic changed memory")
	}
}

func TestE2EInline(t *testing.T) {
	a, b := newPair(t, endOpts{})
	msg := []byte("inline payload carried in the WQE itself")
	if err := b.qp.PostRecv(RecvWR{WRID: 1, SGL: []abi.SGE{b.mr.SGE(0, 256)}}); err != nil {
		t.Fatal(err)
	}
	scratch := append([]byte(nil), msg...)
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: abi.WRSend, Inline: scratch, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	clear(scratch) // the driver copied it
	checkWC(t, pollOne(t, a.scq), 2, abi.WCSend, abi.WCSuccess)
	if wc := pollOne(t, b.rcq); wc.ByteLen != uint32(len(msg)) || !bytes.Equal(b.buf.Bytes()[:len(msg)], msg) {
		t.Fatalf("inline SEND: %+v %q", wc, b.buf.Bytes()[:len(msg)])
	}
	full := bytes.Repeat([]byte{0xab}, 128)
	if err := a.qp.PostSend(SendWR{WRID: 3, Opcode: abi.WRRDMAWrite, Inline: full, Signaled: true,
		RemoteAddr: b.mr.IOVA() + 5000, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 3, abi.WCRDMAWrite, abi.WCSuccess)
	if !bytes.Equal(b.buf.Bytes()[5000:5128], full) {
		t.Fatal("inline WRITE payload differs")
	}
}

func TestE2EUnsignalled(t *testing.T) {
	a, b := newPair(t, endOpts{})
	for i := range 3 {
		if err := a.qp.PostSend(SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Inline: []byte{byte(i + 1)},
			RemoteAddr: b.mr.IOVA() + uint64(i), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.qp.PostSend(SendWR{WRID: 9, Opcode: abi.WRRDMAWrite, Inline: []byte{4}, Signaled: true,
		RemoteAddr: b.mr.IOVA() + 3, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 9, abi.WCRDMAWrite, abi.WCSuccess)
	expectNoWC(t, a.scq, 20*time.Millisecond)
	if !bytes.Equal(b.buf.Bytes()[:4], []byte{1, 2, 3, 4}) {
		t.Fatalf("unsignalled writes: % x", b.buf.Bytes()[:4])
	}
	// The unsignalled WQEs were retired all the same: the ring has room
	// for a full queue again.
	deadline := time.Now().Add(5 * time.Second)
	for a.qp.DoorbellRecord().LoadUint32Acquire(abi.QPDoorbellOffSQCons) != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("sq_cons %d, want 4", a.qp.DoorbellRecord().LoadUint32Acquire(abi.QPDoorbellOffSQCons))
		}
		time.Sleep(time.Millisecond)
	}

	// With SigAll every send completes.
	c, d := newPair(t, endOpts{sigAll: true})
	for i := range 3 {
		if err := c.qp.PostSend(SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Inline: []byte{1},
			RemoteAddr: d.mr.IOVA(), RKey: d.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for i, wc := range pollN(t, c.scq, 3) {
		checkWC(t, wc, uint64(i), abi.WCRDMAWrite, abi.WCSuccess)
	}
}

func TestE2ECQNotify(t *testing.T) {
	a, b := newPair(t, endOpts{})
	ctx := testCtx(t)
	for i := range 4 {
		if err := b.qp.PostRecv(RecvWR{WRID: uint64(i), SGL: []abi.SGE{b.mr.SGE(uint64(i)*1024, 1024)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(wrid uint64, solicited bool) {
		t.Helper()
		if err := a.qp.PostSend(SendWR{WRID: wrid, Opcode: abi.WRSend, Inline: []byte("x"), Solicited: solicited}); err != nil {
			t.Fatal(err)
		}
	}
	// Armed for the next completion: one SEND wakes B's waiter.
	if err := b.rcq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	send(100, false)
	if err := b.rcq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, b.rcq), 0, abi.WCRecv, abi.WCSuccess)
	// Not re-armed: the next completion brings no event.
	send(101, false)
	pollOne(t, b.rcq)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.rcq.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a disarmed CQ: %v", err)
	}
	// Armed for solicited only: an unsolicited SEND does not wake, a
	// solicited one does.
	if err := b.rcq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	send(102, false)
	pollOne(t, b.rcq)
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := b.rcq.Wait(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unsolicited completion woke a solicited-only CQ: %v", err)
	}
	send(103, true)
	if err := b.rcq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, b.rcq), 3, abi.WCRecv, abi.WCSuccess)
	// The arm_ack echoes the sequence number that fired.
	if sn := b.rcq.DoorbellRecordForTest().LoadUint32Acquire(abi.CQDoorbellOffArmAck); sn != b.rcq.ArmSNForTest() {
		t.Fatalf("arm_ack %d, armed %d", sn, b.rcq.ArmSNForTest())
	}
}

func TestE2EBadRKeyAndFlush(t *testing.T) {
	a, b := newPair(t, endOpts{})
	ctx := testCtx(t)
	fill(b.buf.Bytes()[:64], 1)
	before := append([]byte(nil), b.buf.Bytes()[:64]...)
	// A forged rkey (B's, with a different tag).
	if err := a.qp.PostSend(SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Inline: []byte("evil"),
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x5a}); err != nil {
		t.Fatal(err)
	}
	// Unsignalled, but an error always completes.
	checkWC(t, pollOne(t, a.scq), 1, abi.WCRDMAWrite, abi.WCRemAccessErr)
	if !bytes.Equal(b.buf.Bytes()[:64], before) {
		t.Fatal("a write with a bad rkey changed memory")
	}
	if st, err := a.qp.State(ctx); err != nil || st != abi.QPStateErr {
		t.Fatalf("QP after an error completion: %v %v", st, err)
	}
	// Everything outstanding or posted later is flushed, send and receive.
	if err := a.qp.PostRecv(RecvWR{WRID: 10, SGL: []abi.SGE{a.mr.SGE(0, 64)}}, RecvWR{WRID: 11}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: abi.WRSend, Inline: []byte("late")},
		SendWR{WRID: 3, Opcode: abi.WRRDMARead, SGL: []abi.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	for i, wc := range pollN(t, a.scq, 2) {
		checkWC(t, wc, uint64(2+i), abi.WCOpcodeFor([]abi.WROpcode{abi.WRSend, abi.WRRDMARead}[i]), abi.WCWRFlushErr)
	}
	for i, wc := range pollN(t, a.rcq, 2) {
		if wc.WRID != uint64(10+i) || wc.Status != abi.WCWRFlushErr {
			t.Fatalf("recv flush %s", fmtWCs([]WC{wc}))
		}
	}
	// On another pair: a bad lkey is a local protection error, a garbage
	// WQE (raw) a local QP operation error, each moving only its own QP to
	// ERR.
	c, d := newPair(t, endOpts{})
	if err := c.qp.PostSend(SendWR{WRID: 5, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{{Addr: c.mr.IOVA(), Length: 8, LKey: c.mr.LKey() + 1}}, RemoteAddr: d.mr.IOVA(), RKey: d.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, c.scq), 5, abi.WCRDMAWrite, abi.WCLocProtErr)
	raw := make([]byte, 64)
	binary.LittleEndian.PutUint64(raw, 77)
	raw[8] = 0xee                                 // opcode
	binary.LittleEndian.PutUint16(raw[0x0a:], 99) // num_sge
	if err := d.qp.PostRawSend(raw); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, d.scq); wc.WRID != 77 || wc.Status != abi.WCLocQPOpErr {
		t.Fatalf("garbage WQE: %s", fmtWCs([]WC{wc}))
	}
	ev, err := d.d.WaitEvent(ctx)
	if err != nil || ev.Type != abi.EventQPFatal || ev.Handle != d.qp.Num() {
		t.Fatalf("event after a garbage WQE: %+v %v", ev, err)
	}
	// New QPs on the same devices, PDs and CQs work.
	c2, err := c.pd.CreateQP(ctx, QPInit{SendCQ: c.scq, RecvCQ: c.rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := d.pd.CreateQP(ctx, QPInit{SendCQ: d.scq, RecvCQ: d.rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.ConnectTo(ctx, d2.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := d2.ConnectTo(ctx, c2.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := c2.PostSend(SendWR{WRID: 8, Opcode: abi.WRRDMAWrite, Inline: []byte("ok"), Signaled: true,
		RemoteAddr: d.mr.IOVA() + 100, RKey: d.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, c.scq), 8, abi.WCRDMAWrite, abi.WCSuccess)
	if string(d.buf.Bytes()[100:102]) != "ok" {
		t.Fatal("healthy QP's write did not land")
	}
}

func TestE2EGuestRAMDoorbells(t *testing.T) {
	noShmem := func(c *vmsim.Config) {
		c.ProtocolFeatures = frontend.SupportedProtocolFeatures &^ (1 << frontend.ProtoShmem)
	}
	a, b := newPair(t, endOpts{vm: noShmem})
	for _, e := range []*end{a, b} {
		if e.r.dev.DoorbellMode() != device.DoorbellGuestRAM || e.d.DoorbellAreaForTest().Len() == 0 {
			t.Fatalf("%s: doorbell mode %v", e.name, e.r.dev.DoorbellMode())
		}
	}
	fill(a.buf.Bytes()[:512], 2)
	if err := b.qp.PostRecv(RecvWR{WRID: 1, SGL: []abi.SGE{b.mr.SGE(0, 512)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: abi.WRSend, SGL: []abi.SGE{a.mr.SGE(0, 512)}, Signaled: true},
		SendWR{WRID: 3, Opcode: abi.WRRDMAWrite, SGL: []abi.SGE{a.mr.SGE(0, 512)}, Signaled: true,
			RemoteAddr: b.mr.IOVA() + 4096, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wcs := pollN(t, a.scq, 2)
	checkWC(t, wcs[0], 2, abi.WCSend, abi.WCSuccess)
	checkWC(t, wcs[1], 3, abi.WCRDMAWrite, abi.WCSuccess)
	checkWC(t, pollOne(t, b.rcq), 1, abi.WCRecv, abi.WCSuccess)
	if !bytes.Equal(b.buf.Bytes()[:512], a.buf.Bytes()[:512]) || !bytes.Equal(b.buf.Bytes()[4096:4608], a.buf.Bytes()[:512]) {
		t.Fatal("payload differs")
	}
	// The area is IO memory: no MR may cover it, no DMA may reach it.
	ctx := testCtx(t)
	area := a.d.DoorbellAreaForTest()
	if _, err := a.pd.RegMR(ctx, area, abi.AccessLocalWrite); !errors.Is(err, abi.StatusBadAddress) {
		t.Fatalf("MR over the doorbell area: %v", err)
	}
	// A re-opened driver registers a new area: RESET_STATE dropped the
	// old one with everything else.
	a.d.Close()
	nd, err := Open(ctx, vmsim.NewTransport(a.r.vm))
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	cq, err := nd.CreateCQ(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if nd.DoorbellAreaForTest().GPA == area.GPA || cq.Num() != a.scq.Num() {
		t.Fatalf("new area at %#x (old %#x), first CQ %d", nd.DoorbellAreaForTest().GPA, area.GPA, cq.Num())
	}
	// The old area is plain guest RAM again: an MR may cover it.
	pd, err := nd.AllocPD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(ctx, area, abi.AccessLocalWrite); err != nil {
		t.Fatalf("MR over the old doorbell area: %v", err)
	}
	if _, err := pd.RegMR(ctx, nd.DoorbellAreaForTest(), abi.AccessLocalWrite); !errors.Is(err, abi.StatusBadAddress) {
		t.Fatalf("MR over the new doorbell area: %v", err)
	}
}

func TestE2EReopenDropsEverything(t *testing.T) {
	a, b := newPair(t, endOpts{})
	ctx := testCtx(t)
	if err := a.qp.PostSend(SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Inline: []byte("before"), Signaled: true,
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 1, abi.WCRDMAWrite, abi.WCSuccess)
	oldQPN, oldPD, oldCQ, oldKey := b.qp.Num(), b.pd.Num(), b.scq.Num(), b.mr.RKey()

	// B's guest reboots its driver: a new Open on the same device.
	b.d.Close()
	nd, err := Open(ctx, vmsim.NewTransport(b.r.vm))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	for _, c := range []struct {
		op abi.Opcode
		h  uint32
	}{{abi.OpQueryQP, oldQPN}, {abi.OpDestroyQP, oldQPN}, {abi.OpDeallocPD, oldPD}, {abi.OpDestroyCQ, oldCQ}, {abi.OpDeregMR, oldKey}} {
		resp := any(nil)
		if c.op == abi.OpQueryQP {
			resp = &abi.QueryQPResp{}
		}
		if err := nd.CallForTest(ctx, c.op, &abi.HandleReq{Handle: c.h}, resp); !errors.Is(err, abi.StatusNotFound) {
			t.Errorf("%v %d after re-open: %v", c.op, c.h, err)
		}
	}
	// A's WRITE to the old MR and QP finds nothing there.
	before := append([]byte(nil), b.buf.Bytes()[:16]...)
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: abi.WRRDMAWrite, Inline: []byte("after!"), Signaled: true,
		RemoteAddr: b.mr.IOVA(), RKey: oldKey}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, a.scq); wc.WRID != 2 || wc.Status == abi.WCSuccess {
		t.Fatalf("write into a dropped MR: %s", fmtWCs([]WC{wc}))
	}
	if !bytes.Equal(b.buf.Bytes()[:16], before) {
		t.Fatal("a dropped MR was written")
	}
	// The new driver builds afresh (numbers start over) and talks to A.
	b2 := &end{r: b.r, d: nd, name: "b2"}
	if b2.pd, err = nd.AllocPD(ctx); err != nil {
		t.Fatal(err)
	}
	if b2.pd.Num() != oldPD {
		t.Errorf("first PD after re-open is %d, the old first was %d", b2.pd.Num(), oldPD)
	}
	if b2.scq, err = nd.CreateCQ(ctx, 16); err != nil {
		t.Fatal(err)
	}
	if b2.qp, err = b2.pd.CreateQP(ctx, QPInit{SendCQ: b2.scq, RecvCQ: b2.scq, Cap: defaultCap}); err != nil {
		t.Fatal(err)
	}
	if b2.mr, err = b2.pd.RegMR(ctx, b.buf, abi.AccessAll); err != nil {
		t.Fatal(err)
	}
	a2, err := a.pd.CreateQP(ctx, QPInit{SendCQ: a.scq, RecvCQ: a.rcq, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.ConnectTo(ctx, b2.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := b2.qp.ConnectTo(ctx, a2.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := a2.PostSend(SendWR{WRID: 3, Opcode: abi.WRRDMAWrite, Inline: []byte("again"), Signaled: true,
		RemoteAddr: b2.mr.IOVA() + 100, RKey: b2.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 3, abi.WCRDMAWrite, abi.WCSuccess)
	if string(b.buf.Bytes()[100:105]) != "again" {
		t.Fatalf("after re-open: %q", b.buf.Bytes()[100:105])
	}
}

func TestE2EPageListMR(t *testing.T) {
	a, b := newPair(t, endOpts{})
	ctx := testCtx(t)
	// Two separately allocated pages of B, registered in reverse order
	// under an IOVA of B's choosing that starts 0x800 into the first.
	p0, err := b.d.Alloc(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := b.d.Alloc(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	const iova = 0x7f00_0000_0800
	mr, err := b.pd.RegMRPages(ctx, iova, 4096, 12, []uint64{p1.GPA, p0.GPA}, abi.AccessLocalWrite|abi.AccessRemoteWrite|abi.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if mr.IOVA() != iova || mr.Len() != 4096 || mr.Buffer().Len() != 0 {
		t.Fatalf("page-list MR %#x+%d", mr.IOVA(), mr.Len())
	}
	fill(a.buf.Bytes()[:4096], 4)
	if err := a.qp.PostSend(SendWR{WRID: 1, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: iova, RKey: mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 1, abi.WCRDMAWrite, abi.WCSuccess)
	src := a.buf.Bytes()
	if !bytes.Equal(p1.Bytes()[0x800:], src[:0x800]) || !bytes.Equal(p0.Bytes()[:0x800], src[0x800:4096]) {
		t.Fatal("WRITE through a page list landed in the wrong places")
	}
	// One byte past the region is a remote access error.
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{a.mr.SGE(0, 2)}, RemoteAddr: iova + 4095, RKey: mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 2, abi.WCRDMAWrite, abi.WCRemAccessErr)
}

func TestE2ECQOverflow(t *testing.T) {
	fab := fabric.NewLocal()
	a := newEnd(t, t.Name()+"-a", fab, endOpts{cap: defaultCap})
	b := newEnd(t, t.Name()+"-b", fab, endOpts{cap: defaultCap})
	ctx := testCtx(t)
	small, err := a.d.CreateCQ(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.pd.CreateQP(ctx, QPInit{SendCQ: small, RecvCQ: small, Cap: defaultCap})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.ConnectTo(ctx, b.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.ConnectTo(ctx, qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := small.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	// Three signalled WRITEs into a 2-entry CQ nobody polls.
	for i := range 3 {
		if err := qp.PostSend(SendWR{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Inline: []byte{1}, Signaled: true,
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	var sawCQErr, sawQPFatal bool
	for !sawCQErr || !sawQPFatal {
		ev, err := a.d.WaitEvent(ctx)
		if err != nil {
			t.Fatalf("events: CQ_ERR %v QP_FATAL %v: %v", sawCQErr, sawQPFatal, err)
		}
		switch {
		case ev.Type == abi.EventCQErr && ev.Handle == small.Num():
			sawCQErr = true
		case ev.Type == abi.EventQPFatal && ev.Handle == qp.Num():
			sawQPFatal = true
		}
	}
	if !errors.Is(small.Err(), ErrCQError) {
		t.Fatalf("CQ err %v", small.Err())
	}
	// The notification (armed above) or the error wakes CQ.Wait.
	if err := small.Wait(ctx); err != nil && !errors.Is(err, ErrCQError) {
		t.Fatal(err)
	}
	// Another QP and CQ of the same device are unaffected.
	c := newEnd(t, t.Name()+"-c", fab, endOpts{cap: defaultCap})
	if err := a.qp.ConnectTo(ctx, c.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := c.qp.ConnectTo(ctx, a.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{WRID: 9, Opcode: abi.WRRDMAWrite, Inline: []byte("fine"), Signaled: true,
		RemoteAddr: c.mr.IOVA(), RKey: c.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 9, abi.WCRDMAWrite, abi.WCSuccess)
}

// TestE2EResetRestartsCounters: MODIFY_QP to RESET empties both rings
// (the device zeroes the QP's doorbell record), so the driver starts
// counting again at 0. After RESET and a new connection, one SEND is one
// message: none of the three posted before the reset is sent again.
func TestE2EResetRestartsCounters(t *testing.T) {
	a, b := newPair(t, endOpts{})
	ctx := testCtx(t)
	recvs := func(n int, base uint64) {
		t.Helper()
		for i := range n {
			if err := b.qp.PostRecv(RecvWR{WRID: base + uint64(i), SGL: []abi.SGE{b.mr.SGE(uint64(i)*64, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	recvs(4, 100)
	for i := range 3 {
		if err := a.qp.PostSend(SendWR{WRID: uint64(i), Opcode: abi.WRSend, Inline: []byte{byte(i)}, Signaled: true}); err != nil {
			t.Fatal(err)
		}
	}
	pollN(t, a.scq, 3)
	pollN(t, b.rcq, 3)
	for _, e := range []*end{a, b} {
		if err := e.qp.Modify(ctx, abi.QPAttrState, abi.QPAttr{State: abi.QPStateReset}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.qp.ConnectTo(ctx, b.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.ConnectTo(ctx, a.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	recvs(8, 200)
	if err := a.qp.PostSend(SendWR{WRID: 9, Opcode: abi.WRSend, Inline: []byte{9}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.scq), 9, abi.WCSend, abi.WCSuccess)
	if wc := pollOne(t, b.rcq); wc.WRID != 200 || wc.Status != abi.WCSuccess || wc.ByteLen != 1 {
		t.Fatalf("receive after reset: %s", fmtWCs([]WC{wc}))
	}
	if got := b.buf.Bytes()[0]; got != 9 {
		t.Fatalf("received %d, want 9", got)
	}
	expectNoWC(t, a.scq, 50*time.Millisecond)
	expectNoWC(t, b.rcq, 50*time.Millisecond)
}
