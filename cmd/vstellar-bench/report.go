package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report collects a suite's tables, its summary numbers (the JSON) and
// the series its plots are drawn from. The table form prints tables,
// summary and notes; the report command (reportcmd.go) also draws the
// figures.
type report struct {
	tables  []*table
	summary map[string]float64
	notes   []string
	figures []*figure
}

type table struct {
	title string
	head  []string
	rows  [][]string
}

func (r *report) table(title string, head ...string) *table {
	t := &table{title: title, head: head}
	r.tables = append(r.tables, t)
	return t
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (r *report) set(key string, v float64) {
	if r.summary == nil {
		r.summary = map[string]float64{}
	}
	r.summary[key] = v
}

func (r *report) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// figure is one plot's data, recorded by a suite as it measures, so that
// plots never parse table cells: named series of (x, y) points drawn as
// lines, or, for a bar chart, one value per category in each series.
type figure struct {
	name           string // file name stem, unique within the suite
	title          string
	xLabel, yLabel string
	logX, logY     bool
	bars           bool
	categories     []string // bar charts: the x axis, in order
	series         []*series
}

type series struct {
	name   string
	xs, ys []float64
	// dashed marks a reference line (a baseline or a threshold) rather
	// than a measurement.
	dashed bool
}

// lines starts a line plot: points added with add, a line per series in
// the order the series first appear.
func (r *report) lines(name, title, xLabel, yLabel string) *figure {
	f := &figure{name: name, title: title, xLabel: xLabel, yLabel: yLabel}
	r.figures = append(r.figures, f)
	return f
}

// barChart starts a bar chart: values added with bar, grouped by
// category along x, a bar per series in each group.
func (r *report) barChart(name, title, yLabel string) *figure {
	f := r.lines(name, title, "", yLabel)
	f.bars = true
	return f
}

func (f *figure) get(name string) *series {
	for _, s := range f.series {
		if s.name == name {
			return s
		}
	}
	s := &series{name: name}
	f.series = append(f.series, s)
	return s
}

// add appends the point (x, y) to the named series of a line plot.
func (f *figure) add(name string, x, y float64) {
	s := f.get(name)
	s.xs = append(s.xs, x)
	s.ys = append(s.ys, y)
}

// reference adds a dashed horizontal line at y across [x0, x1].
func (f *figure) reference(name string, x0, x1, y float64) {
	s := f.get(name)
	s.dashed = true
	s.xs, s.ys = []float64{x0, x1}, []float64{y, y}
}

// bar sets the named series' value in category (a bar chart).
func (f *figure) bar(name, category string, y float64) {
	i := slices.Index(f.categories, category)
	if i < 0 {
		i = len(f.categories)
		f.categories = append(f.categories, category)
	}
	s := f.get(name)
	for len(s.ys) <= i {
		s.ys = append(s.ys, math.NaN()) // a category this series lacks: no bar
	}
	s.ys[i] = y
}

func (r *report) print(w io.Writer) {
	for _, t := range r.tables {
		fmt.Fprintf(w, "%s\n", t.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(t.head, "\t")+"\t")
		for _, row := range t.rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	for _, k := range r.keys() {
		fmt.Fprintf(w, "%-16s %.3f\n", k, r.summary[k])
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, n)
	}
}

// keys is the summary's keys, sorted.
func (r *report) keys() []string {
	keys := make([]string, 0, len(r.summary))
	for k := range r.summary {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// gbps is bytes over d in gigabits per second.
func gbps(bytes uint64, d time.Duration) float64 {
	return float64(bytes) * 8 / d.Seconds() / 1e9
}

// percentile returns the p-th percentile (0..100) of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func sizeName(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// sizeKey names a size in JSON keys: 16g, 512m, 64k.
func sizeKey(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dg", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	}
	return fmt.Sprintf("%dk", n>>10)
}
