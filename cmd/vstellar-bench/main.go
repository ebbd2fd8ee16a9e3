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
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/vstellar/vstellar/internal/netlab"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// suite is one benchmark: it fills a report.
type suite struct {
	name  string
	about string
	// method says what the suite measures and how, for the report
	// command's section (a few sentences; the tables' titles and notes
	// carry the details of each run).
	method string
	// needsRoot: the suite builds network namespaces and fails without
	// them; the report command skips it, saying so.
	needsRoot bool
	goals     []goal
	run       func(ctx context.Context, o options, r *report) error
}

var suites = []suite{
	{"verbs", "RDMA WRITE bandwidth and latency between two VMs on one daemon vs memcpy", verbsMethod, false, verbsGoals, runVerbs},
	{"startup", "VMM connect to a ready device, pinning all guest memory vs on demand", startupMethod, false, startupGoals, runStartup},
	{"regmr", "REG_MR latency on demand vs pinning at registration, and first-touch cost", regmrMethod, false, regmrGoals, runRegMR},
	{"srq", "receive throughput and ring memory, N QPs on one SRQ vs an RQ each", srqMethod, false, srqGoals, runSRQ},
	{"translate", "eMTT translation vs MTT + shared ATC + IOMMU walk as devices grow", translateMethod, false, translateGoals, runTranslate},
	{"devices", "N devices in one daemon through the management API: create/destroy latency, RSS, idle CPU", devicesMethod, false, devicesGoals, runDevices},
	{"wire", "VM-to-VM WRITE goodput and latency across two hosts vs raw batched UDP", wireMethod, false, wireGoals, runWire},
	{"loss", "VM-to-VM goodput under loss, selective repeat vs go-back-N (needs root)", lossMethod, true, lossGoals, runLoss},
	{"spray", "leaf-spine permutation goodput per path selector vs single path (needs root)", sprayMethod, true, sprayGoals, runSpray},
	{"failover", "goodput through a black-holed spine, sprayers vs single path (needs root)", failoverMethod, true, failoverGoals, runFailover},
	{"realvm", "real VMs (QEMU, TCG) vs simulated guests: device ready, WRITE bandwidth, latency (needs root and the real-VM harness)", realvmMethod, true, realvmGoals, runRealVM},
	{"rdmatools", "perftest between real VMs (TCG): vStellar's kernel driver vs soft-RoCE (rxe) on virtio-net (needs root and the real-VM harness)", rdmatoolsMethod, true, rdmatoolsGoals, runRDMATools},
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
	// count is the devices suite's number of devices (0: its default).
	count int
	// procs, if set, runs the suite once per GOMAXPROCS value (procs.go).
	procs []int
	// pairs, if set, adds the verbs suite's scaling table: K VM pairs
	// writing at once, for each K (scale.go).
	pairs []int
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: vstellar-bench <suite> [--quick] [--json] [--procs 2,4,8]")
	fmt.Fprintln(w, "       vstellar-bench report [--quick] [--out docs/benchmarks.md] [--plots docs/plots] [--suites a,b]")
	for _, s := range suites {
		fmt.Fprintf(w, "  %-9s %s\n", s.name, s.about)
	}
	fmt.Fprintf(w, "  %-9s %s\n", "report", "run every suite and write the results page and its plots")
}

func findSuite(name string) *suite {
	for i := range suites {
		if suites[i].name == name {
			return &suites[i]
		}
	}
	return nil
}

// profiles are where a run writes its CPU profile and its execution
// trace (empty: none).
type profiles struct{ cpu, trace string }

// suiteFlags parses a suite's flags into o; the report command parses
// the same flags for each suite it runs, so that the command it prints
// is the one it ran.
func suiteFlags(s *suite, args []string, stderr io.Writer) (o options, prof profiles, err error) {
	fs := flag.NewFlagSet("vstellar-bench "+s.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.quick, "quick", false, "fewer sizes and iterations (a smoke run)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object of numbers instead of a table")
	fs.StringVar(&o.devices, "devices", "", "translate: comma-separated device counts (default 1,16,256,1024; --quick 1,256)")
	fs.StringVar(&o.mem, "mem", "", "startup: comma-separated guest memory sizes (default 1G,4G,16G; --quick 4G)")
	fs.Func("count", fmt.Sprintf("devices: number of devices (default %d; --quick %d)", devicesDefault, devicesQuick), func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > devicesMax {
			return fmt.Errorf("--count %s: not a device count in 1..%d", v, devicesMax)
		}
		o.count = n
		return nil
	})
	fs.Func("procs", "verbs, wire, spray: run the suite at each of these comma-separated GOMAXPROCS values (2,4,8) and print one table", func(v string) error {
		if !slices.Contains(procsSuites, s.name) {
			return fmt.Errorf("--procs: not for the %s suite (only %s)", s.name, strings.Join(procsSuites, ", "))
		}
		p, err := parseProcs(v)
		o.procs = p
		return err
	})
	fs.Func("pairs", fmt.Sprintf("verbs, wire: also write from K VM pairs at once, for each of these comma-separated K (1,2,4; at most %d)", maxPairs), func(v string) error {
		if s.name != "verbs" && s.name != "wire" {
			return fmt.Errorf("--pairs: not for the %s suite (only verbs, wire)", s.name)
		}
		p, err := parseCounts("pairs", "number of VM pairs", v, maxPairs)
		o.pairs = p
		return err
	})
	fs.StringVar(&prof.cpu, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.StringVar(&prof.trace, "trace", "", "write an execution trace of the run to this file (go tool trace)")
	if err := fs.Parse(args); err != nil {
		return o, profiles{}, err
	}
	if fs.NArg() != 0 {
		err := fmt.Errorf("unexpected arguments %q", fs.Args())
		fmt.Fprintf(stderr, "vstellar-bench: %v\n", err)
		return o, profiles{}, err
	}
	return o, prof, nil
}

// startProfile starts a CPU profile into path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// startTrace starts an execution trace into path; stop ends it.
func startTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	return func() { trace.Stop(); f.Close() }, nil
}

// runSuite runs s into r and, with --procs, the suite again at each
// GOMAXPROCS (procs.go).
func runSuite(ctx context.Context, s *suite, o options, r *report, stderr io.Writer) error {
	if err := s.run(ctx, o, r); err != nil {
		return err
	}
	if o.procs != nil {
		if err := addProcs(ctx, s, o, r, stderr); err != nil {
			return fmt.Errorf("--procs: %w", err)
		}
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "report" {
		return runReport(args[1:], stdout, stderr, reportEnv{available: netlab.Available})
	}
	s := findSuite(args[0])
	if s == nil {
		fmt.Fprintf(stderr, "vstellar-bench: unknown suite %q\n", args[0])
		usage(stderr)
		return 2
	}
	o, prof, err := suiteFlags(s, args[1:], stderr)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for _, p := range []struct {
		path  string
		start func(string) (func(), error)
	}{{prof.cpu, startProfile}, {prof.trace, startTrace}} {
		if p.path == "" {
			continue
		}
		stopProfile, err := p.start(p.path)
		if err != nil {
			fmt.Fprintf(stderr, "vstellar-bench: %v\n", err)
			return 1
		}
		defer stopProfile()
	}
	r := &report{}
	runErr := runSuite(ctx, s, o, r, stderr)
	// A partial failure prints what was measured, then fails.
	var partial *partialError
	if runErr != nil && !errors.As(runErr, &partial) {
		fmt.Fprintf(stderr, "vstellar-bench %s: %v\n", s.name, runErr)
		if errors.Is(runErr, errUsage) {
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
	} else {
		r.print(stdout)
		printVerdicts(stdout, checkGoals(s.goals, r.summary))
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "vstellar-bench %s: %v\n", s.name, runErr)
		return 1
	}
	return 0
}
