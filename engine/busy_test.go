package engine_test

import (
	"sync/atomic"
	"testing"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// busyPeer answers OutcomeBusy to its first n requests (forever if n < 0),
// then OK.
type busyPeer struct {
	n     int64
	calls atomic.Int64
}

func (b *busyPeer) Respond(req *fabric.Request) fabric.Outcome {
	if c := b.calls.Add(1); b.n < 0 || c <= b.n {
		return fabric.OutcomeBusy
	}
	return fabric.OutcomeOK
}

// TestBusyPeerCostsNoRetry: a responder that is briefly busy (a control
// change holds its data path) is retried within microseconds, and those
// retries do not use up retry_cnt: with retry_cnt 0 the WRITE still
// succeeds. A peer busy for a whole timeout does count, and fails it. The
// timeout is 67 ms (encoding 14), long enough that a loaded CI machine
// descheduling the engine for a few milliseconds cannot turn "briefly"
// into "a whole timeout".
func TestBusyPeerCostsNoRetry(t *testing.T) {
	for _, c := range []struct {
		name string
		busy int64
		want abi.WCStatus
	}{
		{"briefly busy", 5, abi.WCSuccess},
		{"busy for ever", -1, abi.WCRetryExcErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			fab := fabric.NewLocal()
			peer := &busyPeer{n: c.busy}
			peerGID := abi.GID{0xfd, 15: 0x42}
			unreg, err := fab.Register(peerGID, peer)
			if err != nil {
				t.Fatal(err)
			}
			defer unreg()
			g := enginetest.NewGuest(t, fab, "busy-"+c.name, enginetest.Options{RAM: 1 << 20})
			cq := g.CreateCQ(8)
			q := g.CreateQP(pd, cq, cq, enginetest.QPOpts{SQSize: 8, RQSize: 8})
			conn := enginetest.DefaultConn
			conn.RetryCnt, conn.Timeout = 0, 14 // no retries; 4.096 µs << 14 = 67 ms
			q.ToRTS(peerGID, 7, conn)
			src := g.NewBuf(pd, 0, 8)
			q.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: 0x1000, RKey: 0x100},
				[]abi.SGE{src.SGE(0, 8)}, nil)
			expect(t, cq.Wait(), 1, c.want, abi.WCRDMAWrite)
			if n := peer.calls.Load(); c.busy >= 0 && n != c.busy+1 {
				t.Fatalf("peer asked %d times, want %d", n, c.busy+1)
			} else if c.busy < 0 && n < 3 {
				t.Fatalf("a peer busy for ever was asked only %d times in a timeout", n)
			}
		})
	}
}
