package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/realvm"
)

// The realvm suite's report from given figures: a table per QEMU saying
// accel: tcg, every figure real beside simulated with its ratio, the
// same in the summary (ratios the quotients they claim), the notes, and
// a bar per QEMU, size and kind of guest.
func TestRealVMRecord(t *testing.T) {
	pair := func(scale float64, doorbells string) pairFigures {
		d := func(v float64) time.Duration { return time.Duration(v * scale * float64(time.Millisecond)) }
		return pairFigures{
			doorbells:  doorbells,
			ready:      [2]time.Duration{d(4000), d(5000)},
			guestReady: [2]time.Duration{d(300), d(500)},
			gbps:       map[uint64]float64{64 << 10: 2 * scale, 1 << 20: 4 * scale},
			lat:        agent.PingReply{Samples: 100, P50Us: 10 * scale, P99Us: 40 * scale},
		}
	}
	figs := []qemuFigures{
		{qemu: realvm.QEMU{Name: realvm.StockQEMU, VirtioID: 21, Version: "QEMU emulator version 11.1.3"},
			real: pair(100, "shmem"), sim: pair(1, "shmem")},
		{qemu: realvm.QEMU{Name: realvm.PatchedQEMU, VirtioID: 42, Version: "QEMU emulator version 10.2.2"},
			real: pair(10, "guest-ram"), sim: pair(1, "guest-ram")},
	}
	plan := realvmPlan{rounds: 3, bwTime: time.Second, pings: 1000, warmup: 100}
	r := &report{}
	recordRealVM(r, figs, plan)

	want := map[string]float64{
		"accel_tcg":                    1,
		"stock_ready_ms":               450000, // mean of 4000 and 5000 ms, x100
		"stock_sim_ready_ms":           4500,
		"stock_ready_ms_ratio":         100,
		"stock_guest_ready_ms":         40000,
		"stock_sim_guest_ready_ms":     400,
		"stock_guest_ready_ms_ratio":   100,
		"stock_write_gbps_64k":         200,
		"stock_sim_write_gbps_64k":     2,
		"stock_write_gbps_64k_ratio":   100,
		"stock_write_gbps_1m":          400,
		"stock_sim_write_gbps_1m":      4,
		"stock_write_gbps_1m_ratio":    100,
		"stock_lat_8b_p50_us":          1000,
		"stock_sim_lat_8b_p50_us":      10,
		"stock_lat_8b_p50_us_ratio":    100,
		"stock_lat_8b_p99_us":          4000,
		"stock_sim_lat_8b_p99_us":      40,
		"stock_lat_8b_p99_us_ratio":    100,
		"patched_ready_ms_ratio":       10,
		"patched_write_gbps_1m":        40,
		"patched_write_gbps_1m_ratio":  10,
		"patched_lat_8b_p99_us_ratio":  10,
		"patched_guest_ready_ms_ratio": 10,
		"patched_sim_lat_8b_p50_us":    10,
		"patched_write_gbps_64k_ratio": 10,
		"patched_lat_8b_p50_us_ratio":  10,
		"patched_sim_guest_ready_ms":   400,
		"patched_sim_write_gbps_64k":   2,
		"patched_sim_ready_ms":         4500,
		"patched_sim_lat_8b_p99_us":    40,
		"patched_sim_write_gbps_1m":    4,
		"patched_ready_ms":             45000,
		"patched_guest_ready_ms":       4000,
		"patched_write_gbps_64k":       20,
		"patched_lat_8b_p50_us":        100,
		"patched_lat_8b_p99_us":        400,
	}
	for k, v := range want {
		if got, ok := r.summary[k]; !ok || !near(got, v) {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if len(r.summary) != len(want) {
		t.Errorf("%d summary keys, want %d: %v", len(r.summary), len(want), r.keys())
	}
	if _, err := json.Marshal(r.summary); err != nil {
		t.Fatal(err)
	}

	var b bytes.Buffer
	r.print(&b)
	out := b.String()
	for _, s := range []string{
		"qemu-11.1.3, virtio id 21, doorbells shmem, accel: tcg: two real VMs beside two simulated guests",
		"qemu-10.2.2-rdma, virtio id 42, doorbells guest-ram, accel: tcg",
		"real VM", "simulated", "real/sim",
		"device ready: VM start to agent up, ms", "device ready: guest program start to first command, ms",
		"WRITE 64 KiB, Gb/s", "WRITE 1 MiB, Gb/s", "8-byte WRITE latency p50, us", "8-byte WRITE latency p99, us",
		"accel: tcg. The real guests run under QEMU's TCG",
		"measure the emulation of the guest's CPU, not the device",
		"real VMs ready 40000 and 50000 ms after QEMU started (guest program: 3000.0 and 5000.0 ms)", // the patched QEMU's, x10
		"for 1s per round, best of 3 rounds", "1000 round trips after 100 unmeasured",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("table output lacks %q:\n%s", s, out)
		}
	}
	if len(r.tables) != 2 || len(r.tables[0].rows) != 6 {
		t.Fatalf("%d tables (first with %d rows), want 2 of 6", len(r.tables), len(r.tables[0].rows))
	}
	if row := r.tables[0].rows[2]; row[1] != "200.00" || row[2] != "2.00" || row[3] != "100" {
		t.Errorf("stock WRITE 64 KiB row %q, want 200.00, 2.00, ratio 100", row)
	}
	if len(r.figures) != 1 || !r.figures[0].bars || len(r.figures[0].categories) != 4 || len(r.figures[0].series) != 2 {
		t.Fatalf("figures %+v, want one bar chart of 4 categories and 2 series", r.figures)
	}
	if s := r.figures[0].series[0]; s.name != "real VMs (TCG)" || s.ys[1] != 400 {
		t.Errorf("first series %s %v, want the real VMs' figures", s.name, s.ys)
	}
}

// Without the harness (or without root) the suite fails at once and
// says how to prepare the harness.
func TestRealVMNoHarness(t *testing.T) {
	t.Setenv(realvm.DirEnv, t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := run([]string{"realvm", "--json"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
	if !strings.Contains(stderr.String(), "internal/realvm/prepare.sh") {
		t.Errorf("stderr %q does not name prepare.sh", stderr.String())
	}
}

// realvm --json, tiny (the stock QEMU only, short loops): real VMs
// boot, every figure is there and positive, the ratios are the
// quotients, and the data path's doorbells are the QEMU's.
func TestRealVMJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root")
		}
		t.Skip("the realvm suite needs root")
	}
	realvm.Require(t)
	out, errOut := runTiny(t, "realvm", "--json")
	t.Log(strings.TrimSpace(out))
	if errOut != "" {
		t.Errorf("stderr %q, want nothing", errOut)
	}
	num := jsonNumbers(t, out)
	if num["accel_tcg"] != 1 {
		t.Errorf("accel_tcg %v, want 1", num["accel_tcg"])
	}
	for _, f := range []string{"ready_ms", "guest_ready_ms", "write_gbps_64k", "write_gbps_1m", "lat_8b_p50_us", "lat_8b_p99_us"} {
		real, sim, ratio := "stock_"+f, "stock_sim_"+f, "stock_"+f+"_ratio"
		positive(t, num, real, sim, ratio)
		if want := num[real] / num[sim]; !near(num[ratio], want) {
			t.Errorf("%s %v, but %s / %s = %v", ratio, num[ratio], real, sim, want)
		}
	}
	// A real VM boots a kernel: seconds, where a simulated one takes
	// milliseconds.
	if num["stock_ready_ms"] < 500 || num["stock_ready_ms_ratio"] < 10 {
		t.Errorf("real VMs ready after %v ms, %v times the simulated guests'", num["stock_ready_ms"], num["stock_ready_ms_ratio"])
	}
	for k := range num {
		if strings.HasPrefix(k, "patched_") {
			t.Errorf("tiny run measured %s: it runs the stock QEMU only", k)
		}
	}
}
