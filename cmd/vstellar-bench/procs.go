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
func parseProcs(v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("--procs %s: %q is not a GOMAXPROCS value (1..1024)", v, f)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--procs %s: %d listed twice", v, n)
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

// runProcs runs suite s with --json at each GOMAXPROCS in procs and
// prints the table (or, with o.json, one JSON object).
func runProcs(ctx context.Context, s *suite, o options, procs []int, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "vstellar-bench: %v\n", err)
		return 1
	}
	args := []string{s.name, "--json"}
	if o.quick {
		args = append(args, "--quick")
	}
	var runs []procsRun
	for _, p := range procs {
		fmt.Fprintf(stderr, "vstellar-bench %s: GOMAXPROCS=%d\n", s.name, p)
		cmd := exec.CommandContext(ctx, self, args...)
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(p))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(stderr, "vstellar-bench %s: GOMAXPROCS=%d: %v\n", s.name, p, err)
			return 1
		}
		run := procsRun{Procs: p}
		if err := json.Unmarshal(out.Bytes(), &run.Summary); err != nil {
			fmt.Fprintf(stderr, "vstellar-bench %s: GOMAXPROCS=%d: its output: %v\n", s.name, p, err)
			return 1
		}
		runs = append(runs, run)
	}
	if o.json {
		b, err := json.Marshal(struct {
			Suite string     `json:"suite"`
			CPUs  int        `json:"cpus"`
			Runs  []procsRun `json:"runs"`
		}{s.name, runtime.NumCPU(), runs})
		if err != nil {
			fmt.Fprintf(stderr, "vstellar-bench: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	r := &report{}
	writeProcsTable(r, s.name, runs)
	r.print(stdout)
	return 0
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
