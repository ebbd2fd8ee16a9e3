package main

import (
	"strings"
	"testing"
)

func TestParseProcs(t *testing.T) {
	p, err := parseProcs("2, 4,8")
	if err != nil || len(p) != 3 || p[0] != 2 || p[1] != 4 || p[2] != 8 {
		t.Fatalf("parseProcs = %v, %v", p, err)
	}
	for _, bad := range []string{"", "0", "2,x", "2,2", "-1", "2000"} {
		if _, err := parseProcs(bad); err == nil {
			t.Errorf("parseProcs(%q) accepted", bad)
		}
	}
}

// TestProcsTable: a row per GOMAXPROCS, each number beside its ratio to
// the first row's, and a dash for a number a run did not report.
func TestProcsTable(t *testing.T) {
	r := &report{}
	writeProcsTable(r, "verbs", []procsRun{
		{Procs: 2, Summary: map[string]float64{"lat_8b_p50_us": 1.3, "ratio": 0.9}},
		{Procs: 8, Summary: map[string]float64{"lat_8b_p50_us": 2.6}},
	})
	var b strings.Builder
	r.print(&b)
	out := b.String()
	for _, want := range []string{"GOMAXPROCS", "1.30 (x1.00)", "2.60 (x2.00)", "0.900 (x1.00)", " -"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestProcsFlagOnlyForItsSuites: --procs is refused where it means
// nothing.
func TestProcsFlagOnlyForItsSuites(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := run([]string{"regmr", "--procs", "2,4"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "not for the regmr suite") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
