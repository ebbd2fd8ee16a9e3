package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/netsim"
	"github.com/vstellar/vstellar/transport/wire"
)

// roundRobin sprays a connection's packets over n paths in turn.
type roundRobin struct{ n, next int }

func (r *roundRobin) SelectPath(int64, uint32, bool) uint16 {
	p := r.next
	r.next = (r.next + 1) % r.n
	return uint16(p)
}
func (*roundRobin) OnAck(int64, uint16, int64) {}
func (*roundRobin) OnLoss(int64, uint16)       {}
func (*roundRobin) OnTimeout(int64)            {}

// reorderResult is what one sprayed run did.
type reorderResult struct {
	tx, rx  transport.Stats // the sender's and the receiver's counters
	lost    uint64          // packets the link lost
	elapsed time.Duration
}

// sprayRun sends 200 WRITEs of up to 20 KB from a to b, sprayed round
// robin over 4 paths 150 µs apart (a spread of 450 µs, beyond the
// default 250 µs reordering window, and about 55 packets at 1 Gb/s,
// beyond the default DupThresh), losing a fraction loss of the data
// packets.
func sprayRun(t *testing.T, seed uint64, mode transport.ReorderMode, loss float64) reorderResult {
	t.Helper()
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, Reordering: mode, Path: &roundRobin{n: 4}})
	a.posts, b.posts = 200, 0
	ab := &netsim.Link{Delay: 5 * time.Microsecond, Jitter: 2 * time.Microsecond, Rate: 1e9, Loss: loss,
		PathDelay: func(p uint16) time.Duration { return time.Duration(p) * 150 * time.Microsecond }}
	sim := netsim.New(seed, a.ep, b.ep, ab, &netsim.Link{Delay: 5 * time.Microsecond, Rate: 1e9})
	run(t, sim, a, b, []wire.Op{wire.OpWrite}, 20000, 10*time.Second, nil)
	if a.failedAt >= 0 || a.statuses[transport.StatusOK] != a.posts {
		t.Fatalf("seed %d: %v (failed at %d)", seed, a.statuses, a.failedAt)
	}
	elapsed := time.Duration(sim.Now())
	// Let what is still in flight arrive (the receiver counts the
	// duplicates among it).
	sim.Run(elapsed+10*time.Millisecond, func() bool { return false })
	return reorderResult{tx: a.ep.c.Stats(), rx: b.ep.c.Stats(), lost: sim.Stats(0).Lost, elapsed: elapsed}
}

// TestAdaptiveReordering: packets sprayed over paths whose delays differ
// by more than the fixed reordering window and DupThresh allow. With
// them fixed (ReorderFixed), the sender declares reordered packets lost
// and resends them for nothing; adaptive detection learns the spread and
// resends almost nothing. Every spurious retransmission the sender
// counts is one the receiver got twice (it never counts a needed one).
func TestAdaptiveReordering(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			fixed := sprayRun(t, seed, transport.ReorderFixed, 0)
			adaptive := sprayRun(t, seed, transport.ReorderAdaptive, 0)
			for _, r := range []reorderResult{fixed, adaptive} {
				// No loss: every retransmission is spurious, and the
				// receiver got each twice.
				if r.rx.Duplicates != r.tx.Retransmits || r.tx.SpuriousRetransmits > r.rx.Duplicates {
					t.Errorf("%d retransmissions, %d counted spurious, the receiver got %d twice", r.tx.Retransmits, r.tx.SpuriousRetransmits, r.rx.Duplicates)
				}
			}
			if fixed.tx.Retransmits < fixed.tx.DataSent/20 {
				t.Errorf("fixed window: %d retransmissions of %d packets: the spread should fool it", fixed.tx.Retransmits, fixed.tx.DataSent)
			}
			// The sender sees most of its spurious retransmissions.
			if fixed.tx.SpuriousRetransmits < fixed.tx.Retransmits/2 {
				t.Errorf("fixed window: %d of %d spurious retransmissions detected", fixed.tx.SpuriousRetransmits, fixed.tx.Retransmits)
			}
			if adaptive.tx.Retransmits*10 > fixed.tx.Retransmits {
				t.Errorf("adaptive: %d retransmissions, fixed %d: want at most a tenth", adaptive.tx.Retransmits, fixed.tx.Retransmits)
			}
			t.Logf("fixed: %d of %d resent (%d seen spurious), %v; adaptive: %d resent (%d seen spurious), %v",
				fixed.tx.Retransmits, fixed.tx.DataSent, fixed.tx.SpuriousRetransmits, fixed.elapsed,
				adaptive.tx.Retransmits, adaptive.tx.SpuriousRetransmits, adaptive.elapsed)
		})
	}
}

// TestAdaptiveReorderingLoss: the same spread with 1% of the data
// packets lost. Adaptive detection still finds the losses by SACK and
// time, not by the retransmission timeout (one may find a loss at the
// very end), the transfer takes at most a third longer than without
// loss, and less long than with the fixed window, whose spurious
// retransmissions cost more than its quicker detection saves.
func TestAdaptiveReorderingLoss(t *testing.T) {
	for seed := range uint64(16) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			clean := sprayRun(t, seed, transport.ReorderAdaptive, 0)
			lossy := sprayRun(t, seed, transport.ReorderAdaptive, 0.01)
			fixed := sprayRun(t, seed, transport.ReorderFixed, 0.01)
			if lossy.lost == 0 {
				t.Fatal("the link lost nothing")
			}
			if lossy.tx.Timeouts > 1 || lossy.tx.FastRetransmits < lossy.lost {
				t.Errorf("%d packets lost: %d found by SACK or time, %d timeouts", lossy.lost, lossy.tx.FastRetransmits, lossy.tx.Timeouts)
			}
			if lossy.elapsed > clean.elapsed*4/3 || lossy.elapsed >= fixed.elapsed {
				t.Errorf("with loss %v, without %v; fixed window with loss %v", lossy.elapsed, clean.elapsed, fixed.elapsed)
			}
			t.Logf("lost %d: %d fast retransmits, %d timeouts, %v (%v without loss, %v with the fixed window)",
				lossy.lost, lossy.tx.FastRetransmits, lossy.tx.Timeouts, lossy.elapsed, clean.elapsed, fixed.elapsed)
		})
	}
}
