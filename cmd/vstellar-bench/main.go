// Command vstellar-bench runs vStellar's benchmarks. Each suite compares
// against its baseline in the same run and reports the ratio, because the
// machines it runs on are shared and noisy. It prints a table, or with
// --json one JSON object of numbers.
//
//	vstellar-bench verbs [--quick] [--json]
//	    RDMA WRITE bandwidth (4 KiB..4 MiB) and 8-byte WRITE ping-pong
//	    latency between two VMs on one in-process daemon, beside a raw
//	    memcpy of the same sizes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// suite is one benchmark: it fills a report.
type suite struct {
	name  string
	about string
	run   func(ctx context.Context, o options, r *report) error
}

var suites = []suite{
	{"verbs", "RDMA WRITE bandwidth and latency between two VMs on one daemon vs memcpy", runVerbs},
}

type options struct {
	quick bool
	json  bool
	// tiny (tests only, no flag) shrinks the verbs suite far below
	// --quick, so that a test can run it under the race detector on a
	// busy machine and still check every number it reports.
	tiny bool
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: vstellar-bench <suite> [--quick] [--json]")
	for _, s := range suites {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.about)
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var s *suite
	for i := range suites {
		if suites[i].name == args[0] {
			s = &suites[i]
		}
	}
	if s == nil {
		fmt.Fprintf(stderr, "vstellar-bench: unknown suite %q\n", args[0])
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("vstellar-bench "+s.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.quick, "quick", false, "fewer sizes and iterations (a smoke run)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object of numbers instead of a table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "vstellar-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "vstellar-bench: cpu profile: %v\n", err)
			return 1
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	r := &report{}
	if err := s.run(ctx, o, r); err != nil {
		fmt.Fprintf(stderr, "vstellar-bench %s: %v\n", s.name, err)
		return 1
	}
	if o.json {
		b, err := json.Marshal(r.summary)
		if err != nil {
			fmt.Fprintf(stderr, "vstellar-bench: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	r.print(stdout)
	return 0
}
