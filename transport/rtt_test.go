package transport_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
)

// rttSel is a PathSelector that sends packet psn on path psn%paths and
// records the RTT samples it hears of, per path.
type rttSel struct {
	paths   uint32
	samples map[uint16][]int64
}

func (s *rttSel) SelectPath(_ int64, psn uint32, _ bool) uint16 { return uint16(psn % s.paths) }
func (s *rttSel) OnAck(_ int64, path uint16, rtt int64) {
	s.samples[path] = append(s.samples[path], rtt)
}
func (*rttSel) OnLoss(int64, uint16) {}
func (*rttSel) OnTimeout(int64)      {}

// rttCC is a FixedWindow that records the RTT samples it hears of.
type rttCC struct {
	*transport.FixedWindow
	samples []int64
}

func (c *rttCC) OnAck(_ int64, _ uint16, _ int, rtt int64) {
	if rtt > 0 {
		c.samples = append(c.samples, rtt)
	}
}

// rttPair is a and b with a's path selector and CC recording samples.
func rttPair(t *testing.T, paths uint32) (a, b *side, sel *rttSel, cc *rttCC) {
	t.Helper()
	sel = &rttSel{paths: paths, samples: map[uint16][]int64{}}
	cc = &rttCC{FixedWindow: transport.NewFixedWindow(256)}
	a, b = newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024})
	remake(t, a, transport.Config{Tenant: 7, MaxPayload: 1024, Path: sel, CC: cc}, false, a.sink)
	return a, b, sel, cc
}

// within fails the test unless every sample is within [lo, hi].
func within(t *testing.T, what string, samples []int64, lo, hi int64) {
	t.Helper()
	for _, v := range samples {
		if v < lo || v > hi {
			t.Errorf("%s: sample %v outside [%v, %v] (all: %v)", what, time.Duration(v), time.Duration(lo), time.Duration(hi), samples)
			return
		}
	}
}

// TestReplayedAckInflatesNoRTT: an on-path attacker captures one of b's
// ACKs and replays it to a 500 ms later, while a has packets in flight
// again. The ACK is authentic and within the window, so a takes it, but
// it measures no RTT from its old echo: srtt and the RTO stay those of
// the real 20 µs round trip, and neither the path selector nor the CC
// hears of a 500 ms sample.
func TestReplayedAckInflatesNoRTT(t *testing.T) {
	a, b, sel, cc := rttPair(t, 1)
	var captured [][]byte
	now := int64(time.Millisecond)
	for i := range 8 {
		writeOf(t, a, 4)
		deliver(b, now+10*us, drain(a, now)...)
		acks := drain(b, now+10*us)
		if i == 0 {
			captured = acks
		}
		deliver(a, now+20*us, acks...)
		now += 100 * us
	}
	srtt, rto := transport.RTT(a.ep.c)
	if srtt < 19*us || srtt > 21*us {
		t.Fatalf("srtt %v before the replay, want 20µs", time.Duration(srtt))
	}

	now += 500 * int64(time.Millisecond)
	writeOf(t, a, 4)
	pkts := drain(a, now) // in flight: the RTO is armed
	acked := a.ep.c.Stats().AcksReceived
	deliver(a, now+us, captured...)
	if st := a.ep.c.Stats(); st.AcksReceived != acked+uint64(len(captured)) || a.ep.dropped != 0 {
		t.Fatalf("the replayed ACK was not taken (%d dropped: %v): the test replays nothing", a.ep.dropped, a.ep.firstDrop)
	}
	if s, r := transport.RTT(a.ep.c); s != srtt || r != rto {
		t.Errorf("after the replay: srtt %v rto %v, want %v %v", time.Duration(s), time.Duration(r), time.Duration(srtt), time.Duration(rto))
	}
	// The real acknowledgement still measures.
	deliver(b, now+10*us, pkts...)
	deliver(a, now+20*us, drain(b, now+10*us)...)
	if s, _ := transport.RTT(a.ep.c); s < 19*us || s > 21*us {
		t.Errorf("srtt %v after the next real ACK, want 20µs", time.Duration(s))
	}
	within(t, "path selector", sel.samples[0], 19*us, 21*us)
	within(t, "CC", cc.samples, 19*us, 21*us)
	if len(sel.samples[0]) != 9 || len(cc.samples) != 9 {
		t.Errorf("%d samples to the selector, %d to the CC, want one per real ACK (9)", len(sel.samples[0]), len(cc.samples))
	}
	a.collect(t)
	if a.statuses[transport.StatusOK] != 9 {
		t.Errorf("statuses %v, want 9 OK", a.statuses)
	}
}

// TestSprayedPathsKeepSamples: packets sprayed over a slow and a fast
// path are acknowledged out of echo order (the fast path's ACK, echoing
// the later packet, comes first), and each path's ACK is still a sample
// for that path: the filter against replays is per path.
func TestSprayedPathsKeepSamples(t *testing.T) {
	a, b, sel, _ := rttPair(t, 2)
	now := int64(time.Millisecond)
	for range 8 {
		writeOf(t, a, 2)
		pkts := drain(a, now) // psn 2k on path 0 (slow), 2k+1 on path 1 (fast)
		if len(pkts) != 2 {
			t.Fatalf("%d packets sent, want 2", len(pkts))
		}
		deliver(b, now+10*us, pkts[1])
		deliver(a, now+20*us, drain(b, now+10*us)...)
		deliver(b, now+60*us, pkts[0])
		deliver(a, now+80*us, drain(b, now+60*us)...)
		now += 200 * us
	}
	within(t, "slow path 0", sel.samples[0], 79*us, 81*us)
	within(t, "fast path 1", sel.samples[1], 19*us, 21*us)
	if len(sel.samples[0]) != 8 || len(sel.samples[1]) != 8 {
		t.Errorf("samples per path: %d and %d, want 8 and 8", len(sel.samples[0]), len(sel.samples[1]))
	}
}
