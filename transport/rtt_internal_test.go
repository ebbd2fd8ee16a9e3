package transport

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestRTTEstimatorFirstSample(t *testing.T) {
	var e rttEstimator
	e.sample(0)
	e.sample(-5)
	if e.srtt != 0 || e.rttvar != 0 {
		t.Fatalf("non-positive samples changed the estimate: srtt %d rttvar %d", e.srtt, e.rttvar)
	}
	e.sample(1000)
	if e.srtt != 1000 || e.rttvar != 500 {
		t.Fatalf("first sample: srtt %d rttvar %d, want 1000 500", e.srtt, e.rttvar)
	}
	e.sample(1800) // RFC 6298 2.3: rttvar = 3/4*500 + 1/4*800, srtt = 7/8*1000 + 1/8*1800
	if e.srtt != 1100 || e.rttvar != 575 {
		t.Fatalf("second sample: srtt %d rttvar %d, want 1100 575", e.srtt, e.rttvar)
	}
}

func TestRTTEstimatorRTOBounds(t *testing.T) {
	cfg := &Config{RTOInit: time.Millisecond, RTOMin: 200 * time.Microsecond, RTOMax: 10 * time.Millisecond}
	var e rttEstimator
	if got := e.rtoFor(cfg); got != dur(cfg.RTOInit) {
		t.Fatalf("rto before any sample %d, want RTOInit %d", got, dur(cfg.RTOInit))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 10000 {
		// Samples from 1ns to 1s, so both bounds are hit.
		e.sample(1 + r.Int64N(int64(time.Second)))
		if e.srtt <= 0 || e.rttvar < 0 {
			t.Fatalf("sample %d: srtt %d rttvar %d", i, e.srtt, e.rttvar)
		}
		got := e.rtoFor(cfg)
		if got < dur(cfg.RTOMin) || got > dur(cfg.RTOMax) {
			t.Fatalf("sample %d: rto %d outside [%d, %d]", i, got, dur(cfg.RTOMin), dur(cfg.RTOMax))
		}
		if want := min(max(e.srtt+4*e.rttvar, dur(cfg.RTOMin)), dur(cfg.RTOMax)); got != want {
			t.Fatalf("sample %d: rto %d, want %d", i, got, want)
		}
	}
	// A steady RTT converges: rttvar decays, srtt reaches the RTT.
	for range 200 {
		e.sample(300_000)
	}
	if e.srtt < 299_000 || e.srtt > 301_000 || e.rttvar > 1000 {
		t.Fatalf("steady 300us: srtt %d rttvar %d", e.srtt, e.rttvar)
	}
	if got := e.rtoFor(cfg); got < 300_000 || got > 310_000 {
		t.Fatalf("steady 300us: rto %d", got)
	}
}

func TestRTTEstimatorBackOff(t *testing.T) {
	e := rttEstimator{rto: 3}
	want := []int64{6, 12, 20, 20}
	for i, w := range want {
		e.backOff(20)
		if e.rto != w {
			t.Fatalf("backoff %d: rto %d, want %d", i, e.rto, w)
		}
	}
	if e.srtt != 0 || e.rttvar != 0 {
		t.Fatal("backoff changed the estimate")
	}
}
