package main

import (
	"strings"
	"testing"
	"time"
)

// devices --json (tiny: 20 devices, a VM on each): every key the issue
// names is there and sane, the ratios are the quotients they claim, and
// after destroying everything the process is back where the empty daemon
// left it (no fd, goroutine or memfd mapping more).
func TestDevicesJSON(t *testing.T) {
	out, errOut := runTiny(t, "devices", "--json")
	t.Log(strings.TrimSpace(out))
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	num := jsonNumbers(t, out)
	positive(t, num, "count", "vm_count", "create_p50_ms", "create_p99_ms", "destroy_p50_ms", "destroy_p99_ms",
		"rss_mb", "goroutines", "create_empty_p50_ms", "create_seq_p50_ms", "create_ratio", "creates_per_s",
		"boot_p50_ms", "rss_empty_mb", "rss_bare_mb", "create_cpu_ms")
	for _, k := range []string{"idle_cpu_pct", "idle_cpu_bare_pct", "leak", "leak_fds", "leak_goroutines", "leak_file_maps", "leak_maps"} {
		if _, ok := num[k]; !ok {
			t.Errorf("no %s in %s", k, out)
		}
	}
	if num["count"] != 20 {
		t.Errorf("count %v, want the tiny run's 20", num["count"])
	}
	// A VM on every device: 20 need about 600 fds, far below any limit.
	if num["vm_count"] != num["count"] {
		t.Errorf("vm_count %v, want a VM on each of the %v devices", num["vm_count"], num["count"])
	}
	for _, k := range []string{"create", "destroy"} {
		if num[k+"_p99_ms"] < num[k+"_p50_ms"] {
			t.Errorf("%s p99 %v below p50 %v", k, num[k+"_p99_ms"], num[k+"_p50_ms"])
		}
	}
	if want := num["create_p50_ms"] / num["create_empty_p50_ms"]; !near(num["create_ratio"], want) {
		t.Errorf("create_ratio %v, but create_p50_ms / create_empty_p50_ms = %v", num["create_ratio"], want)
	}
	// Every device runs goroutines (its accept loop; with a VM, the
	// vhost-user connection and the engine): fewer than one each means
	// the devices were not there when counted.
	if num["goroutines"] < 2*num["count"] || num["goroutines_bare"] < num["count"] {
		t.Errorf("goroutines %v with VMs, %v bare: fewer than the %v devices hold", num["goroutines"], num["goroutines_bare"], num["count"])
	}
	// A VM maps its memfd RAM and the rings the driver touched.
	if num["rss_mb"] <= num["rss_bare_mb"] {
		t.Errorf("RSS with the VMs %v MiB, not above the bare devices' %v MiB", num["rss_mb"], num["rss_bare_mb"])
	}
	if cpu := num["idle_cpu_pct"]; cpu < 0 || cpu > 200 {
		t.Errorf("idle_cpu_pct %v: not a share of two cores", cpu)
	}
	if num["leak"] != 0 || num["leak_fds"] > devLeakFDs || num["leak_goroutines"] > devLeakGoroutines || num["leak_file_maps"] > devLeakFileMaps {
		t.Errorf("after destroying every device: leak %v (fds %+v, goroutines %+v, file mappings %+v)",
			num["leak"], num["leak_fds"], num["leak_goroutines"], num["leak_file_maps"])
	}
}

// devices without --json: the three tables, the leak verdicts, the goals.
func TestDevicesTable(t *testing.T) {
	out, errOut := runTiny(t, "devices")
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	for _, want := range []string{
		"Create and destroy through the management API (unix-socket HTTP), 20 devices",
		"empty daemon, one at a time", "at 20, one at a time",
		"a VM on each, idle", "all destroyed", "file mappings",
		"goal create_p50_ms <= 10", "goal idle_cpu_pct < 2", "goal leak <= 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "LEAK") {
		t.Errorf("a leak after destroying every device:\n%s", out)
	}
}

// latencyBins groups calls by the devices present and takes each
// group's percentiles.
func TestLatencyBins(t *testing.T) {
	var calls []apiCall
	for i := range 100 {
		calls = append(calls, apiCall{lat: time.Duration(i/10+1) * time.Millisecond, present: i})
	}
	bins := latencyBins(calls, 10)
	if len(bins) != 10 {
		t.Fatalf("%d bins, want 10: %+v", len(bins), bins)
	}
	for i, b := range bins {
		want := time.Duration(i+1) * time.Millisecond
		if b.p50 != want || b.p99 != want || b.x != float64(i)*10+5 {
			t.Errorf("bin %d: %+v, want x %v, latency %v", i, b, float64(i)*10+5, want)
		}
	}
	if got := latencyBins([]apiCall{{lat: time.Millisecond}}, 10); len(got) != 1 || got[0].p50 != time.Millisecond {
		t.Errorf("one call: %+v", got)
	}
}

func near(a, b float64) bool { return a == b || (a-b)/b < 1e-9 && (b-a)/b < 1e-9 }
