//go:build linux

package netlab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLeafSpineBuildFailureLeavesNothing(t *testing.T) {
	requireNetlab(t)
	const prefix = lsPrefix + "fail"
	// Small, but with every kind of resource: shaping on both link kinds.
	opts := LeafSpineOptions{Prefix: prefix, HostsPerLeaf: 1, Spines: 2, LinkRate: 50_000_000, HostRate: 80_000_000, HashSeed: 1}

	var steps []string
	o := opts
	o.testHook = func(s string) error { steps = append(steps, s); return nil }
	f, err := LeafSpine(t.Context(), o)
	if errors.Is(err, errors.ErrUnsupported) {
		opts.HashSeed = 0 // kernel < 6.11; the rest still applies
		o.HashSeed = 0
		steps = nil
		f, err = LeafSpine(t.Context(), o)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Settle lazily opened fds (a BPF map is made by the loss filter).
	if err := f.SetLinkLoss(0, 1, 0.1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("steps: %v", steps)
	if len(steps) < 7 {
		t.Fatalf("only %d steps recorded: %v", len(steps), steps)
	}

	fds := openFDs(t)
	checkFailedBuilds(t, prefix, steps, func(ctx context.Context, hook func(string) error) (bool, error) {
		o := opts
		o.testHook = hook
		f, err := LeafSpine(ctx, o)
		return f != nil, err
	})

	// A closed fabric with a loss filter left no fd behind either.
	f, err = LeafSpine(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.SetLinkLoss(1, 0, 0.2), f.BlackHole(0, 0, true)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t); n != fds {
		t.Fatalf("closed fabric left %d open fds, was %d", n, fds)
	}
}

func TestLeafSpineBadOptions(t *testing.T) {
	requireNetlab(t)
	const prefix = lsPrefix + "bad"
	for name, o := range map[string]LeafSpineOptions{
		"prefix slash":      {Prefix: "a/b"},
		"one leaf":          {Leaves: 1},
		"too many leaves":   {Leaves: MaxLeaves + 1},
		"negative leaves":   {Leaves: -2},
		"too many hosts":    {HostsPerLeaf: MaxHostsPerLeaf + 1},
		"negative hosts":    {HostsPerLeaf: -1},
		"too many spines":   {Spines: MaxSpines + 1},
		"negative spines":   {Spines: -1},
		"mtu small":         {MTU: 50},
		"mtu big":           {MTU: 70000},
		"link rate tiny":    {LinkRate: 1000},
		"host rate tiny":    {HostRate: 10},
		"link rate huge":    {LinkRate: math.MaxUint64},
		"correlation 1":     {LossCorrelation: 1},
		"correlation NaN":   {LossCorrelation: math.NaN()},
		"correlation minus": {LossCorrelation: -0.5},
	} {
		if o.Prefix == "" {
			o.Prefix = prefix
		}
		var built []string
		o.testHook = func(s string) error { built = append(built, s); return nil }
		f, err := LeafSpine(t.Context(), o)
		if err == nil || f != nil {
			t.Errorf("%s: accepted (%v)", name, err)
			if f != nil {
				f.Close()
			}
		}
		if len(built) > 0 {
			t.Errorf("%s: rejected only after building %v", name, built)
		}
	}
	if left := namedWith(t, prefix); len(left) > 0 {
		t.Fatalf("rejected options left %v", left)
	}

	// The limits themselves are accepted: 3 leaves of 1 host, 1 spine.
	f := newFabric(t, LeafSpineOptions{Prefix: prefix, Leaves: 3, HostsPerLeaf: 1, Spines: 1})
	// Bad run-time input is refused and changes nothing.
	for name, err := range map[string]error{
		"loss 2":         f.SetLinkLoss(0, 0, 2),
		"loss NaN":       f.SetLinkLoss(0, 0, math.NaN()),
		"loss -1":        f.SetLinkLoss(0, 0, -1),
		"leaf 3":         f.SetLinkLoss(3, 0, 0.5),
		"leaf -1":        f.BlackHole(-1, 0, true),
		"spine 1":        f.BlackHole(0, 1, true),
		"spine -1 (up)":  f.SetLinkUp(t.Context(), 0, -1, false),
		"leaf 9 (up)":    f.SetLinkUp(t.Context(), 9, 0, false),
		"counters spine": func() error { _, err := f.LinkCounters(0, 1); return err }(),
		"counters leaf":  func() error { _, err := f.LeafCounters(3); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "netlab") {
			t.Errorf("%s: error %q lacks context", name, err)
		}
	}
	// Every leaf still reaches every other leaf through the one spine.
	for l := range 3 {
		for m := range 3 {
			if l != m {
				a, b := listenUDP(t, f.Host(l, 0), 5500+10*l+m), listenUDP(t, f.Host(m, 0), 5600+10*l+m)
				warmUp(t, a, b)
			}
		}
	}
}

// crashFabricEnv makes the test binary build a fabric and die without
// closing it (see TestCleanupRemovesCrashedFabric).
const crashFabricEnv = "NETLAB_TEST_CRASH_FABRIC_PREFIX"

// crashFabricChild builds a fabric with shaping and loss filters, prints
// its namespace names and kills itself so nothing gets to clean up.
func crashFabricChild(prefix string) {
	f, err := LeafSpine(context.Background(), LeafSpineOptions{Prefix: prefix, LinkRate: 50_000_000})
	if err == nil {
		err = f.SetLinkLoss(0, 1, 0.1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, n := range f.Namespaces() {
		fmt.Fprintln(w, n)
	}
	w.Flush()
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {}
}

func TestCleanupRemovesCrashedFabric(t *testing.T) {
	requireNetlab(t)
	const prefix = lsPrefix + "crash"
	live := newFabric(t, LeafSpineOptions{Prefix: prefix, Spines: 1, HostsPerLeaf: 1})

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashFabricEnv+"="+prefix)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || !exitErr.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("crash child: %v (want killed by signal); stderr: %s", err, stderr.String())
	}
	crashed := strings.Fields(string(out))
	if len(crashed) != 2+4+4 {
		t.Fatalf("crash child printed %q", out)
	}
	removed, err := Cleanup(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sortedCopy(removed), sortedCopy(crashed)) {
		t.Fatalf("Cleanup removed %v, want exactly the crashed %v", removed, crashed)
	}
	if got := namedWith(t, prefix); !slices.Equal(got, sortedCopy(live.Namespaces())) {
		t.Fatalf("after Cleanup: %v, want only the live fabric %v", got, live.Namespaces())
	}
	a, b := listenUDP(t, live.Host(0, 0), 5700), listenUDP(t, live.Host(1, 0), 5700)
	warmUp(t, a, b)
}
