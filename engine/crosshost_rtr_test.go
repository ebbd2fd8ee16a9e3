package engine_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestCrossHostResponderInRTR connects two QPs across hosts as
// perftest's ib_read_bw and ib_atomic_bw do (src/perftest_resources.c,
// ctx_connect): random PSNs, path MTU 4096, max_dest_rd_atomic and
// max_rd_atomic at the device's limit, timeout 14, retry_cnt and
// rnr_retry 7, and the server's QP left in RTR (a bandwidth test moves
// only the client's to RTS). A QP in RTR serves incoming requests
// (docs/spec.md §12), so the client's 64 KiB READs and its atomics
// complete, with the server's bytes.
func TestCrossHostResponderInRTR(t *testing.T) {
	fa, fb := crossHosts(t, patient)
	a := enginetest.NewGuest(t, fa, "a-client", enginetest.Options{RAM: 32 << 20})
	b := enginetest.NewGuest(t, fb, "b-server", enginetest.Options{RAM: 32 << 20})
	acq, bcq := a.CreateCQ(64), b.CreateCQ(64)
	aqp := a.CreateQP(pd, acq, acq, enginetest.QPOpts{})
	bqp := b.CreateQP(pd, bcq, bcq, enginetest.QPOpts{})
	const clientPSN, serverPSN = 0x8a3c51, 0x0f17e2 // lrand48() & 0xffffff
	rdAtom := uint8(enginetest.Limits.MaxQPRdAtom)
	modify := func(g *enginetest.Guest, qpn uint32, mask abi.QPAttrMask, attr abi.QPAttr) {
		t.Helper()
		if err := g.Eng.ModifyQP(qpn, mask, &attr); err != nil {
			t.Fatalf("%s: qp %d to %v: %v", g.Name, qpn, attr.State, err)
		}
	}
	toRTR := func(g *enginetest.Guest, qpn uint32, peer *enginetest.Guest, peerQPN, peerPSN uint32) {
		t.Helper()
		modify(g, qpn, abi.QPAttrState|abi.QPAttrPKeyIndex|abi.QPAttrPort|abi.QPAttrAccessFlags,
			abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: abi.AccessRemoteWrite | abi.AccessRemoteRead | abi.AccessRemoteAtomic})
		modify(g, qpn, abi.QPAttrState|abi.QPAttrAV|abi.QPAttrPathMTU|abi.QPAttrDestQPN|abi.QPAttrRQPSN|abi.QPAttrMaxDestRdAtomic|abi.QPAttrMinRNRTimer,
			abi.QPAttr{State: abi.QPStateRTR, PathMTU: abi.MTU4096, DestQPN: peerQPN, RQPSN: peerPSN, MaxDestRdAtomic: rdAtom,
				MinRNRTimer: 12, AH: abi.AHAttr{DGID: peer.GID, Port: 1}})
	}
	toRTR(b, bqp.QPN, a, aqp.QPN, clientPSN)
	toRTR(a, aqp.QPN, b, bqp.QPN, serverPSN)
	modify(a, aqp.QPN, abi.QPAttrState|abi.QPAttrSQPSN|abi.QPAttrMaxQPRdAtomic|abi.QPAttrRetryCnt|abi.QPAttrRNRRetry|abi.QPAttrTimeout,
		abi.QPAttr{State: abi.QPStateRTS, SQPSN: clientPSN, MaxRdAtomic: rdAtom, RetryCnt: 7, RNRRetry: 7, Timeout: 14})

	const n = 64 << 10
	src := b.NewBuf(pd, abi.AccessRemoteRead|abi.AccessRemoteAtomic|abi.AccessLocalWrite, n)
	fill(src.Bytes(), 9)
	dst := a.NewBuf(pd, abi.AccessLocalWrite, n)
	for i := range 4 {
		clear(dst.Bytes())
		aqp.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMARead, Flags: abi.SendSignaled, RemoteAddr: src.GPA, RKey: src.Key},
			[]abi.SGE{dst.SGE(0, n)}, nil)
		expect(t, acq.Wait(), uint64(i), abi.WCSuccess, abi.WCRDMARead)
		if !bytes.Equal(dst.Bytes(), src.Bytes()) {
			t.Fatalf("READ %d from the QP in RTR: wrong bytes", i)
		}
	}

	binary.LittleEndian.PutUint64(src.Bytes(), 1000)
	old := a.NewBuf(pd, abi.AccessLocalWrite, 8)
	aqp.PostSend(abi.SendWQE{WRID: 10, Opcode: abi.WRAtomicFetchAdd, Flags: abi.SendSignaled, RemoteAddr: src.GPA, RKey: src.Key,
		CompareAdd: 5}, []abi.SGE{old.SGE(0, 8)}, nil)
	expect(t, acq.Wait(), 10, abi.WCSuccess, abi.WCFetchAdd)
	if v := a.U64(old.GPA); v != 1000 {
		t.Fatalf("FETCH_ADD returned %d, want 1000", v)
	}
	aqp.PostSend(abi.SendWQE{WRID: 11, Opcode: abi.WRAtomicCmpSwap, Flags: abi.SendSignaled, RemoteAddr: src.GPA, RKey: src.Key,
		CompareAdd: 1005, Swap: 7}, []abi.SGE{old.SGE(0, 8)}, nil)
	expect(t, acq.Wait(), 11, abi.WCSuccess, abi.WCCompSwap)
	if v, w := a.U64(old.GPA), b.U64(src.GPA); v != 1005 || w != 7 {
		t.Fatalf("CMP_SWAP returned %d and left %d, want 1005 and 7", v, w)
	}
	if st := bqp.State(); st != abi.QPStateRTR {
		t.Fatalf("server QP in %v, want RTR", st)
	}
	acq.ExpectNone(0)
}
