package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report collects a suite's tables and its summary numbers (the JSON).
type report struct {
	tables  []*table
	summary map[string]float64
	notes   []string
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
	keys := make([]string, 0, len(r.summary))
	for k := range r.summary {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%-16s %.3f\n", k, r.summary[k])
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, n)
	}
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
