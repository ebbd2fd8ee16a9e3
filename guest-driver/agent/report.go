package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one scenario's outcome.
type Result struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Skipped says why the scenario could not run here (it is then not
	// OK, and not a failure either).
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
	// Bytes is what the scenario moved between the guests.
	Bytes uint64 `json:"bytes"`
	// Micros is the scenario's time on the host, RPC included; the
	// loops' own figures, measured in the guest, are in Metrics.
	Micros  float64            `json:"us"`
	Detail  string             `json:"detail,omitempty"`
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Report is what RunVerbs found: both guests' Info and each scenario's
// Result. It marshals to JSON as is.
type Report struct {
	A       InfoReply `json:"a"`
	B       InfoReply `json:"b"`
	Results []Result  `json:"scenarios"`
}

// Err joins the failures (skips are not failures).
func (r *Report) Err() error {
	var errs []error
	for _, x := range r.Results {
		if !x.OK && x.Skipped == "" {
			errs = append(errs, fmt.Errorf("%s: %s", x.Name, x.Error))
		}
	}
	return errors.Join(errs...)
}

// Result returns the result of the named scenario.
func (r *Report) Result(name string) (Result, bool) {
	i := slices.IndexFunc(r.Results, func(x Result) bool { return x.Name == name })
	if i < 0 {
		return Result{}, false
	}
	return r.Results[i], true
}

// WriteTable prints the report as a table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, g := range []struct {
		name string
		i    InfoReply
	}{{"A", r.A}, {"B", r.B}} {
		fmt.Fprintf(tw, "guest %s:\tdoorbells %s, device ready %.0f us, %s\n", g.name, g.i.DoorbellMode, g.i.ReadyMicros, g.i.Runtime)
	}
	fmt.Fprintln(tw, "scenario\tresult\tbytes\thost us\tdetail")
	for _, x := range r.Results {
		res, detail := "ok", x.Detail
		switch {
		case x.Skipped != "":
			res, detail = "skipped", x.Skipped
		case !x.OK:
			res, detail = "FAIL", x.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\n", x.Name, res, x.Bytes, x.Micros, strings.ReplaceAll(detail, "\n", "; "))
	}
	return tw.Flush()
}

// RunVerbs runs every scenario between the guests behind a and b, A
// initiating, and reports each; a failed scenario is recorded and the
// pair set up again for the next. The error is for what stopped the run
// (the pair could not be set up); failures are in Report.Err.
func RunVerbs(ctx context.Context, a, b *Client, o RunOptions) (*Report, error) {
	rep := &Report{}
	t0 := time.Now()
	p, err := NewPair(ctx, a, b, o)
	if err != nil {
		return rep, err
	}
	setup := time.Since(t0)
	// After the set-up: a guest-RAM doorbell area exists from the
	// first CQ on.
	if rep.A, err = a.Info(ctx); err != nil {
		return rep, err
	}
	if rep.B, err = b.Info(ctx); err != nil {
		return rep, err
	}
	rep.Results = append(rep.Results, Result{Name: "setup-connect", OK: true, Micros: micros(setup),
		Detail: fmt.Sprintf("A QP %d <-> B QP %d in RTS", p.SA.Endpoint.QPN, p.SB.Endpoint.QPN)})
	for _, sc := range Scenarios() {
		x := p.Run(ctx, sc)
		rep.Results = append(rep.Results, x)
		if sc.Breaks || !x.OK && x.Skipped == "" {
			if err := p.Reconnect(ctx); err != nil {
				return rep, fmt.Errorf("after %s: %w", sc.Name, err)
			}
		}
	}
	return rep, p.Close(ctx)
}

// Run runs one scenario on the pair and times it.
func (p *Pair) Run(ctx context.Context, sc Scenario) Result {
	t0 := time.Now()
	x, err := sc.Run(ctx, p)
	x.Name, x.Micros = sc.Name, micros(time.Since(t0))
	if p.o.Strict && x.Skipped != "" && err == nil {
		err, x.Skipped = fmt.Errorf("could not run: %s", x.Skipped), ""
	}
	x.OK = err == nil && x.Skipped == ""
	if err != nil {
		x.Error = err.Error()
	}
	return x
}
