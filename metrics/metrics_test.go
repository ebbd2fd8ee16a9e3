package metrics_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/testkit/hosttest"
	"github.com/vstellar/vstellar/metrics"
)

// families gathers reg into a map by name.
func families(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value is the value of the series of family name whose labels include
// want (label=value pairs); it fails if there is none.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		}
		t.Fatalf("%s: type %v", name, mf.GetType())
	}
	t.Fatalf("no series of %s with %v", name, want)
	return 0
}

// TestMetricsAfterTraffic: the collector's metrics are lint-clean, have
// the documented types, and follow what a guest does: a QP and an MR, a
// 1 MiB WRITE between two VMs, the control commands it took.
func TestMetricsAfterTraffic(t *testing.T) {
	ctx, h := hosttest.Start(t, 30*time.Second, hostsim.Options{})
	reg := metrics.Registry(h.Manager())
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Fatalf("lint of an empty daemon: %v %+v", err, problems)
	}
	if got := value(t, families(t, reg), "vstellard_devices"); got != 0 {
		t.Fatalf("devices %v", got)
	}

	const n = 1 << 20
	if _, _, err := hostsim.WriteAcross(ctx, h, h, [2]string{"ma", "mb"}, n); err != nil {
		t.Fatal(err)
	}

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	fams := families(t, reg)
	for name, typ := range map[string]dto.MetricType{
		"vstellard_devices":                          dto.MetricType_GAUGE,
		"vstellard_qps":                              dto.MetricType_GAUGE,
		"vstellard_mrs":                              dto.MetricType_GAUGE,
		"vstellard_pinned_bytes":                     dto.MetricType_GAUGE,
		"vstellard_host_pinned_bytes":                dto.MetricType_GAUGE,
		"vstellard_pin_duration_seconds":             dto.MetricType_HISTOGRAM,
		"vstellard_translation_misses_total":         dto.MetricType_COUNTER,
		"vstellard_control_command_duration_seconds": dto.MetricType_HISTOGRAM,
		"vstellard_sent_bytes_total":                 dto.MetricType_COUNTER,
		"vstellard_received_bytes_total":             dto.MetricType_COUNTER,
		"vstellard_doorbell_wakeups_total":           dto.MetricType_COUNTER,
		"vstellard_data_path_busy_seconds_total":     dto.MetricType_COUNTER,
		"vstellard_device_info":                      dto.MetricType_GAUGE,
		"vstellard_device_connected":                 dto.MetricType_GAUGE,
		"go_goroutines":                              dto.MetricType_GAUGE,
		"process_open_fds":                           dto.MetricType_GAUGE,
	} {
		mf, ok := fams[name]
		if !ok || mf.GetType() != typ {
			t.Errorf("%s: present %v, type %v, want %v", name, ok, mf.GetType(), typ)
		}
	}
	if t.Failed() {
		return
	}
	checks := []struct {
		name   string
		labels []string
		ok     func(float64) bool
		want   string
	}{
		{"vstellard_devices", nil, func(v float64) bool { return v == 2 }, "2"},
		{"vstellard_qps", []string{"device", "ma"}, func(v float64) bool { return v == 1 }, "1"},
		{"vstellard_mrs", []string{"device", "mb"}, func(v float64) bool { return v == 1 }, "1"},
		{"vstellard_sent_bytes_total", []string{"device", "ma"}, func(v float64) bool { return v >= n }, ">= 1 MiB"},
		{"vstellard_data_path_busy_seconds_total", []string{"device", "ma"}, func(v float64) bool { return v > 0 }, "> 0"},
		{"vstellard_received_bytes_total", []string{"device", "mb"}, func(v float64) bool { return v >= n }, ">= 1 MiB"},
		{"vstellard_pinned_bytes", []string{"device", "ma"}, func(v float64) bool { return v > 0 }, "> 0"},
		{"vstellard_device_connected", []string{"device", "mb"}, func(v float64) bool { return v == 1 }, "1"},
		{"vstellard_control_command_duration_seconds", []string{"opcode", "create_qp"}, func(v float64) bool { return v == 2 }, "2 observations"},
		{"vstellard_control_command_duration_seconds", []string{"opcode", "reg_mr"}, func(v float64) bool { return v == 2 }, "2 observations"},
		{"vstellard_pin_duration_seconds", nil, func(v float64) bool { return v > 0 }, "> 0 observations"},
	}
	for _, c := range checks {
		if v := value(t, fams, c.name, c.labels...); !c.ok(v) {
			t.Errorf("%s%v = %v, want %s", c.name, c.labels, v, c.want)
		}
	}
}

// TestScrapeDuringMassDestroy: scrapes while devices are destroyed
// concurrently all succeed, lint-clean, each seeing a device count that
// only goes down, and the last sees none.
func TestScrapeDuringMassDestroy(t *testing.T) {
	ctx, h := hosttest.Start(t, 60*time.Second, hostsim.Options{})
	const count = 60
	c := h.Client()
	var names []string
	for i := range count {
		name := fmt.Sprintf("d%03d", i)
		if i%4 == 0 {
			// Some with a VM attached, their models live.
			if _, err := h.AddVM(ctx, name, hostsim.VMOptions{MemSize: 16 << 20}); err != nil {
				t.Fatal(err)
			}
		} else if _, err := h.CreateDevice(ctx, name, hostsim.VMOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	reg := metrics.Registry(h.Manager())
	done := make(chan struct{})
	var wg sync.WaitGroup
	var seen []float64
	var scrapeErr error
	wg.Go(func() {
		for {
			mfs, err := reg.Gather()
			if err != nil {
				scrapeErr = err
				return
			}
			for _, mf := range mfs {
				if mf.GetName() == "vstellard_devices" {
					seen = append(seen, mf.GetMetric()[0].GetGauge().GetValue())
				}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	var dwg sync.WaitGroup
	for _, name := range names {
		dwg.Go(func() {
			if err := c.DestroyDevice(ctx, name); err != nil && !strings.Contains(err.Error(), "not found") {
				t.Errorf("destroy %s: %v", name, err)
			}
		})
	}
	dwg.Wait()
	close(done)
	wg.Wait()
	if scrapeErr != nil {
		t.Fatalf("scrape during destruction: %v", scrapeErr)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] > seen[i-1] {
			t.Fatalf("device count went up during destruction: %v", seen)
		}
	}
	if got := value(t, families(t, reg), "vstellard_devices"); got != 0 {
		t.Fatalf("after destroying all: %v devices", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	t.Logf("%d scrapes during the destruction of %d devices", len(seen), count)
}

// TestDataThreadMetrics: a dedicated data-path thread (on CPU 0, which
// any host has) reports its engines and the time it polled them.
func TestDataThreadMetrics(t *testing.T) {
	if p := runtime.GOMAXPROCS(0); p < 3 {
		// One thread and the two processors it leaves (engine.Cores).
		runtime.GOMAXPROCS(3)
		t.Cleanup(func() { runtime.GOMAXPROCS(p) })
	}
	ctx, h := hosttest.Start(t, 30*time.Second, hostsim.Options{DataCores: daemon.CPUList{0}})
	reg := metrics.Registry(h.Manager())
	if _, _, err := hostsim.WriteAcross(ctx, h, h, [2]string{"ta", "tb"}, 1<<20); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	fams := families(t, reg)
	mode, threads := h.Manager().DataThreads()
	if mode != "dedicated" {
		t.Fatalf("mode %q with GOMAXPROCS %d", mode, runtime.GOMAXPROCS(0))
	}
	if got := value(t, fams, "vstellard_data_threads", "mode", mode); got != float64(len(threads)) || got < 1 {
		t.Fatalf("vstellard_data_threads{mode=%q} = %v, want %d", mode, got, len(threads))
	}
	engines, busy := 0.0, 0.0
	for i := range threads {
		engines += value(t, fams, "vstellard_data_thread_engines", "thread", fmt.Sprint(i))
		busy += value(t, fams, "vstellard_data_thread_busy_seconds_total", "thread", fmt.Sprint(i), "cpu", "0")
	}
	if engines != 2 || busy <= 0 {
		t.Fatalf("threads carry %v engines (want 2) and were busy %vs (want > 0)", engines, busy)
	}
}
