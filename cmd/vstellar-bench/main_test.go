package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Usage errors exit 2 with a message on stderr and nothing on stdout,
// before any benchmark runs.
func TestRunUsageErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		msg  string // in stderr
	}{
		{"no suite", nil, "usage: vstellar-bench"},
		{"unknown suite", []string{"disk"}, `unknown suite "disk"`},
		{"flag as suite", []string{"--json"}, `unknown suite "--json"`},
		{"unknown flag", []string{"verbs", "--fast"}, "flag provided but not defined: -fast"},
		{"flag with a value", []string{"verbs", "--quick=maybe"}, "invalid boolean value"},
		{"extra argument", []string{"verbs", "--quick", "now"}, `unexpected arguments ["now"]`},
		{"help", []string{"verbs", "-h"}, "-quick"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout %q, want nothing", stdout.String())
			}
			if !strings.Contains(stderr.String(), c.msg) {
				t.Fatalf("stderr %q does not say %q", stderr.String(), c.msg)
			}
		})
	}
}

// runTiny runs the command with args, the verbs suite shrunk to its tiny
// configuration (two sizes, the fewest WRITEs, 200 pings) so that it
// stays quick under the race detector on a busy machine. Everything else
// (flags, the two VMs on an in-process daemon, the output) is the real
// command.
func runTiny(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	i := slices.IndexFunc(suites, func(s suite) bool { return s.name == "verbs" })
	if i < 0 {
		t.Fatal("no verbs suite")
	}
	orig := suites[i].run
	suites[i].run = func(ctx context.Context, o options, r *report) error {
		o.tiny = true
		return orig(ctx, o, r)
	}
	defer func() { suites[i].run = orig }()
	var out, errOut bytes.Buffer
	t0 := time.Now()
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("vstellar-bench %v: exit %d; stderr:\n%s", args, code, errOut.String())
	}
	t.Logf("vstellar-bench %v (tiny) took %v", args, time.Since(t0).Round(time.Millisecond))
	return out.String(), errOut.String()
}

// verbs --json: stdout is one JSON object whose keys the issue names are
// positive numbers, and ratio is write/memcpy. The values depend on the
// machine (and -race); only their shape is checked.
func TestVerbsJSON(t *testing.T) {
	out, errOut := runTiny(t, "verbs", "--json")
	t.Log(strings.TrimSpace(out))
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("stdout is not one line: %q", out)
	}
	var obj map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, out)
	}
	num := map[string]float64{}
	for k, v := range obj {
		n, ok := v.(json.Number)
		if !ok {
			t.Fatalf("%s is %T (%v), want a number", k, v, v)
		}
		f, err := n.Float64()
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		num[k] = f
	}
	for _, k := range []string{"write_gbps_1m", "memcpy_gbps_1m", "ratio", "lat_8b_p50_us", "lat_8b_p99_us"} {
		v, ok := num[k]
		if !ok {
			t.Fatalf("no %s in %s", k, out)
		}
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a positive finite number", k, v)
		}
	}
	if want := num["write_gbps_1m"] / num["memcpy_gbps_1m"]; math.Abs(num["ratio"]-want) > 1e-12*want {
		t.Errorf("ratio %v, but write/memcpy = %v", num["ratio"], want)
	}
	if num["lat_8b_p99_us"] < num["lat_8b_p50_us"] {
		t.Errorf("p99 latency %v below p50 %v", num["lat_8b_p99_us"], num["lat_8b_p50_us"])
	}
}

// verbs without --json: both tables, a row per size, the summary and
// the goals note.
func TestVerbsTable(t *testing.T) {
	out, errOut := runTiny(t, "verbs")
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	for _, want := range []string{
		"RDMA WRITE, VM a -> VM b on one daemon, vs memcpy", "64 KiB", "1 MiB",
		"8-byte inline WRITE ping-pong",
		"lat_8b_p50_us", "lat_8b_p99_us", "memcpy_gbps_1m", "ratio", "write_gbps_1m", "goals: ratio >= 0.7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^ *200 +[0-9.]+ +[0-9.]+ +[0-9.]+ *$`).MatchString(out) {
		t.Errorf("no latency row of 200 samples:\n%s", out)
	}
}

// The table form: tables with their rows, then the summary keys in
// order, then the notes.
func TestReportPrint(t *testing.T) {
	r := &report{}
	tb := r.table("RDMA WRITE", "size", "Gb/s")
	tb.row(sizeName(4<<10), "1.5")
	tb.row(sizeName(1<<20), "20.0")
	r.set("ratio", 0.75)
	r.set("lat_8b_p50_us", 3)
	r.note("goals: %s", "met")
	var b bytes.Buffer
	r.print(&b)
	out := b.String()
	for _, want := range []string{"RDMA WRITE\n", "4 KiB", "1 MiB", "20.0", "lat_8b_p50_us    3.000\nratio            0.750\ngoals: met\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
}

func TestUnits(t *testing.T) {
	if g := gbps(1e9, time.Second); g != 8 {
		t.Errorf("1 GB in 1 s = %v Gb/s, want 8", g)
	}
	if u := us(1500 * time.Nanosecond); u != 1.5 {
		t.Errorf("us(1.5us) = %v", u)
	}
	samples := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(samples, 50); p != 5 {
		t.Errorf("p50 of 1..10 = %v", p)
	}
	if p := percentile(samples, 99); p != 9 {
		t.Errorf("p99 of 1..10 = %v", p)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("p50 of nothing = %v", p)
	}
	for n, want := range map[uint64]string{4 << 10: "4 KiB", 4 << 20: "4 MiB", 1536: "1536 B", 100: "100 B"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q, want %q", n, got, want)
		}
	}
}
