package remote_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
)

// TestSteadyStateAllocs: a WRITE round trip across hosts (post, packets
// both ways, the responder's Begin/Place/Commit, the completion)
// allocates next to nothing once the tables have grown. What it does
// allocate is not this package's: the fake responder's Incoming (1), and
// the error transport/udp's ReadBatch wraps the deadline in when Post
// wakes the loop (2).
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := pair(t, opts{})
	connect(t, a, b, 1, 2, 7, 7)
	w := newWaiter()
	v, _ := buffer(t, 4000)
	r := request(a, b, 1, 2, fabric.OpWrite)
	r.Len, r.Local = 4000, v
	round := func() {
		a.f.Post(r, w)
		if res := <-w; res.o != fabric.OutcomeOK {
			t.Error(res.o)
		}
	}
	watchdog := time.AfterFunc(20*time.Second, func() { panic("WRITE round trips stalled") })
	defer watchdog.Stop()
	for range 100 {
		round()
	}
	if n := testing.AllocsPerRun(300, round); n > 3.5 {
		t.Fatalf("%.1f allocations per WRITE round trip", n)
	} else {
		t.Logf("%.1f allocations per WRITE round trip", n)
	}
}
