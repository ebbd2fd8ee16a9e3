//go:build linux

package netlab

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestNSNameRoundTrip(t *testing.T) {
	n := nsName("netlab", 1234, "0a1b2c3d", "a")
	if n != "netlab-1234-0a1b2c3d-a" {
		t.Fatalf("name %q", n)
	}
	if pid, ok := parseNSName("netlab", n); !ok || pid != 1234 {
		t.Fatalf("parse %q: %d %v", n, pid, ok)
	}
	for _, bad := range []string{
		"netlab", "netlab-", "netlab-1234", "netlab-1234-0a1b2c3d", "netlab-1234-0a1b2c3d-",
		"netlab-x-0a1b2c3d-a", "netlab-0-0a1b2c3d-a", "netlab-01-0a1b2c3d-a", "netlab-12-zzzzzzzz-a",
		"netlab-12-0a1b2c-a", "netlabx-12-0a1b2c3d-a", "other-12-0a1b2c3d-a", "netlab-99999999999-0a1b2c3d-a",
		"netlab-test-12-0a1b2c3d-a", // another prefix that extends this one
		"netlab-+1-00000000-0", "netlab--1-0a1b2c3d-a", "netlab- 1-0a1b2c3d-a",
	} {
		if pid, ok := parseNSName("netlab", bad); ok {
			t.Errorf("parsed %q as pid %d", bad, pid)
		}
	}
}

func FuzzParseNSName(f *testing.F) {
	f.Add("netlab", "netlab-1234-0a1b2c3d-a")
	f.Add("netlab", "netlab-1-ffffffff-host-with-dashes")
	f.Add("a-b", "a-b-7-00000000-b")
	f.Add("netlab", "netlab--1-0a1b2c3d-a")
	f.Fuzz(func(t *testing.T, prefix, name string) {
		pid, ok := parseNSName(prefix, name)
		if !ok {
			return
		}
		if pid <= 0 || !strings.HasPrefix(name, prefix+"-"+strconv.Itoa(pid)+"-") {
			t.Fatalf("parse(%q, %q) = %d", prefix, name, pid)
		}
	})
}

func FuzzNSNameRoundTrip(f *testing.F) {
	f.Add("netlab", 1, "a")
	f.Add("x.y_z-", 4194304, "leaf-1")
	f.Fuzz(func(t *testing.T, prefix string, pid int, host string) {
		if validatePrefix(prefix) != nil || pid <= 0 || pid > math.MaxInt32 || host == "" {
			return
		}
		name := nsName(prefix, pid, "deadbeef", host)
		got, ok := parseNSName(prefix, name)
		if !ok || got != pid {
			t.Fatalf("round trip %q: %d %v", name, got, ok)
		}
	})
}

func TestParseCapEff(t *testing.T) {
	status := "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd:\t0\n"
	caps, err := parseCapEff(status)
	if err != nil || caps != 0x1ffffffffff {
		t.Fatalf("caps %#x %v", caps, err)
	}
	for _, bad := range []string{"", "CapEff:\n", "CapEff:\tzz\n", "CapEff:\t11111111111111111\n", "Name: x\n"} {
		if _, err := parseCapEff(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseCapEff(f *testing.F) {
	f.Add("CapEff:\t0000000000003000\n")
	f.Add("Name:\tx\nCapEff:\tffffffffffffffff\n")
	f.Add("CapEff:")
	f.Fuzz(func(t *testing.T, s string) {
		caps, err := parseCapEff(s)
		if err == nil && !strings.Contains(strings.ToLower(s), strconv.FormatUint(caps, 16)) {
			t.Fatalf("caps %#x not in %q", caps, s)
		}
	})
}

func TestLossThresholds(t *testing.T) {
	const one = 1 << 32
	for _, tc := range []struct {
		p, c             float64
		afterPass, after uint64
	}{
		{0, 0, 0, 0},
		{1, 0, one, one},
		{0.1, 0, uint64(math.Round(0.1 * one)), uint64(math.Round(0.1 * one))},
		{0.2, 0.6, uint64(math.Round(0.08 * one)), uint64(math.Round(0.68 * one))},
	} {
		p, d := lossThresholds(tc.p, tc.c)
		if diff(p, tc.afterPass) > 1 || diff(d, tc.after) > 1 {
			t.Errorf("thresholds(%v, %v) = %d, %d; want %d, %d", tc.p, tc.c, p, d, tc.afterPass, tc.after)
		}
		// The chain's stationary drop rate is p.
		pp, pd := float64(p)/one, float64(d)/one
		if stat := pp / (1 - pd + pp); tc.p > 0 && math.Abs(stat-tc.p) > 1e-9 {
			t.Errorf("stationary loss %v, want %v", stat, tc.p)
		}
	}
}

func diff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestHostAddrs(t *testing.T) {
	for subnet, want := range map[string][2]string{
		"198.18.0.0/30": {"198.18.0.1/30", "198.18.0.2/30"},
		"10.9.0.0/24":   {"10.9.0.1/24", "10.9.0.2/24"},
		"198.18.0.4/31": {"198.18.0.4/31", "198.18.0.5/31"},
	} {
		a, b := hostsOf(t, subnet)[0], hostsOf(t, subnet)[1]
		if a.String() != want[0] || b.String() != want[1] {
			t.Errorf("%s: %v %v, want %v", subnet, a, b, want)
		}
	}
}
