package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// The --procs mode: a suite run once per GOMAXPROCS value, each in a
// child process of this binary (the runtime fixes GOMAXPROCS's effect on
// its scheduler at start-up, and a fresh process keeps one run's heap and
// threads out of the next), reported in one table with every number's
// ratio to the first row's.

// procsSuites are the suites --procs runs.
var procsSuites = []string{"verbs", "wire", "spray"}

// parseProcs parses --procs: GOMAXPROCS values, comma-separated, each 1
// or more.
func parseProcs(v string) ([]int, error) { return parseCounts("procs", "GOMAXPROCS value", v, 1024) }

// parseCounts parses flag name's comma-separated list of what values,
// each in 1..limit and listed once.
func parseCounts(name, what, v string, limit int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > limit {
			return nil, fmt.Errorf("--%s %s: %q is not a %s (1..%d)", name, v, f, what, limit)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--%s %s: %d listed twice", name, v, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// procsRun is one child's result.
type procsRun struct {
	Procs   int                `json:"gomaxprocs"`
	Summary map[string]float64 `json:"summary"`
}

// addProcs runs suite s with --json at each GOMAXPROCS in o.procs, each
// in a process of its own, and adds to r the table, the plots of
// latency and throughput against GOMAXPROCS, and each run's numbers as
// procs_P_KEY. The suite's own run (at this process's GOMAXPROCS) is
// the caller's.
func addProcs(ctx context.Context, s *suite, o options, r *report, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{s.name, "--json"}
	if o.quick {
		args = append(args, "--quick")
	}
	var runs []procsRun
	for _, p := range o.procs {
		fmt.Fprintf(stderr, "vstellar-bench %s: GOMAXPROCS=%d\n", s.name, p)
		cmd := exec.CommandContext(ctx, self, args...)
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(p))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("GOMAXPROCS=%d: %w", p, err)
		}
		run := procsRun{Procs: p}
		if err := json.Unmarshal(out.Bytes(), &run.Summary); err != nil {
			return fmt.Errorf("GOMAXPROCS=%d: its output: %w", p, err)
		}
		runs = append(runs, run)
	}
	writeProcsTable(r, s.name, runs)
	for _, run := range runs {
		for k, v := range run.Summary {
			r.set(fmt.Sprintf("procs_%d_%s", run.Procs, k), v)
		}
	}
	return nil
}

// procsList is the report's --procs: 2, 4, 8 and 16, up to twice the
// CPUs (on a 2-core machine 2 and 4: more processors than cores, where
// the Go scheduler used to decide the data path's latency).
func procsList() string {
	out := []string{"2"}
	for p := 4; p <= 16 && p <= 2*runtime.NumCPU(); p *= 2 {
		out = append(out, strconv.Itoa(p))
	}
	return strings.Join(out, ",")
}

// procsPlots are the numbers plotted against GOMAXPROCS, per suite:
// latency, then throughput.
var procsPlots = map[string][2][]string{
	"verbs": {{"lat_8b_p50_us", "lat_8b_p99_us"}, {"write_gbps_1m", "memcpy_gbps_1m"}},
	"wire":  {{"lat_8b_p50_us", "udp_lat_p50_us"}, {"transport_gbps", "udp_gbps"}},
}

// writeProcsTable adds the table of runs to r: a row per GOMAXPROCS, a
// column per number, each cell the value and its ratio to the first row.
func writeProcsTable(r *report, suite string, runs []procsRun) {
	var keys []string
	for _, run := range runs {
		for k := range run.Summary {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	t := r.table(fmt.Sprintf("%s at each GOMAXPROCS (x: ratio to GOMAXPROCS=%d)", suite, runs[0].Procs), append([]string{"GOMAXPROCS"}, keys...)...)
	for _, run := range runs {
		row := []string{strconv.Itoa(run.Procs)}
		for _, k := range keys {
			v, ok := run.Summary[k]
			base, okBase := runs[0].Summary[k]
			switch {
			case !ok:
				row = append(row, "-")
			case okBase && base != 0:
				row = append(row, fmt.Sprintf("%s (x%.2f)", procsNum(v), v/base))
			default:
				row = append(row, procsNum(v))
			}
		}
		t.row(row...)
	}
	r.note("each row a separate process of this binary with GOMAXPROCS set; %d CPUs", runtime.NumCPU())
	plots, ok := procsPlots[suite]
	if !ok {
		return
	}
	for i, what := range []string{"latency", "throughput"} {
		unit := map[string]string{"latency": "us", "throughput": "Gb/s"}[what]
		f := r.lines("procs-"+what, fmt.Sprintf("%s %s against GOMAXPROCS (%d CPUs)", suite, what, runtime.NumCPU()), "GOMAXPROCS", unit)
		for _, k := range plots[i] {
			for _, run := range runs {
				if v, ok := run.Summary[k]; ok {
					f.add(k, float64(run.Procs), v)
				}
			}
		}
	}
}

// procsNum prints a number with about three significant digits.
func procsNum(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
