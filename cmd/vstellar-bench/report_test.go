package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinySuites makes every suite run its tiny configuration until the test
// ends, and fail names to return an error instead of running.
func tinySuites(t *testing.T, fail ...string) {
	t.Helper()
	orig := slices.Clone(suites)
	t.Cleanup(func() { copy(suites, orig) })
	for i := range suites {
		run, name := suites[i].run, suites[i].name
		suites[i].run = func(ctx context.Context, o options, r *report) error {
			if slices.Contains(fail, name) {
				return errors.New("made to fail by the test")
			}
			o.tiny = true
			return run(ctx, o, r)
		}
	}
}

// The report command writes the page and the plots from a real (tiny)
// run: translate runs, loss is skipped as if not root (saying so, not
// silently), regmr fails (saying so, exit 1, the page still written).
// The page links the plots relatively, the plots are SVG documents, and
// the summary shown is the run's JSON.
func TestReportCommand(t *testing.T) {
	tinySuites(t, "regmr")
	dir := t.TempDir()
	out, plots := filepath.Join(dir, "docs", "benchmarks.md"), filepath.Join(dir, "docs", "plots")
	// A plot of an earlier run goes; another suite's stays.
	if err := os.MkdirAll(plots, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"translate-old.svg", "verbs-bandwidth.svg"} {
		if err := os.WriteFile(filepath.Join(plots, f), []byte("<svg/>"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := reportEnv{
		available: func() error { return errors.New("not root (the test says)") },
		now:       func() time.Time { return time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) },
	}
	var stdout, stderr bytes.Buffer
	args := []string{"--suites", "loss, translate,regmr", "--out", out, "--plots", plots}
	code := runReport(args, &stdout, &stderr, env)
	t.Logf("stderr:\n%s", stderr.String())
	if code != 1 {
		t.Fatalf("exit %d, want 1 (regmr failed)", code)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(page)
	for _, want := range []string{
		"# Benchmark results",
		"`go run ./cmd/vstellar-bench report --suites loss, translate,regmr --out " + out, // the command, as given
		"2026-11-22 12:00 UTC", "| Go | go1.", "no network namespaces, the suites that need them skipped: not root (the test says)", "| machine | ", "[benchmark-notes.md](benchmark-notes.md)",
		"## translate\n", "    go run ./cmd/vstellar-bench translate\n", translateMethod[:40],
		"% of the machine's CPU.\n", // how busy the rest of the machine was
		"**DMA address translation, hot set:", "| devices | eMTT ns |", "| --- | ---: |",
		"![DMA translation, hot set: ns per DMA](plots/translate-ns.svg)",
		"| [translate](#translate) | ratio >= 5",
		"## loss\n", "**skipped: needs root (network namespaces): not root (the test says)**",
		"| [loss](#loss) | | | skipped: needs root",
		"## regmr\n", "**failed after", "made to fail by the test",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Sections in the suites' order, whatever --suites said.
	if i, j, k := strings.Index(md, "## regmr"), strings.Index(md, "## translate"), strings.Index(md, "## loss"); !(i < j && j < k) {
		t.Errorf("sections out of order: regmr at %d, translate at %d, loss at %d", i, j, k)
	}
	// Indented notes continue the bullet before.
	if strings.Contains(md, "\n-  ") || !strings.Contains(md, "the rest anywhere in the MRs; devices interleave uniformly") {
		t.Errorf("translate's continued notes are not joined into their bullet")
	}

	// The summary block is the run's JSON object.
	m := regexp.MustCompile("(?s)## translate.*?Summary \\(`--json`[^\n]*\n\n((?:    [^\n]*\n)+)").FindStringSubmatch(md)
	if m == nil {
		t.Fatal("no summary block in the translate section")
	}
	var sum map[string]float64
	if err := json.Unmarshal([]byte(strings.ReplaceAll(m[1], "\n    ", "")), &sum); err != nil {
		t.Fatalf("summary block is not a JSON object of numbers: %v\n%s", err, m[1])
	}
	positive(t, sum, "emtt_ns", "atc_ns", "ratio", "emtt_ns_1", "emtt_ns_4")

	// Plots: this run's translate plot, parsed as XML with an <svg> root;
	// the earlier translate plot removed, verbs' left alone.
	svgs, _ := filepath.Glob(filepath.Join(plots, "*.svg"))
	for i := range svgs {
		svgs[i] = filepath.Base(svgs[i])
	}
	if want := []string{"translate-ns.svg", "verbs-bandwidth.svg"}; !slices.Equal(svgs, want) {
		t.Errorf("plots %v, want %v", svgs, want)
	}
	checkSVG(t, filepath.Join(plots, "translate-ns.svg"))
	if !strings.Contains(stdout.String(), "wrote "+out) {
		t.Errorf("stdout %q does not say what it wrote", stdout.String())
	}
}

// checkSVG parses the file as XML: an <svg> document, under 100 KB.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 100<<10 {
		t.Errorf("%s: %d bytes, want under 100 KB", path, len(b))
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", path, root)
	}
}

// Figures the suites make: log axes with points a log axis cannot show,
// a single point, a reference line, a bar chart with a missing bar.
func TestFigureSVG(t *testing.T) {
	r := &report{}
	f := r.lines("log", "log-log", "x", "y")
	f.logX, f.logY = true, true
	f.add("a", 1, 10)
	f.add("a", 0, 5)   // no place on a log axis: left out
	f.add("a", 16, -1) // likewise
	f.add("a", 1024, 1000)
	f.add("one", 4, 4)
	f.reference("limit", 1, 1024, 100)
	g := r.barChart("bars", "bars", "fraction")
	g.bar("1 MiB", "single", 0.6)
	g.bar("1 MiB", "rr", 0.8)
	g.bar("64 KiB", "rr", 0.9) // no 64 KiB single
	h := r.lines("time", "a time series", "ms", "Gb/s")
	for i := range 300 {
		h.add("goodput", float64(i-100), math.Max(0, math.Sin(float64(i)/20)))
	}
	dir := t.TempDir()
	for _, fig := range r.figures {
		var b bytes.Buffer
		if err := fig.drawSVG(&b); err != nil {
			t.Fatalf("%s: %v", fig.name, err)
		}
		path := filepath.Join(dir, fig.name+".svg")
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		checkSVG(t, path)
		if !bytes.Contains(b.Bytes(), []byte(fig.title)) {
			t.Errorf("%s: the title %q is not in the SVG", fig.name, fig.title)
		}
	}
	if s := g.get("64 KiB"); len(s.ys) != 2 || !math.IsNaN(s.ys[0]) || s.ys[1] != 0.9 {
		t.Errorf("64 KiB bars %v, want [NaN 0.9]", s.ys)
	}
	empty := r.lines("empty", "nothing", "x", "y")
	empty.logY = true
	empty.add("a", 1, 0)
	if err := empty.drawSVG(io.Discard); err == nil {
		t.Error("a figure with no point to draw was drawn")
	}
}

// Goals: met, not met, a key missing, a range, one figure against another.
func TestGoals(t *testing.T) {
	sum := map[string]float64{"ratio": 0.8, "lat": 12, "recover_ms": -1, "gbn": 0.7, "sack": 0.99}
	for _, c := range []struct {
		g    goal
		want string
	}{
		{atLeast("ratio", 0.7, "VM / UDP"), "ratio >= 0.7 (VM / UDP): met (ratio = 0.8)"},
		{atLeast("ratio", 0.9, ""), "ratio >= 0.9: NOT met (ratio = 0.8)"},
		{below("lat", 10, ""), "lat < 10: NOT met (lat = 12)"},
		{atMost("lat", 12, ""), "lat <= 12: met (lat = 12)"},
		{below("nothing", 1, ""), "nothing < 1: not measured (no nothing)"},
		{within("recover_ms", 0, 50, "-1: never"), "0 <= recover_ms <= 50 (-1: never): NOT met (recover_ms = -1)"},
		{fractionOf("gbn", 0.9, "sack", "worse"), "gbn <= 0.9 x sack (worse): met (gbn = 0.7, sack = 0.99)"},
	} {
		v := checkGoals([]goal{c.g}, sum)
		if got := v[0].String(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
	// Every suite's goals read keys its summary has: a tiny translate
	// run is checked in TestReportCommand; here, the names at least.
	for _, s := range suites {
		if len(s.goals) == 0 || s.method == "" {
			t.Errorf("suite %s has no goals or no method text", s.name)
		}
	}
}

func TestJSONNumber(t *testing.T) {
	for v, want := range map[float64]string{
		1234.5678: "1235", 0.000123456: "0.0001235", 1e6: "1000000", 3: "3", -0.5: "-0.5", 7.291: "7.291",
		math.NaN(): "null", math.Inf(1): "null",
	} {
		if got := jsonNumber(v); got != want {
			t.Errorf("jsonNumber(%v) = %q, want %q", v, got, want)
		}
	}
	r := &report{}
	for i, k := range []string{"b", "a", "c"} {
		r.set(k, float64(i))
	}
	lines := summaryJSON(r, 10)
	var m map[string]float64
	if err := json.Unmarshal([]byte(strings.Join(lines, "")), &m); err != nil || len(m) != 3 || m["a"] != 1 {
		t.Errorf("summaryJSON %q: %v %v", lines, m, err)
	}
	if len(lines) < 2 {
		t.Errorf("summaryJSON %q not broken at width 10", lines)
	}
}

// The failover timeline: goodput per window relative to the black hole,
// from the samples of completed bytes.
func TestFailoverTimeline(t *testing.T) {
	// 1 Gb/s (125 bytes per µs) until 300 ms, then half of it.
	var ss []sample
	var bytes uint64
	for at := time.Duration(0); at <= 600*time.Millisecond; at += 2 * time.Millisecond {
		ss = append(ss, sample{at, bytes})
		if at < 300*time.Millisecond {
			bytes += 250_000
		} else {
			bytes += 125_000
		}
	}
	res := &failoverResult{samples: ss, blackHoleAt: 300 * time.Millisecond, end: -1}
	pts := res.timeline(20*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond)
	if len(pts) != 15 {
		t.Fatalf("%d windows from 100 ms before to 200 ms after, want 15: %v", len(pts), pts)
	}
	for _, p := range pts {
		want := 1.0
		if p[0] > 0 {
			want = 0.5
		}
		if math.Abs(p[1]-want) > 1e-9 {
			t.Errorf("window ending %v ms: %v Gb/s, want %v", p[0], p[1], want)
		}
	}
	if pts[0][0] != -80 || pts[len(pts)-1][0] != 200 {
		t.Errorf("windows end at %v..%v ms, want -80..200", pts[0][0], pts[len(pts)-1][0])
	}
	// A sender done at 400 ms ends the timeline there.
	res.end = 400 * time.Millisecond
	if pts := res.timeline(20*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond); pts[len(pts)-1][0] != 100 {
		t.Errorf("with a sender done 100 ms after the black hole, the timeline ends at %v ms", pts[len(pts)-1][0])
	}
}
