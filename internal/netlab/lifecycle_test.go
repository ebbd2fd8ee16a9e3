//go:build linux

package netlab

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// rootLinks names the links of the caller's namespace, to prove beds never
// create devices there.
func rootLinks(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return names
}

func TestCloseRemovesEverything(t *testing.T) {
	requireNetlab(t)
	const prefix = testPrefix + "close"
	linksBefore := rootLinks(t)
	bed, err := TwoHost(t.Context(), Options{Prefix: prefix, Rate: 10_000_000, Loss: 0.05, Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := bed.Host("a")
	var lines []chan struct{} // closed when a delay line's thread has ended
	for _, h := range bed.Hosts() {
		if h.port.delay == nil || h.port.delay.done == nil {
			t.Fatalf("%s: no running delay line", h.Name())
		}
		lines = append(lines, h.port.delay.done)
	}
	names := []string{a.Namespace(), bed.Host("b").Namespace()}
	if got := namedWith(t, prefix); !slices.Equal(got, sortedCopy(names)) {
		t.Fatalf("live bed namespaces %v, want %v", got, names)
	}
	// A netlink socket opened inside a keeps that namespace alive past
	// Close, so we can look at what Close left in it: the veth, its
	// qdiscs and filters must be gone, not merely unreachable.
	var inside *netlink.Handle
	if err := a.Do(func() error {
		var err error
		inside, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if l, err := inside.LinkByName(a.Iface()); err != nil {
		t.Fatal(err)
	} else if qs, err := inside.QdiscList(l); err != nil || len(qs) < 2 {
		t.Fatalf("expected tbf and clsact on %s before Close, got %v (%v)", a.Iface(), qs, err)
	}
	if _, err := inside.LinkByName(delayTapName); err != nil {
		t.Fatalf("delay line tap missing before Close: %v", err)
	}

	if err := bed.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := namedWith(t, prefix); len(left) > 0 {
		t.Fatalf("Close left namespaces %v", left)
	}
	for _, n := range names {
		if h, err := netns.GetFromName(n); err == nil {
			h.Close()
			t.Fatalf("namespace %s still openable after Close", n)
		}
	}
	links, err := inside.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			t.Fatalf("Close left link %s (%s) in host a", l.Attrs().Name, l.Type())
		}
	}
	if got := rootLinks(t); !slices.Equal(got, linksBefore) {
		t.Fatalf("root namespace links changed: %v -> %v", linksBefore, got)
	}
	for i, done := range lines {
		select {
		case <-done:
		default:
			t.Fatalf("delay line thread %d still running after Close", i)
		}
	}

	// Idempotent, and a closed bed refuses further use.
	if err := bed.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	if err := bed.SetLoss(a, 0.5); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetLoss after Close: %v, want ErrClosed", err)
	}
	if err := bed.SetLinkUp(t.Context(), a, false); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetLinkUp after Close: %v, want ErrClosed", err)
	}
	if err := bed.SetDelay(a, time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetDelay after Close: %v, want ErrClosed", err)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func TestBuildFailureLeavesNothing(t *testing.T) {
	requireNetlab(t)
	const prefix = testPrefix + "fail"
	opts := Options{Prefix: prefix, Rate: 10_000_000, Loss: 0.05, Delay: time.Millisecond}

	// Record the construction steps, and settle lazily opened fds.
	var steps []string
	o := opts
	o.testHook = func(s string) error { steps = append(steps, s); return nil }
	bed, err := TwoHost(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("steps: %v", steps)
	if len(steps) < 8 {
		t.Fatalf("only %d steps recorded: %v", len(steps), steps)
	}

	checkFailedBuilds(t, prefix, steps, func(ctx context.Context, hook func(string) error) (bool, error) {
		o := opts
		o.testHook = hook
		bed, err := TwoHost(ctx, o)
		return bed != nil, err
	})
}

func TestCleanupRemovesCrashedBed(t *testing.T) {
	requireNetlab(t)
	const prefix = testPrefix + "crash"
	// A live bed of this process with the same prefix must survive.
	live := newBed(t, Options{Prefix: prefix})

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+prefix)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || !exitErr.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("crash child: %v (want killed by signal); stderr: %s", err, stderr.String())
	}
	crashed := strings.Fields(string(out))
	if len(crashed) != 2 {
		t.Fatalf("crash child printed %q", out)
	}
	present := namedWith(t, prefix)
	for _, n := range crashed {
		if !slices.Contains(present, n) {
			t.Fatalf("crashed bed namespace %s missing before Cleanup (have %v)", n, present)
		}
	}

	removed, err := Cleanup(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sortedCopy(removed), sortedCopy(crashed)) {
		t.Fatalf("Cleanup removed %v, want exactly the crashed %v", removed, crashed)
	}
	want := sortedCopy([]string{live.Host("a").Namespace(), live.Host("b").Namespace()})
	if got := namedWith(t, prefix); !slices.Equal(got, want) {
		t.Fatalf("after Cleanup: %v, want only the live bed %v", got, want)
	}
	// The live bed still works.
	ca, cb := listenUDP(t, live.Host("a"), 4700), listenUDP(t, live.Host("b"), 4700)
	warmUp(t, ca, cb)
	// Nothing more to remove.
	if again, err := Cleanup(prefix); err != nil || len(again) > 0 {
		t.Fatalf("second Cleanup removed %v (%v)", again, err)
	}
}

func TestBadOptions(t *testing.T) {
	requireNetlab(t)
	const prefix = testPrefix + "bad"
	for name, o := range map[string]Options{
		"prefix slash":    {Prefix: "a/b"},
		"prefix dot":      {Prefix: ".."},
		"prefix long":     {Prefix: strings.Repeat("x", 40)},
		"ipv6 subnet":     {Subnet: netip.MustParsePrefix("2001:db8::/64")},
		"subnet /32":      {Subnet: netip.MustParsePrefix("198.18.0.1/32")},
		"mtu small":       {MTU: 50},
		"mtu big":         {MTU: 70000},
		"rate tiny":       {Rate: 1000},
		"loss >1":         {Loss: 1.5},
		"loss <0":         {Loss: -0.1},
		"loss NaN":        {Loss: math.NaN()},
		"correlation 1":   {Loss: 0.1, LossCorrelation: 1},
		"negative delay":  {Delay: -time.Second},
		"absurd delay":    {Delay: 2 * time.Hour},
		"delay over max":  {Delay: MaxDelay + 1},
		"correlation NaN": {LossCorrelation: math.NaN()},
	} {
		if o.Prefix == "" {
			o.Prefix = prefix
		}
		bed, err := TwoHost(t.Context(), o)
		if err == nil || bed != nil {
			t.Errorf("%s: accepted (%v)", name, err)
			if bed != nil {
				bed.Close()
			}
		}
	}
	if left := namedWith(t, prefix); len(left) > 0 {
		t.Fatalf("rejected options left %v", left)
	}

	// Bad run-time input is refused and changes nothing.
	bed := newBed(t, Options{Prefix: prefix})
	other := newBed(t, Options{Prefix: prefix})
	a := bed.Host("a")
	for name, err := range map[string]error{
		"loss 2":          bed.SetLoss(a, 2),
		"loss NaN":        bed.SetLoss(a, math.NaN()),
		"rate tiny":       bed.SetRate(a, 10),
		"foreign host":    bed.SetLinkUp(t.Context(), other.Host("a"), false),
		"nil host":        bed.SetRate(nil, 1_000_000),
		"nil host (loss)": bed.SetLoss(nil, 0.1),
		"delay negative":  bed.SetDelay(a, -time.Nanosecond),
		"delay too long":  bed.SetDelay(a, 2*MaxDelay),
		"foreign (delay)": bed.SetDelay(other.Host("b"), time.Millisecond),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ca, cb := listenUDP(t, a, 4800), listenUDP(t, bed.Host("b"), 4800)
	warmUp(t, ca, cb)
	if got := sendSeq(t, ca, cb, 500); len(got) != 500 {
		t.Errorf("after rejected changes a->b delivered %d of 500", len(got))
	}
	oa, ob := listenUDP(t, other.Host("a"), 4800), listenUDP(t, other.Host("b"), 4800)
	warmUp(t, oa, ob)
}

func TestAvailable(t *testing.T) {
	err := Available()
	if os.Getenv("CI") == "true" && err != nil {
		t.Fatalf("Available under CI=true: %v", err)
	}
	if err != nil {
		t.Skipf("skipping: not available here: %v", err)
	}
	// The probe left no namespace, link or fd behind.
	fds, links := openFDs(t), rootLinks(t)
	for range 3 {
		if err := Available(); err != nil {
			t.Fatal(err)
		}
	}
	if openFDs(t) != fds || !slices.Equal(rootLinks(t), links) {
		t.Fatal("Available leaked an fd or a link")
	}
}

// checkFailedBuilds injects a failure after each of steps in turn (build
// hands hook to its constructor and reports whether it returned a
// result) and checks that every build fails with it and leaves no
// namespace, open fd or root link behind; then that a build with a
// cancelled context fails the same way.
func checkFailedBuilds(t *testing.T, prefix string, steps []string, build func(ctx context.Context, hook func(string) error) (built bool, err error)) {
	t.Helper()
	fds, links := openFDs(t), rootLinks(t)
	errInjected := errors.New("injected failure")
	for _, at := range steps {
		built, err := build(t.Context(), func(s string) error {
			if s == at {
				return errInjected
			}
			return nil
		})
		if !errors.Is(err, errInjected) || built {
			t.Fatalf("failure after %q: built %v, err %v", at, built, err)
		}
		if left := namedWith(t, prefix); len(left) > 0 {
			t.Fatalf("failure after %q left namespaces %v", at, left)
		}
		if n := openFDs(t); n != fds {
			t.Fatalf("failure after %q: %d open fds, was %d (leaked handle, socket or BPF map)", at, n, fds)
		}
		if got := rootLinks(t); !slices.Equal(got, links) {
			t.Fatalf("failure after %q changed root links %v -> %v", at, links, got)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if built, err := build(ctx, nil); !errors.Is(err, context.Canceled) || built {
		t.Fatalf("cancelled context: built %v, err %v", built, err)
	}
	if left := namedWith(t, prefix); len(left) > 0 {
		t.Fatalf("cancelled build left %v", left)
	}
}
