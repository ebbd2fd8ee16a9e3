package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The report command: every suite (or those --suites names), one after
// the other in this process, and the results page written from what they
// recorded: per suite its method, the exact command, tables, plots, the
// JSON summary and its goals checked against the numbers.

// reportEnv is what the report command takes from its surroundings, so
// that a test can stand in for it.
type reportEnv struct {
	// available says whether network namespaces can be built (root);
	// suites that need them are skipped, saying so, when it fails.
	available func() error
	// now is the clock of the page's date (nil: time.Now).
	now func() time.Time
}

// reportArgs is the suite's arguments in a report run: --quick, and in
// a quick run enough points for a line where the suite's own --quick has
// one or two (startup: two guest sizes; translate: four device counts),
// and the suites that take seconds in full at their full size.
func reportArgs(name string, quick bool) []string {
	if !quick {
		return nil
	}
	args := []string{"--quick"}
	switch name {
	case "verbs":
		// Its full run takes about 5 s; --quick's 64 WRITEs of 1 MiB per
		// round are too few to survive a busy neighbour. Its runs at
		// other GOMAXPROCS (--procs, children with --quick) and its
		// scaling table take about a minute more.
		return []string{"--procs", procsList(), "--pairs", "1,2,4"}
	case "wire":
		args = append(args, "--procs", procsList(), "--pairs", "1,2,4")
	case "startup":
		args = append(args, "--mem", "1G,4G")
	case "translate":
		args = append(args, "--devices", "1,16,256,1024")
	case "devices":
		args = append(args, "--count", fmt.Sprint(devicesDefault)) // the count; it takes seconds
	}
	return args
}

// section is one suite's part of the report.
type section struct {
	s       *suite
	args    []string
	r       *report
	took    time.Duration
	skipped string // why it did not run; "" if it ran
	err     error  // it ran and failed
	// others is the share of the machine's CPU that other processes used
	// while the suite ran (-1: unknown): the noise its numbers carry.
	others   float64
	plots    []string
	verdicts []verdict
}

// command is how to run the suite alone as the report ran it.
func (sec *section) command() string {
	return strings.Join(append([]string{"go run ./cmd/vstellar-bench", sec.s.name}, sec.args...), " ")
}

func runReport(args []string, stdout, stderr io.Writer, env reportEnv) int {
	fs := flag.NewFlagSet("vstellar-bench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "run every suite with --quick")
	out := fs.String("out", "docs/benchmarks.md", "the results page to write")
	plots := fs.String("plots", "docs/plots", "the directory for the plots (SVG)")
	only := fs.String("suites", "", "comma-separated suites to run (default: all, in order)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "vstellar-bench report: unexpected arguments %q\n", fs.Args())
		return 2
	}
	chosen, err := chooseSuites(*only)
	if err != nil {
		fmt.Fprintf(stderr, "vstellar-bench report: %v\n", err)
		return 2
	}
	if env.now == nil {
		env.now = time.Now
	}
	if err := os.MkdirAll(*plots, 0o755); err != nil {
		fmt.Fprintf(stderr, "vstellar-bench report: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	start := env.now()
	t0 := time.Now()
	var secs []*section
	failed := false
	for _, s := range chosen {
		sec := runSection(ctx, s, reportArgs(s.name, *quick), env, stderr)
		if sec.err == nil && sec.skipped == "" {
			if sec.err = writePlots(sec, *out, *plots); sec.err != nil {
				fmt.Fprintf(stderr, "report: %s: %v\n", s.name, sec.err)
			}
		}
		failed = failed || sec.err != nil
		secs = append(secs, sec)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "report: interrupted; nothing written")
			return 1
		}
	}
	var page bytes.Buffer
	writePage(&page, pageInfo{args: args, date: start, took: time.Since(t0), namespaces: env.available()}, secs)
	if err := writeFileAtomic(*out, page.Bytes()); err != nil {
		fmt.Fprintf(stderr, "vstellar-bench report: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (%d suites, %v)\n", *out, len(secs), time.Since(t0).Round(time.Second))
	if failed {
		return 1
	}
	return 0
}

// chooseSuites is the suites --suites names, in the suites' order.
func chooseSuites(only string) ([]*suite, error) {
	var out []*suite
	if only == "" {
		for i := range suites {
			out = append(out, &suites[i])
		}
		return out, nil
	}
	want := map[string]bool{}
	for name := range strings.SplitSeq(only, ",") {
		name = strings.TrimSpace(name)
		if findSuite(name) == nil {
			return nil, fmt.Errorf("--suites %q: unknown suite %q", only, name)
		}
		want[name] = true
	}
	for i := range suites {
		if want[suites[i].name] {
			out = append(out, &suites[i])
		}
	}
	return out, nil
}

// runSection runs one suite for the report, as its own command would with
// args, logging progress to stderr.
func runSection(ctx context.Context, s *suite, args []string, env reportEnv, stderr io.Writer) *section {
	sec := &section{s: s, args: args, r: &report{}}
	if s.needsRoot {
		if err := env.available(); err != nil {
			sec.skipped = fmt.Sprintf("needs root (network namespaces): %v", err)
			fmt.Fprintf(stderr, "report: %s skipped: %s\n", s.name, sec.skipped)
			return sec
		}
	}
	o, _, err := suiteFlags(s, args, stderr)
	if err != nil {
		sec.err = err
		return sec
	}
	fmt.Fprintf(stderr, "report: %s ...\n", sec.command())
	load := startLoad()
	t0 := time.Now()
	sec.err = runSuite(ctx, s, o, sec.r, stderr)
	sec.took = time.Since(t0)
	sec.others = load.others()
	if sec.err != nil {
		fmt.Fprintf(stderr, "report: %s failed after %v: %v\n", s.name, sec.took.Round(time.Millisecond), sec.err)
		return sec
	}
	sec.verdicts = checkGoals(s.goals, sec.r.summary)
	fmt.Fprintf(stderr, "report: %s done in %v\n", s.name, sec.took.Round(time.Millisecond))
	return sec
}

// loadMeter tells how busy the rest of the machine was over a span: the
// machine's user, system and stolen time (/proc/stat) less this process's
// (getrusage). Interrupt time is left out: the suites between hosts spend
// much of theirs in the kernel's network softirqs, which count as no
// process's.
type loadMeter struct {
	busy, total uint64 // clock ticks, /proc/stat
	own         time.Duration
	at          time.Time
	err         error
}

// processTicks is the machine's CPU time in processes, kernel threads
// and the hypervisor (user, nice, system, steal), and all of it, in clock
// ticks.
func processTicks() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("reading CPU time: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		total += n
		if i <= 2 || i == 7 {
			busy += n
		}
	}
	return busy, total, nil
}

func startLoad() loadMeter {
	var m loadMeter
	m.busy, m.total, m.err = processTicks()
	if m.err == nil {
		m.own, m.err = cpuTime()
	}
	m.at = time.Now()
	return m
}

// others is the share (0..1) of all CPUs that other processes used since
// startLoad, or -1 if it cannot tell.
func (m loadMeter) others() float64 {
	busy, total, err := processTicks()
	own, err2 := cpuTime()
	wall := time.Since(m.at)
	if m.err != nil || err != nil || err2 != nil || total <= m.total || wall <= 0 {
		return -1
	}
	machine := float64(busy-m.busy) / float64(total-m.total)
	mine := (own - m.own).Seconds() / (wall.Seconds() * float64(runtime.NumCPU()))
	return max(0, machine-mine)
}

// writePlots draws the section's figures into dir as <suite>-<name>.svg,
// first removing that suite's plots of an earlier run, and records
// their paths relative to the page.
func writePlots(sec *section, page, dir string) error {
	old, err := filepath.Glob(filepath.Join(dir, sec.s.name+"-*.svg"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("removing an old plot: %w", err)
		}
	}
	rel, err := filepath.Rel(filepath.Dir(page), dir)
	if err != nil {
		return fmt.Errorf("placing the plots beside %s: %w", page, err)
	}
	for _, f := range sec.r.figures {
		var b bytes.Buffer
		if err := f.drawSVG(&b); err != nil {
			return fmt.Errorf("plot %s: %w", f.name, err)
		}
		name := sec.s.name + "-" + f.name + ".svg"
		if err := writeFileAtomic(filepath.Join(dir, name), b.Bytes()); err != nil {
			return err
		}
		sec.plots = append(sec.plots, filepath.ToSlash(filepath.Join(rel, name)))
	}
	return nil
}

// writeFileAtomic replaces path with b, so that an interrupted run leaves
// the old file whole.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// pageInfo is the run as a whole, for the page's header.
type pageInfo struct {
	args       []string // the report command's arguments
	date       time.Time
	took       time.Duration
	namespaces error // why network namespaces are not available (nil: they are)
}

func writePage(w io.Writer, info pageInfo, secs []*section) {
	cmd := strings.Join(append([]string{"go run ./cmd/vstellar-bench report"}, info.args...), " ")
	fmt.Fprintf(w, "# Benchmark results\n\n")
	fmt.Fprintf(w, "This page is generated: `%s` ran every section below in one process, one suite after the other, on %s, in %v. Do not edit it; run the command again (as root, or the suites that need network namespaces are skipped). ",
		cmd, info.date.UTC().Format("2006-01-02 15:04 MST"), info.took.Round(time.Second))
	fmt.Fprintf(w, "Hand-written analysis of these numbers (where the time goes, why some goals are missed, micro-benchmarks and tests) is in [benchmark-notes.md](benchmark-notes.md).\n\n")
	fmt.Fprintf(w, "Each suite compares against its baseline in the same run and reports the ratio, because the machine is shared and noisy: read ratios and orders of magnitude, not the last digit. Each section says how much of the machine's CPU the rest of the machine took while it ran (other processes, kernel threads such as those freeing a pinned guest's pages, and the hypervisor's steal); the suites between hosts (wire, loss, spray, failover) suffer most from it.\n\n")
	fmt.Fprintf(w, "| | |\n| --- | --- |\n")
	fmt.Fprintf(w, "| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "| machine | %s |\n", machine())
	fmt.Fprintf(w, "| GOMAXPROCS | %d |\n", runtime.GOMAXPROCS(0))
	ns := "network namespaces available"
	if info.namespaces != nil {
		ns = "no network namespaces, the suites that need them skipped: " + mdCell(info.namespaces.Error())
	}
	fmt.Fprintf(w, "| root | %s; %s |\n", map[bool]string{true: "yes", false: "no"}[os.Geteuid() == 0], ns)
	fmt.Fprintln(w)

	fmt.Fprintf(w, "## Goals\n\n| suite | goal | value | verdict |\n| --- | --- | --- | --- |\n")
	for _, sec := range secs {
		switch {
		case sec.skipped != "":
			fmt.Fprintf(w, "| [%s](#%s) | | | skipped: %s |\n", sec.s.name, sec.s.name, mdCell(sec.skipped))
		case sec.err != nil:
			fmt.Fprintf(w, "| [%s](#%s) | | | failed: %s |\n", sec.s.name, sec.s.name, mdCell(sec.err.Error()))
		}
		for _, v := range sec.verdicts {
			verdict := "met"
			switch {
			case v.err != nil:
				verdict = "not measured"
			case !v.met:
				verdict = "**not met**"
			}
			fmt.Fprintf(w, "| [%s](#%s) | %s | %s | %s |\n", sec.s.name, sec.s.name, mdCell(v.text), mdCell(v.value), verdict)
		}
	}
	fmt.Fprintln(w)

	for _, sec := range secs {
		writeSection(w, sec)
	}
}

func writeSection(w io.Writer, sec *section) {
	fmt.Fprintf(w, "## %s\n\n", sec.s.name)
	fmt.Fprintf(w, "%s.\n\n", sec.s.about)
	fmt.Fprintf(w, "%s\n\n", strings.Join(strings.Fields(sec.s.method), " "))
	fmt.Fprintf(w, "    %s\n\n", sec.command())
	switch {
	case sec.skipped != "":
		fmt.Fprintf(w, "**skipped: %s**\n\n", sec.skipped)
		return
	case sec.err != nil:
		fmt.Fprintf(w, "**failed after %v: %s**\n\n", sec.took.Round(time.Millisecond), sec.err)
		return
	}
	fmt.Fprintf(w, "Ran in %v", sec.took.Round(100*time.Millisecond))
	if sec.others >= 0 {
		fmt.Fprintf(w, "; meanwhile other processes, kernel threads and the hypervisor took %.0f%% of the machine's CPU", 100*sec.others)
	}
	fmt.Fprintf(w, ".\n\n")
	for _, t := range sec.r.tables {
		writeTable(w, t)
	}
	if len(sec.r.notes) > 0 {
		// A note indented in the table form continues the one before.
		var items []string
		for _, n := range sec.r.notes {
			if strings.HasPrefix(n, " ") && len(items) > 0 {
				items[len(items)-1] += " " + strings.TrimSpace(n)
				continue
			}
			items = append(items, strings.TrimSpace(n))
		}
		for _, n := range items {
			fmt.Fprintf(w, "- %s\n", mdText(n))
		}
		fmt.Fprintln(w)
	}
	for i, p := range sec.plots {
		fmt.Fprintf(w, "![%s](%s)\n\n", mdCell(sec.r.figures[i].title), p)
	}
	fmt.Fprintf(w, "Summary (`--json`, numbers to 4 significant digits):\n\n")
	for _, line := range summaryJSON(sec.r, 96) {
		fmt.Fprintf(w, "    %s\n", line)
	}
	fmt.Fprintln(w)
	if len(sec.verdicts) > 0 {
		fmt.Fprintf(w, "Goals:\n\n")
		for _, v := range sec.verdicts {
			fmt.Fprintf(w, "- %s\n", mdText(v.String()))
		}
		fmt.Fprintln(w)
	}
}

func writeTable(w io.Writer, t *table) {
	fmt.Fprintf(w, "**%s**\n\n", mdText(t.title))
	cells := func(row []string) string {
		out := make([]string, len(t.head))
		for i := range out {
			if i < len(row) {
				out[i] = mdCell(row[i])
			}
		}
		return "| " + strings.Join(out, " | ") + " |"
	}
	fmt.Fprintln(w, cells(t.head))
	align := make([]string, len(t.head))
	for i := range align {
		align[i] = "---:"
	}
	align[0] = "---"
	fmt.Fprintln(w, "| "+strings.Join(align, " | ")+" |")
	for _, row := range t.rows {
		fmt.Fprintln(w, cells(row))
	}
	fmt.Fprintln(w)
}

// summaryJSON is the report's summary as a JSON object, each number to 4
// significant digits, broken into lines of about width characters.
func summaryJSON(r *report, width int) []string {
	var lines []string
	line := "{"
	keys := r.keys()
	for i, k := range keys {
		item := fmt.Sprintf("%q:%s", k, jsonNumber(r.summary[k]))
		if i < len(keys)-1 {
			item += ","
		}
		if len(line)+len(item) > width && line != "{" {
			lines = append(lines, line)
			line = " "
		}
		line += item
	}
	return append(lines, line+"}")
}

// jsonNumber formats v to 4 significant digits without an exponent
// (the shortest decimal of the rounded value); NaN and infinities, which
// JSON lacks, as null.
func jsonNumber(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	x, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// mdText escapes what markdown would take for markup in running text.
func mdText(s string) string {
	r := strings.NewReplacer("*", `\*`, "_", `\_`, "<", "&lt;", "|", `\|`)
	return r.Replace(s)
}

// mdCell is mdText for a table cell.
func mdCell(s string) string { return mdText(s) }

// machine describes this machine: cores, CPU model, memory, kernel.
func machine() string {
	parts := []string{fmt.Sprintf("%d cores", runtime.NumCPU())}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				parts[0] += " (" + strings.TrimSpace(v) + ")"
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			var kb uint64
			if n, _ := fmt.Sscanf(line, "MemTotal: %d kB", &kb); n == 1 {
				parts = append(parts, fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20)))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(b)))
	}
	return strings.Join(parts, ", ")
}
