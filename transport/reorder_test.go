package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/cc"
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
	return sprayRunWith(t, seed, transport.Config{Reordering: mode}, sprayOpts{loss: loss})
}

// sprayOpts vary sprayRun.
type sprayOpts struct {
	loss float64
	// batch: the receiver handles what arrives in batches, each once
	// batch has passed since its first packet arrived (0: each packet as
	// it arrives).
	batch time.Duration
	// checkArrived: after every event, every packet the sender holds
	// for delivered the first time was (its first transmission's
	// timestamp reached the receiver).
	checkArrived bool
}

// sprayRunWith is sprayRun with cfg (its tenant, payload and path
// selector set here) and o.
func sprayRunWith(t *testing.T, seed uint64, cfg transport.Config, o sprayOpts) reorderResult {
	t.Helper()
	cfg.Tenant, cfg.MaxPayload, cfg.Path = 7, 1024, &roundRobin{n: 4}
	a, b := newPair(t, cfg)
	a.posts, b.posts = 200, 0
	ab := &netsim.Link{Delay: 5 * time.Microsecond, Jitter: 2 * time.Microsecond, Rate: 1e9, Loss: o.loss,
		PathDelay: func(p uint16) time.Duration { return time.Duration(p) * 150 * time.Microsecond }}
	var rx netsim.Endpoint = b.ep
	if o.batch > 0 {
		rx = &batching{endpoint: b.ep, hold: int64(o.batch)}
	}
	var check func(int64)
	if o.checkArrived {
		rec := &recording{Endpoint: rx, ts: map[int64]bool{}}
		rx = rec
		wrong := map[int64]bool{}
		check = func(int64) {
			transport.ArrivedFirst(a.ep.c, func(psn uint32, ts int64) {
				if !rec.ts[ts] && !wrong[ts] {
					wrong[ts] = true
					t.Errorf("seed %d: the sender holds psn %d delivered the first time, but its ts %d never arrived", seed, psn, ts)
				}
			})
		}
	}
	sim := netsim.New(seed, a.ep, rx, ab, &netsim.Link{Delay: 5 * time.Microsecond, Rate: 1e9})
	run(t, sim, a, b, []wire.Op{wire.OpWrite}, 20000, 10*time.Second, check)
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

// TestDupReportsFindSpurious: the sprayed transfer of
// TestAdaptiveReordering, no loss, with fixed reordering rules (so that
// many retransmissions are spurious) and a receiver that handles what
// arrives in 20 µs batches, acknowledging once per batch, as the socket
// endpoint does. Every retransmission is spurious (the receiver gets each
// twice). By the echoed timestamp alone (NoDupReports) the sender
// recognises a minority of them, since an ACK echoes only its batch's
// last packet; with the receiver's duplicate reports, all of them (but
// those whose report was still on its way at the end), each once.
func TestDupReportsFindSpurious(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			share := func(r reorderResult) float64 { return float64(r.tx.SpuriousRetransmits) / float64(r.rx.Duplicates) }
			var res [2]reorderResult
			for i, noDup := range []bool{true, false} {
				r := sprayRunWith(t, seed, transport.Config{Reordering: transport.ReorderFixed, NoDupReports: noDup}, sprayOpts{batch: 20 * time.Microsecond})
				if r.rx.Duplicates != r.tx.Retransmits || r.tx.Retransmits < r.tx.DataSent/20 || r.tx.SpuriousRetransmits > r.rx.Duplicates {
					t.Fatalf("NoDupReports %v: %d of %d resent, %d counted spurious, the receiver got %d twice", noDup,
						r.tx.Retransmits, r.tx.DataSent, r.tx.SpuriousRetransmits, r.rx.Duplicates)
				}
				res[i] = r
			}
			ts, dup := share(res[0]), share(res[1])
			t.Logf("spurious recognised: %.0f %% of %d by timestamp alone, %.0f %% of %d with duplicate reports; %d undos",
				100*ts, res[0].rx.Duplicates, 100*dup, res[1].rx.Duplicates, res[1].tx.CCUndos)
			if ts > 0.6 || dup < 0.97 {
				t.Errorf("recognised %.2f by timestamp, %.2f with reports: want at most 0.6 and at least 0.97", ts, dup)
			}
		})
	}
}

// TestUndoOnlySpurious: the sprayed transfer under CUBIC, with 1 % of
// the data packets lost and the receiver acknowledging in 20 µs
// batches, adaptive and fixed reordering rules. Undoing a cut needs
// every loss of its episode proved spurious, that is each packet's first
// transmission delivered: after every event, every packet the sender
// holds for delivered was, with duplicate reports or by timestamps
// alone. Cuts are undone all the same (the reordering fools the fixed
// rules often).
func TestUndoOnlySpurious(t *testing.T) {
	for _, mode := range []transport.ReorderMode{transport.ReorderAdaptive, transport.ReorderFixed} {
		for i := range 8 {
			seed, noDup := uint64(i/2), i%2 == 1
			t.Run(fmt.Sprintf("mode%d/seed%d/NoDupReports=%v", mode, seed, noDup), func(t *testing.T) {
				ctl, err := cc.New(cc.Config{Kind: cc.KindCubic})
				if err != nil {
					t.Fatal(err)
				}
				r := sprayRunWith(t, seed, transport.Config{Reordering: mode, CC: ctl, NoDupReports: noDup, UndoCuts: true},
					sprayOpts{loss: 0.01, batch: 20 * time.Microsecond, checkArrived: true})
				t.Logf("%v: %d lost, %d of %d resent (%d spurious, the receiver got %d twice), %d undos, %d timeouts",
					r.elapsed, r.lost, r.tx.Retransmits, r.tx.DataSent, r.tx.SpuriousRetransmits, r.rx.Duplicates, r.tx.CCUndos, r.tx.Timeouts)
				if r.lost == 0 || r.tx.CCUndos == 0 {
					t.Errorf("%d packets lost, %d undos: want both", r.lost, r.tx.CCUndos)
				}
			})
		}
	}
}

// TestUndoWhereReorderingIsNotCongestion: the sprayed transfer under
// CUBIC, the receiver acknowledging per 20 µs batch, its paths' delays
// fixed (the reordering comes from the paths' lengths, not from queues):
// every cut for a loss that proves spurious is a cut for nothing, and
// taking them back (UndoCuts) finishes sooner, without loss and with 1 %.
// (On the testbed the sprayers' reordering is the spine queues' spread,
// and there the cuts are what keeps the queues short: see UndoCuts.)
func TestUndoWhereReorderingIsNotCongestion(t *testing.T) {
	for _, loss := range []float64{0, 0.01} {
		var took [2]time.Duration
		var undos uint64
		for i, undo := range []bool{false, true} {
			for seed := range uint64(4) {
				ctl, err := cc.New(cc.Config{Kind: cc.KindCubic})
				if err != nil {
					t.Fatal(err)
				}
				r := sprayRunWith(t, seed, transport.Config{CC: ctl, UndoCuts: undo}, sprayOpts{loss: loss, batch: 20 * time.Microsecond})
				took[i] += r.elapsed
				undos += r.tx.CCUndos
			}
		}
		t.Logf("loss %v: 4 transfers took %v, %v with UndoCuts (%d undos)", loss, took[0], took[1], undos)
		if undos == 0 || took[1] > took[0]*9/10 {
			t.Errorf("loss %v: %v without undo, %v with (%d undos): want a tenth sooner at least", loss, took[0], took[1], undos)
		}
	}
}
