package realvm_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// Two real VMs on one vstellard run every verbs scenario, every byte
// checked: SEND/RECV with gather, WRITE and READ of 128 KiB, FETCH_ADD
// and CMP_SWAP, WRITE_WITH_IMM, a forged rkey, an MR over the doorbells,
// and a WRITE stream across a QMP stop/cont of the target VM.
func TestVerbsBetweenTwoVMs(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			r := newRig(t, hostsim.Options{})
			a := r.boot(qemu, "a", bootOptions{})
			b := r.boot(qemu, "b", bootOptions{})
			want := "guest-ram"
			if q, _ := r.env.QEMU(qemu); q.SharedMemory {
				want = "shmem"
			}
			for _, g := range []*guest{a, b} {
				if g.info.DoorbellMode != want {
					t.Errorf("%s: doorbells %q, want %q under %s", g.name, g.info.DoorbellMode, want, qemu)
				}
				t.Logf("%s: ready %v after QEMU start (guest program: %.0f us to its first command)", g.name, g.ready, g.info.ReadyMicros)
			}
			rep, err := agent.RunVerbs(t.Context(), a.agent, b.agent, agent.RunOptions{
				Strict: true,
				Pause:  func(ctx context.Context) error { return pauseVM(ctx, b) },
			})
			var tab bytes.Buffer
			rep.WriteTable(&tab)
			t.Logf("%s:\n%s", qemu, tab.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func realvmQEMUs(t *testing.T) []string {
	t.Helper()
	r := newRigEnv(t)
	return r.QEMUNames()
}
