package main

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/internal/netlab"
)

// wire --json: the keys the issue names are positive and the ratios are
// the quotients they claim to be, the headline is the VM-to-VM figure at
// 1 MiB, and the transport-only rows are there too (on namespaces where
// the machine has them, loopback otherwise), as are the aggregates of
// --pairs.
func TestWireJSON(t *testing.T) {
	out, errOut := runTiny(t, "wire", "--json", "--pairs", "1,2")
	t.Log(strings.TrimSpace(out))
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	num := jsonNumbers(t, out)
	positive(t, num, "transport_gbps", "udp_gbps", "ratio", "lat_8b_p50_us", "udp_lat_p50_us", "lat_ratio", "transport_gbps_1m",
		"core_gbps_1m", "core_lat_p50_us", "ratio_min", "pairs_1_gbps", "pairs_2_gbps")
	if num["transport_gbps"] != num["transport_gbps_1m"] {
		t.Errorf("transport_gbps %v is not the 1 MiB VM-to-VM figure %v", num["transport_gbps"], num["transport_gbps_1m"])
	}
	// One round (tiny): the median ratio is that round's.
	if want := num["transport_gbps"] / num["udp_gbps"]; math.Abs(num["ratio"]-want) > 1e-9*want || num["ratio_min"] != num["ratio"] {
		t.Errorf("ratio %v (min %v), want %v", num["ratio"], num["ratio_min"], want)
	}
	if want := num["lat_8b_p50_us"] / num["udp_lat_p50_us"]; math.Abs(num["lat_ratio"]-want) > 1e-9*want {
		t.Errorf("lat_ratio %v, want %v", num["lat_ratio"], want)
	}
}

// loss --json needs namespaces (root): the fractions are there and sane.
func TestLossJSON(t *testing.T) {
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI runs as root: %v", err)
		}
		t.Skipf("the loss suite needs network namespaces: %v", err)
	}
	out, errOut := runTiny(t, "loss", "--json")
	t.Log(strings.TrimSpace(out))
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	num := jsonNumbers(t, out)
	positive(t, num, "sack_frac_1024", "gbn_frac_1024", "sack_gbps_0", "gbn_gbps_0")
	// A tiny run is a few hundred milliseconds on a shared machine: a
	// stall in the lossless baseline can flatter a lossy run, so only a
	// gross inversion counts as wrong here.
	for _, k := range []string{"sack_frac_1024", "gbn_frac_1024"} {
		if num[k] > 3 {
			t.Errorf("%s = %v: a lossy run far faster than the lossless one", k, num[k])
		}
	}
}
