package main

import (
	"fmt"
	"io"
	"math"
)

// goal is one of a suite's targets (from its issue), checked against the
// summary numbers of a run: the table form prints the verdicts after the
// notes, the report command puts them in each suite's section.
type goal struct {
	text  string // what is wanted, as the summary keys say it
	check func(sum map[string]float64) (met bool, value string, err error)
}

// verdict is a goal checked against one run's numbers.
type verdict struct {
	text, value string
	met         bool
	err         error // the numbers lack a key the goal reads
}

func (v verdict) String() string {
	switch {
	case v.err != nil:
		return fmt.Sprintf("%s: not measured (%v)", v.text, v.err)
	case v.met:
		return fmt.Sprintf("%s: met (%s)", v.text, v.value)
	}
	return fmt.Sprintf("%s: NOT met (%s)", v.text, v.value)
}

func checkGoals(gs []goal, sum map[string]float64) []verdict {
	out := make([]verdict, 0, len(gs))
	for _, g := range gs {
		met, value, err := g.check(sum)
		out = append(out, verdict{text: g.text, value: value, met: met, err: err})
	}
	return out
}

func printVerdicts(w io.Writer, vs []verdict) {
	for _, v := range vs {
		fmt.Fprintf(w, "goal %s\n", v)
	}
}

func lookup(sum map[string]float64, key string) (float64, error) {
	v, ok := sum[key]
	if !ok {
		return 0, fmt.Errorf("no %s", key)
	}
	return v, nil
}

// num formats a summary value for a verdict: 4 significant digits.
func num(v float64) string { return fmt.Sprintf("%.4g", v) }

// explained is a goal's text with what explains it, if anything.
func explained(text, what string) string {
	if what == "" {
		return text
	}
	return text + " (" + what + ")"
}

// compare is a goal key <op> limit; what explains it (may be empty).
func compare(key, op string, limit float64, what string, ok func(v float64) bool) goal {
	return goal{text: explained(fmt.Sprintf("%s %s %s", key, op, num(limit)), what), check: func(sum map[string]float64) (bool, string, error) {
		v, err := lookup(sum, key)
		if err != nil {
			return false, "", err
		}
		return ok(v) && !math.IsNaN(v), fmt.Sprintf("%s = %s", key, num(v)), nil
	}}
}

func atLeast(key string, limit float64, what string) goal {
	return compare(key, ">=", limit, what, func(v float64) bool { return v >= limit })
}

func atMost(key string, limit float64, what string) goal {
	return compare(key, "<=", limit, what, func(v float64) bool { return v <= limit })
}

func below(key string, limit float64, what string) goal {
	return compare(key, "<", limit, what, func(v float64) bool { return v < limit })
}

// within is lo <= key <= hi.
func within(key string, lo, hi float64, what string) goal {
	g := compare(key, "in", 0, what, func(v float64) bool { return v >= lo && v <= hi })
	g.text = explained(fmt.Sprintf("%s <= %s <= %s", num(lo), key, num(hi)), what)
	return g
}

// fractionOf is key <= f x other: key clearly below another figure.
func fractionOf(key string, f float64, other, what string) goal {
	return goal{text: explained(fmt.Sprintf("%s <= %s x %s", key, num(f), other), what), check: func(sum map[string]float64) (bool, string, error) {
		v, err := lookup(sum, key)
		if err != nil {
			return false, "", err
		}
		o, err := lookup(sum, other)
		if err != nil {
			return false, "", err
		}
		return v <= f*o, fmt.Sprintf("%s = %s, %s = %s", key, num(v), other, num(o)), nil
	}}
}
