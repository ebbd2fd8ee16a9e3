// Package vhosttrace holds the format of vhost-user request recordings:
// what real QEMU sent to vstellard, phase by phase, as e2e/realvm records
// it into internal/sim/vmsim/testdata, and what the simulated VMM's test
// compares with it. A recording is "[phase]" headers, then one request per line; lines
// starting with # are notes, not compared.
package vhosttrace

import (
	"fmt"
	"strings"
)

// Parse reads a recording into its phases' lines.
func Parse(s string) (map[string][]string, error) {
	out := map[string][]string{}
	phase := ""
	for i, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			phase = l[1 : len(l)-1]
			out[phase] = nil
		case phase == "":
			return nil, fmt.Errorf("vhosttrace: line %d: %q before the first [phase]", i+1, l)
		default:
			out[phase] = append(out[phase], l)
		}
	}
	return out, nil
}

// Diff shows two sequences side by side from their first difference (40
// lines at most), for a test's failure message.
func Diff(want, got []string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the first %d lines agree; then\n", i)
	for j := i; j < max(len(want), len(got)) && j < i+40; j++ {
		w, g := "-", "-"
		if j < len(want) {
			w = want[j]
		}
		if j < len(got) {
			g = got[j]
		}
		fmt.Fprintf(&b, "  %3d  want %-28s got %s\n", j+1, w, g)
	}
	return b.String()
}
