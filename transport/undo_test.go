package transport_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/cc"
	"github.com/vstellar/vstellar/transport/wire"
)

// us is a microsecond in ns.
const us = int64(time.Microsecond)

// drain returns a copy of every packet s sends at now.
func drain(s *side, now int64) [][]byte {
	var out [][]byte
	buf := make([]byte, 1<<16)
	for {
		pkt, _, ok := s.ep.c.Transmit(now, buf)
		if !ok {
			return out
		}
		out = append(out, bytes.Clone(pkt))
	}
}

// deliver hands pkts to s at now.
func deliver(s *side, now int64, pkts ...[]byte) {
	for _, p := range pkts {
		s.ep.Receive(now, p)
	}
}

// dupReports parses ACKs and returns the psn each reports, in order
// (-1 for an ACK without a report), and how many echo a timestamp.
func dupReports(t *testing.T, acks [][]byte) (psns []int64, echoes int) {
	t.Helper()
	for _, b := range acks {
		var p wire.Packet
		if err := wire.Parse(b, &p); err != nil || p.Type != wire.TypeAck {
			t.Fatalf("not an ACK (%v): %x", err, b)
		}
		psn := int64(-1)
		if p.Flags&wire.FlagDup != 0 {
			psn = int64(p.Ack.DupPSN)
		}
		psns = append(psns, psn)
		if p.Ack.EchoTS != 0 {
			echoes++
		}
	}
	return psns, echoes
}

// writeOf posts one WRITE of n packets of 1024 bytes on s.
func writeOf(t *testing.T, s *side, n int) {
	t.Helper()
	data := make([]byte, n*1024)
	msn, err := s.ep.c.Post(transport.Message{Op: wire.OpWrite, Len: uint32(len(data)), Src: bytesSrc(data), RKey: 0x1234, Token: uint64(s.nextMSN) + 1000})
	if err != nil {
		t.Fatal(err)
	}
	s.sent[msn] = posted{op: wire.OpWrite, data: data, token: uint64(s.nextMSN) + 1000}
	s.nextMSN++
}

// TestDupReport: b gets every packet of a's WRITE, its ACKs are lost, and
// a resends them all on its RTO: b reports each copy it got again, one
// ACK per duplicate (only the first echoing a timestamp, the RTT
// sample), and a counts each retransmission spurious once. Without the
// reports (NoDupReports) b's ACKs carry none, and a, whose first
// acknowledgement of each packet echoes a retransmission's timestamp,
// recognises none; nor with go-back-N. Beyond the 16 reports a receiver
// keeps, the latest duplicate replaces the newest report waiting.
func TestDupReport(t *testing.T) {
	for _, c := range []struct {
		name     string
		n        int
		noDup    bool
		recovery transport.Recovery
		reports  []int64
	}{
		{"4 packets", 4, false, transport.Selective, []int64{0, 1, 2, 3}},
		{"20 packets", 20, false, transport.Selective, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 19}},
		{"4 packets, NoDupReports", 4, true, transport.Selective, []int64{-1}},
		{"4 packets, go-back-N", 4, false, transport.GoBackN, []int64{-1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, NoDupReports: c.noDup, Recovery: c.recovery})
			writeOf(t, a, c.n)
			first := drain(a, 0)
			if len(first) != c.n {
				t.Fatalf("%d packets sent, want %d", len(first), c.n)
			}
			deliver(b, 10*us, first...)
			_ = drain(b, 10*us) // lost
			at, ok := a.ep.c.Timeout()
			if !ok {
				t.Fatal("no RTO armed")
			}
			a.ep.c.HandleTimeout(at)
			again := drain(a, at)
			if len(again) != c.n {
				t.Fatalf("%d packets resent on the RTO, want %d", len(again), c.n)
			}
			deliver(b, at+10*us, again...)
			acks := drain(b, at+10*us)
			got, echoes := dupReports(t, acks)
			if !equalInts(got, c.reports) || echoes != 1 {
				t.Fatalf("ACKs report %v (%d echo), want %v (1 echoes)", got, echoes, c.reports)
			}
			deliver(a, at+20*us, acks...)
			sa, sb := a.ep.c.Stats(), b.ep.c.Stats()
			want := uint64(len(c.reports))
			if c.reports[0] < 0 {
				want = 0
			}
			if sb.Duplicates != uint64(c.n) || sa.Retransmits != uint64(c.n) || sa.SpuriousRetransmits != want {
				t.Errorf("b got %d twice, a resent %d and counted %d spurious, want %d", sb.Duplicates, sa.Retransmits, sa.SpuriousRetransmits, want)
			}
			a.collect(t)
			if a.statuses[transport.StatusOK] != 1 || a.ep.dropped != 0 || b.ep.dropped != 0 {
				t.Errorf("statuses %v, dropped %d/%d (%v)", a.statuses, a.ep.dropped, b.ep.dropped, a.ep.firstDrop)
			}
			// A report the sender has counted already changes nothing.
			deliver(a, at+30*us, acks...)
			if st := a.ep.c.Stats(); st.SpuriousRetransmits != want {
				t.Errorf("the same reports again: %d spurious, want %d", st.SpuriousRetransmits, want)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// watchedCubic is CUBIC that records its window when it hears of a loss
// and right after an undo.
type watchedCubic struct {
	*cc.Cubic
	beforeLoss []float64
	undone     []float64 // cwnd right after each undo
	ssthresh   float64   // after the last undo
}

func (w *watchedCubic) OnLoss(now int64, path uint16, sentAt int64) {
	w.beforeLoss = append(w.beforeLoss, w.Cwnd())
	w.Cubic.OnLoss(now, path, sentAt)
}

func (w *watchedCubic) Undo(now int64) bool {
	ok := w.Cubic.Undo(now)
	if ok {
		w.undone = append(w.undone, w.Cwnd())
		w.ssthresh = w.Ssthresh()
	}
	return ok
}

// episode is what happened in one run of undoRun.
type episode struct {
	st       transport.Stats
	cc       *watchedCubic
	cwndCut  float64 // the window after the cut
	cwndLast float64 // the window at the end
}

// undoRun: a sends a 24-packet WRITE under CUBIC (window 20, so 20 go
// first; DupThresh 3, fixed reordering rules); b gets all of the first 20
// but those in held, whose originals arrive only after a declared them
// lost (held[i] true) or never (false: lost). Every retransmission
// arrives. It returns what a counted and what its CC did (undo: with
// UndoCuts).
func undoRun(t *testing.T, held map[int]bool, noDup, undo bool) episode {
	t.Helper()
	ctl, err := cc.New(cc.Config{Kind: cc.KindCubic, InitCwnd: 20})
	if err != nil {
		t.Fatal(err)
	}
	w := &watchedCubic{Cubic: ctl.(*cc.Cubic)}
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, DupThresh: 3, Reordering: transport.ReorderFixed,
		CC: w, NoDupReports: noDup, UndoCuts: undo})
	writeOf(t, a, 24)
	a.posts = 1
	first := drain(a, 0)
	if len(first) != 20 {
		t.Fatalf("%d packets in the first window, want 20", len(first))
	}
	var late [][]byte
	for i, p := range first {
		if on, ok := held[i]; !ok {
			deliver(b, 50*us, p)
		} else if on {
			late = append(late, p)
		}
	}
	deliver(a, 100*us, drain(b, 50*us)...)
	if len(w.beforeLoss) == 0 {
		t.Fatalf("a declared nothing lost (stats %+v)", a.ep.c.Stats())
	}
	e := episode{cc: w, cwndCut: w.Cwnd()}
	resent := drain(a, 100*us)
	// The late originals, then every retransmission (and the new
	// packets the window allows).
	deliver(b, 150*us, late...)
	deliver(b, 150*us, resent...)
	deliver(a, 200*us, drain(b, 150*us)...)
	// The rest completes.
	for now := 200 * us; !a.finished() && now < 100*int64(time.Millisecond); now += 50 * us {
		if at, ok := a.ep.c.Timeout(); ok && at <= now {
			a.ep.c.HandleTimeout(now)
		}
		deliver(b, now, drain(a, now)...)
		deliver(a, now, drain(b, now)...)
		a.collect(t)
	}
	if !a.finished() || a.statuses[transport.StatusOK] != 1 {
		t.Fatalf("the WRITE did not complete: %v (stats %+v)", a.statuses, a.ep.c.Stats())
	}
	e.st, e.cwndLast = a.ep.c.Stats(), w.Cwnd()
	return e
}

// TestUndoSpuriousEpisode: packets taken for lost whose originals then
// arrive (reordering, no loss): the receiver reports each retransmission
// as a duplicate, the sender counts it spurious, and once every loss of
// the episode proved so, CUBIC's cut is taken back: the window is what
// it was before the cut, the threshold back to none (slow start). Without
// the reports the sender finds none of them (the first acknowledgement of
// each echoes its retransmission), and the cut stays; without UndoCuts
// it finds them all and the cut stays.
func TestUndoSpuriousEpisode(t *testing.T) {
	for _, held := range []map[int]bool{{0: true}, {0: true, 5: true, 6: true}} {
		e := undoRun(t, held, false, true)
		t.Logf("%d held: cut %g -> %g, undone to %v; %+v", len(held), e.cc.beforeLoss[0], e.cwndCut, e.cc.undone, e.st)
		if e.st.SpuriousRetransmits != uint64(len(held)) || e.st.Retransmits != uint64(len(held)) || e.st.CCUndos != 1 {
			t.Errorf("%d held: %d resent, %d spurious, %d undos; want %d, %d, 1", len(held), e.st.Retransmits,
				e.st.SpuriousRetransmits, e.st.CCUndos, len(held), len(held))
		}
		if len(e.cc.beforeLoss) != len(held) || e.cwndCut >= e.cc.beforeLoss[0] {
			t.Fatalf("losses heard at windows %v, cut to %g", e.cc.beforeLoss, e.cwndCut)
		}
		if len(e.cc.undone) != 1 || e.cc.undone[0] != e.cc.beforeLoss[0] || !math.IsInf(e.cc.ssthresh, 1) {
			t.Errorf("window %g before the cut, %v after the undo (ssthresh %g, want +Inf)", e.cc.beforeLoss[0], e.cc.undone, e.cc.ssthresh)
		}

		base := undoRun(t, held, true, true)
		if base.st.SpuriousRetransmits != 0 || base.st.CCUndos != 0 || len(base.cc.undone) != 0 || base.cwndLast >= base.cc.beforeLoss[0] {
			t.Errorf("without reports: %d spurious, %d undos, window %g (before the cut %g)", base.st.SpuriousRetransmits,
				base.st.CCUndos, base.cwndLast, base.cc.beforeLoss[0])
		}
		off := undoRun(t, held, false, false)
		if off.st.SpuriousRetransmits != uint64(len(held)) || off.st.CCUndos != 0 || len(off.cc.undone) != 0 || off.cwndLast >= off.cc.beforeLoss[0] {
			t.Errorf("without UndoCuts: %d spurious, %d undos, window %g (before the cut %g)", off.st.SpuriousRetransmits,
				off.st.CCUndos, off.cwndLast, off.cc.beforeLoss[0])
		}
	}
}

// TestNoUndoForRealLoss: a packet lost for good, whose retransmission is
// the only copy delivered, is never undone, alone or in an episode whose
// other losses were spurious.
func TestNoUndoForRealLoss(t *testing.T) {
	for _, held := range []map[int]bool{{0: false}, {0: false, 3: true}, {0: true, 3: false, 7: true}} {
		for _, noDup := range []bool{false, true} {
			e := undoRun(t, held, noDup, true)
			spurious := 0
			for _, late := range held {
				if late && !noDup {
					spurious++
				}
			}
			if e.st.CCUndos != 0 || len(e.cc.undone) != 0 || e.st.SpuriousRetransmits != uint64(spurious) {
				t.Errorf("held %v (NoDupReports %v): %d undos, %d spurious (want %d)", held, noDup, e.st.CCUndos, e.st.SpuriousRetransmits, spurious)
			}
			if e.cwndLast >= e.cc.beforeLoss[0] {
				t.Errorf("held %v: window %g at the end, %g before the cut", held, e.cwndLast, e.cc.beforeLoss[0])
			}
		}
	}
}

// TestReplayedDupReportUndoesNothing: psn 0's first transmission is lost
// for good; it is declared lost by count (one cut), its retransmission,
// held up, by time (a second cut: a congestion event of its own), and it
// goes a third time. The receiver gets the two retransmissions and
// reports one duplicate: one retransmission was unneeded, the first
// transmission was not delivered. The same report delivered again (an
// on-path attacker, a duplicating network) is no second report: the
// second cut stays, and nothing more is counted spurious.
func TestReplayedDupReportUndoesNothing(t *testing.T) {
	ctl, err := cc.New(cc.Config{Kind: cc.KindCubic, InitCwnd: 20})
	if err != nil {
		t.Fatal(err)
	}
	w := &watchedCubic{Cubic: ctl.(*cc.Cubic)}
	a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, DupThresh: 3, Reordering: transport.ReorderFixed,
		CC: w, UndoCuts: true})
	writeOf(t, a, 60)
	a.posts = 1
	first := drain(a, 0)
	deliver(b, 50*us, first[1:]...)
	deliver(a, 100*us, drain(b, 50*us)...)
	burst := drain(a, 110*us) // psn 0 again first, then new packets
	retx1 := burst[0]
	deliver(b, 120*us, burst[1:]...)
	now := 120 * us
	var retx2 []byte
	for ; retx2 == nil && now < 2*int64(time.Millisecond); now += 10 * us {
		deliver(a, now, drain(b, now)...)
		if at, ok := a.ep.c.Timeout(); ok && at <= now {
			a.ep.c.HandleTimeout(now)
		}
		for _, pkt := range drain(a, now) {
			var p wire.Packet
			if wire.Parse(pkt, &p) == nil && p.PSN == 0 {
				retx2 = pkt
			} else {
				deliver(b, now, pkt)
			}
		}
	}
	if st := a.ep.c.Stats(); retx2 == nil || len(w.beforeLoss) != 2 || st.Retransmits != 2 || st.Timeouts != 0 {
		t.Fatalf("psn 0 not declared lost twice by count and time: %d cuts, stats %+v", len(w.beforeLoss), st)
	}
	deliver(b, now, retx1)
	deliver(a, now+10*us, drain(b, now)...)
	deliver(b, now+20*us, retx2)
	report := drain(b, now+20*us)
	if got, _ := dupReports(t, report); !equalInts(got, []int64{0}) {
		t.Fatalf("the receiver reports %v, want [0]", got)
	}
	deliver(a, now+30*us, report...)
	st, cwnd := a.ep.c.Stats(), w.Cwnd()
	if st.SpuriousRetransmits != 1 || st.CCUndos != 0 {
		t.Fatalf("after the report: %d spurious, %d undos, want 1 and 0", st.SpuriousRetransmits, st.CCUndos)
	}

	deliver(a, now+500*us, report...)
	if got := a.ep.c.Stats(); got.AcksReceived != st.AcksReceived+1 || got.SpuriousRetransmits != 1 || got.CCUndos != 0 || w.Cwnd() != cwnd {
		t.Errorf("after the replay: %d ACKs taken, %d spurious, %d undos, window %g; want %d, 1, 0, %g",
			got.AcksReceived, got.SpuriousRetransmits, got.CCUndos, w.Cwnd(), st.AcksReceived+1, cwnd)
	}
	transport.ArrivedFirst(a.ep.c, func(psn uint32, _ int64) {
		if psn == 0 {
			t.Error("psn 0's first transmission taken for delivered")
		}
	})
	for now += 600 * us; !a.finished() && now < 100*int64(time.Millisecond); now += 50 * us {
		if at, ok := a.ep.c.Timeout(); ok && at <= now {
			a.ep.c.HandleTimeout(now)
		}
		deliver(b, now, drain(a, now)...)
		deliver(a, now, drain(b, now)...)
		a.collect(t)
	}
	if a.statuses[transport.StatusOK] != 1 || a.ep.dropped != 0 {
		t.Errorf("statuses %v, %d dropped (%v)", a.statuses, a.ep.dropped, a.ep.firstDrop)
	}
}
