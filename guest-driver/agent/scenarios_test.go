package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/sim/agentsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func startSim(t testing.TB, o agentsim.Options) *agentsim.Pair {
	t.Helper()
	p, err := agentsim.Start(testCtx(t, 30*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the simulated guests: %v", err)
		}
	})
	return p
}

// quick keeps the loops short: the figures are not the point here.
var quick = agent.RunOptions{BandwidthTime: 100 * time.Millisecond, PingCount: 200, PingWarmup: 20}

// runAll runs every scenario and checks that each passed, but for those
// named in skipped, which must be skipped.
func runAll(t *testing.T, p *agentsim.Pair, o agent.RunOptions, skipped ...string) *agent.Report {
	t.Helper()
	rep, err := agent.RunVerbs(testCtx(t, 2*time.Minute), p.A.Client, p.B.Client, o)
	var tab bytes.Buffer
	rep.WriteTable(&tab)
	t.Logf("report:\n%s", tab.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(agent.Scenarios())+1 {
		t.Fatalf("%d results for %d scenarios and the set-up", len(rep.Results), len(agent.Scenarios()))
	}
	for _, x := range rep.Results {
		wantSkip := false
		for _, s := range skipped {
			wantSkip = wantSkip || s == x.Name
		}
		if (x.Skipped != "") != wantSkip || x.OK == wantSkip {
			t.Errorf("%s: ok %v, skipped %q (want skipped: %v)", x.Name, x.OK, x.Skipped, wantSkip)
		}
	}
	return rep
}

func TestScenariosSharedMemoryDoorbells(t *testing.T) {
	var paused bool
	o := quick
	o.Pause = func(ctx context.Context) error {
		paused = true
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	p := startSim(t, agentsim.Options{})
	// The simulated VMM maps the shared memory region at no
	// guest-physical address: nothing to register there.
	rep := runAll(t, p, o, "doorbell-mr-refused")
	if rep.A.DoorbellMode != "shmem" || rep.B.DoorbellMode != "shmem" || rep.A.ReadyMicros <= 0 {
		t.Errorf("info A %+v B %+v", rep.A, rep.B)
	}
	if !paused {
		t.Error("the stream scenario did not call Pause")
	}
	// Strict, as in real VMs, the skip is a failure.
	ctx := testCtx(t, time.Minute)
	pr, err := agent.NewPair(ctx, p.A.Client, p.B.Client, agent.RunOptions{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range agent.Scenarios() {
		if sc.Name != "doorbell-mr-refused" {
			continue
		}
		if x := pr.Run(ctx, sc); x.OK || x.Skipped != "" || !strings.Contains(x.Error, "could not run") {
			t.Errorf("strict run: %+v", x)
		}
	}
	// The report is what the real-VM test prints as JSON.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back agent.Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Results) != len(rep.Results) || back.A.GID != rep.A.GID {
		t.Fatalf("JSON round trip: %v", err)
	}
}

func TestScenariosGuestRAMDoorbells(t *testing.T) {
	p := startSim(t, agentsim.Options{GuestRAM: true})
	rep := runAll(t, p, quick)
	if rep.A.DoorbellMode != "guest-ram" || rep.A.Doorbells == nil || rep.A.Doorbells.Size == 0 {
		t.Fatalf("info A %+v", rep.A)
	}
	db, _ := rep.Result("doorbell-mr-refused")
	if !strings.Contains(db.Detail, "BAD_ADDRESS") {
		t.Errorf("doorbell MR: %+v", db)
	}
	// The refusal reaches the host as the device's status.
	ctx := testCtx(t, 30*time.Second)
	sr, err := p.A.Client.Setup(ctx, agent.SetupArgs{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.A.Client.RegMRAt(ctx, agent.RegMRAtArgs{GPA: rep.A.Doorbells.GPA, Len: 4096, Access: abi.AccessLocalWrite})
	var re *agent.RemoteError
	if !errors.Is(err, abi.StatusBadAddress) || !errors.As(err, &re) || re.Guest != "a" || re.Method != "RegMRAt" {
		t.Fatalf("REG_MR over the doorbell area: %v", err)
	}
	// Guest RAM is accepted, in both forms (and deregistered at once):
	// the refusal above is the device's, not the agent's.
	for _, pages := range []bool{false, true} {
		r, err := p.A.Client.RegMRAt(ctx, agent.RegMRAtArgs{GPA: sr.MR.Addr + 4096, Len: 8192, Access: abi.AccessLocalWrite, Pages: pages})
		if err != nil || r.LKey == 0 {
			t.Fatalf("REG_MR over the agent's own buffer (page list %v): %+v %v", pages, r, err)
		}
	}
}
