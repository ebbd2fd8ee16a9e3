// Command vstellar-bench runs vStellar's benchmarks. Each suite compares
// against its baseline in the same run and reports the ratio, because the
// machines it runs on are shared and noisy. It prints a table, or with
// --json one JSON object of numbers.
//
//	vstellar-bench verbs [--quick] [--json]
//	    RDMA WRITE bandwidth (4 KiB..4 MiB) and 8-byte WRITE ping-pong
//	    latency between two VMs on one in-process daemon, beside a raw
//	    memcpy of the same sizes.
//
//	vstellar-bench startup [--mem 1G,4G,16G] [--quick] [--json]
//	    Time from the VMM's connect to a ready device (CQ, RC QP, a 1 GiB
//	    MR, one 4 KiB WRITE done) for each guest size, with the device
//	    pinning all guest memory at SET_MEM_TABLE (the VFIO baseline) and
//	    pinning on demand (PVDMA).
//
//	vstellar-bench regmr [--quick] [--json]
//	    REG_MR latency, 1 MiB..1 GiB, pinning on demand vs pinning at
//	    registration (the ibv_reg_mr baseline), and the cost of the first
//	    DMA into a 2 MiB chunk that is not pinned yet.
//
//	vstellar-bench translate [--devices 1,16,256,1024] [--quick] [--json]
//	    DMA address translation through the eMTT beside the two-level
//	    path it replaces (MTT, shared ATC, IOMMU page walk) as devices grow.
//
//	vstellar-bench wire [--quick] [--json]
//	    RDMA WRITE goodput (64 KiB..4 MiB, several RC QPs) and 8-byte WRITE
//	    latency between two VMs on two hosts (two network namespaces, each
//	    an in-process vstellard with its cross-host fabric), beside the
//	    transport alone and raw batched UDP between the same namespaces.
//
//	vstellar-bench loss [--quick] [--json]
//	    VM-to-VM WRITE goodput under random loss (1/16384..1/256) on a
//	    500 Mb/s two-namespace link with 500 µs of delay each way,
//	    selective repeat vs go-back-N, as a fraction of lossless. Needs
//	    root.
//
//	vstellar-bench spray [--quick] [--json]
//	    Permutation traffic across a 2-leaf, 4-spine namespace fabric,
//	    every path selector beside the single path: goodput as a fraction
//	    of the bisection, and best sprayer / single. Needs root.
//
//	vstellar-bench failover [--quick] [--json]
//	    One leaf->spine link black-holed mid-transfer: time until goodput
//	    recovers and the fraction of the remaining capacity after, each
//	    selector beside the single path. Needs root.
package main

import (
	"context"
	"encoding/json"
	"errors"
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
	{"startup", "VMM connect to a ready device, pinning all guest memory vs on demand", runStartup},
	{"regmr", "REG_MR latency on demand vs pinning at registration, and first-touch cost", runRegMR},
	{"translate", "eMTT translation vs MTT + shared ATC + IOMMU walk as devices grow", runTranslate},
	{"wire", "VM-to-VM WRITE goodput and latency across two hosts vs raw batched UDP", runWire},
	{"loss", "VM-to-VM goodput under loss, selective repeat vs go-back-N (needs root)", runLoss},
	{"spray", "leaf-spine permutation goodput per path selector vs single path (needs root)", runSpray},
	{"failover", "goodput through a black-holed spine, sprayers vs single path (needs root)", runFailover},
}

// errUsage marks a suite's error about its flags: exit status 2, as for
// the flags run parses itself.
var errUsage = errors.New("usage")

type options struct {
	quick bool
	json  bool
	// tiny (tests only, no flag) shrinks the verbs suite far below
	// --quick, so that a test can run it under the race detector on a
	// busy machine and still check every number it reports.
	tiny bool
	// devices lists the device counts of the translate suite.
	devices string
	// mem lists the guest memory sizes of the startup suite.
	mem string
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
	fs.StringVar(&o.devices, "devices", "", "translate: comma-separated device counts (default 1,16,256,1024; --quick 1,256)")
	fs.StringVar(&o.mem, "mem", "", "startup: comma-separated guest memory sizes (default 1G,4G,16G; --quick 4G)")
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
		if errors.Is(err, errUsage) {
			return 2
		}
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
