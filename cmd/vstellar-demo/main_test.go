package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// The README's first command must keep working: run the demo as it runs
// there (in-process daemon), and check what it reports.
func TestDemo(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"--vms", "2", "--mem", "1", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc output
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	results := doc.VMs
	if v := doc.Verbs; v == nil || v.SendBytes == 0 || v.WriteKiB != 128 || v.WriteUs <= 0 || v.ReadUs <= 0 || v.FetchAdd != 42 {
		t.Errorf("verbs between the two VMs: %+v", v)
	}
	if x := doc.CrossHost; x == nil || x.Network == "" || x.Verbs == nil || x.Verbs.WriteKiB != 128 || x.Verbs.FetchAdd != 42 {
		t.Errorf("verbs across two hosts: %+v", x)
	}
	if len(results) != 2 {
		t.Fatalf("%d results", len(results))
	}
	guids := map[string]bool{}
	for _, r := range results {
		if r.MaxQP == 0 || r.BootMs <= 0 || r.ReconnectMs <= 0 || r.ShutdownNotes < 1 ||
			!strings.HasPrefix(r.Doorbells, "shmem region 0") {
			t.Errorf("%s: %+v", r.VM, r)
		}
		guids[r.NodeGUID] = true
	}
	if len(guids) != 2 {
		t.Errorf("devices share a node GUID: %v", guids)
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	var out, errOut strings.Builder
	for _, args := range [][]string{{"--vms", "0"}, {"--mem", "-1"}, {"--bogus"}, {"--rdma-tools"}} {
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}

// Without a prepared harness, --real-vm says how to prepare it.
func TestRealVMNeedsTheHarness(t *testing.T) {
	t.Setenv("VSTELLAR_REALVM_DIR", t.TempDir())
	var out, errOut strings.Builder
	for _, args := range [][]string{{"--real-vm"}, {"--real-vm", "--rdma-tools"}} {
		out.Reset()
		errOut.Reset()
		if code := run(args, &out, &errOut); code != 1 {
			t.Fatalf("%v: exit %d, want 1: %s", args, code, errOut.String())
		}
		if msg := errOut.String(); !strings.Contains(msg, "prepare.sh") || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: message %q: want one line naming prepare.sh", args, msg)
		}
	}
}
