package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vstellar/vstellar/api"
)

// execEnv makes the test binary run vstellard's main instead of the tests,
// so that a test can start the real daemon as a process of its own and
// watch its file descriptors and mappings from outside.
const execEnv = "VSTELLARD_TEST_EXEC"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// daemonProcess is a vstellard started by startDaemon.
type daemonProcess struct {
	cmd     *exec.Cmd
	client  *api.Client
	metrics string // http://addr/metrics
	scraper *http.Client
	stderr  *syncBuilder
}

// hangUp closes the test's idle connections to the daemon, whose
// goroutines and fds are not the daemon's to free.
func (p *daemonProcess) hangUp() {
	p.client.Close()
	p.scraper.CloseIdleConnections()
}

func startDaemon(t *testing.T, args ...string) *daemonProcess {
	t.Helper()
	dir := shortDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for metrics
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &daemonProcess{stderr: &syncBuilder{}, metrics: "http://" + addr + "/metrics", scraper: &http.Client{}}
	p.cmd = exec.Command(os.Args[0], append([]string{"--run-dir", dir, "--metrics-listen", addr, "--log-level", "warn"}, args...)...)
	p.cmd.Env = append(os.Environ(), execEnv+"=1")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	p.client = api.NewClient(filepath.Join(dir, api.APISocketName))
	t.Cleanup(p.client.Close)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := p.client.Health(context.Background()); err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("vstellard not up; stderr:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape reads the daemon's metrics, by name (series without labels, or
// the sum over the series of a labelled one).
func (p *daemonProcess) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := p.scraper.Get(p.metrics)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Gauge != nil:
				out[name] += m.GetGauge().GetValue()
			case m.Counter != nil:
				out[name] += m.GetCounter().GetValue()
			case m.Untyped != nil:
				out[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// usage is what a process holds: open fds, memory mappings, and the
// mappings of memfds among them (doorbell regions, guest memory).
type usage struct{ fds, maps, memfdMaps int }

func (p *daemonProcess) usage(t *testing.T) usage {
	t.Helper()
	pid := p.cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := usage{fds: len(fds)}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		u.maps++
		if strings.Contains(sc.Text(), "/memfd:") {
			u.memfdMaps++
		}
	}
	return u
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns
// the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestThousandDevices starts vstellard as a process, creates 1000 devices
// through the management API concurrently, checks the device gauge and the
// process's fds and mappings, destroys them all concurrently while
// scraping, and checks that nothing leaked: fds, mappings and goroutines
// return to what the empty daemon had.
func TestThousandDevices(t *testing.T) {
	const count = 1000
	p := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	base := p.scrape(t)
	if base["vstellard_devices"] != 0 {
		t.Fatalf("empty daemon: %v devices", base["vstellard_devices"])
	}
	// Let the daemon's own start-up settle (HTTP connections, runtime
	// threads) before the baseline.
	p.hangUp()
	time.Sleep(100 * time.Millisecond)
	before := p.usage(t)
	name := func(i int) string { return "vm" + strconv.Itoa(i) }

	t0 := time.Now()
	if err := parallel(count, 16, func(i int) error {
		_, err := p.client.CreateDevice(ctx, api.DeviceSpec{Name: name(i)})
		return err
	}); err != nil {
		t.Fatalf("create: %v\nstderr:\n%s", err, p.stderr.String())
	}
	created := time.Since(t0)

	full := p.scrape(t)
	if full["vstellard_devices"] != count {
		t.Fatalf("vstellard_devices = %v after creating %d", full["vstellard_devices"], count)
	}
	if list, err := p.client.Devices(ctx); err != nil || len(list) != count {
		t.Fatalf("list: %d devices, %v", len(list), err)
	}
	at := p.usage(t)
	t.Logf("%d devices created in %v (16 clients): %d fds (+%d), %d memfd mappings (+%d), %v goroutines (+%v), RSS %.0f MiB",
		count, created.Round(time.Millisecond), at.fds, at.fds-before.fds, at.memfdMaps, at.memfdMaps-before.memfdMaps,
		full["go_goroutines"], full["go_goroutines"]-base["go_goroutines"], full["process_resident_memory_bytes"]/(1<<20))
	if at.fds < before.fds+count || at.memfdMaps < before.memfdMaps+count {
		// Each device holds at least its socket and its doorbell
		// mapping; fewer means the measurement is broken.
		t.Fatalf("usage with %d devices %+v, before %+v", count, at, before)
	}

	// Destroy everything, scraping meanwhile: each scrape must succeed
	// and see fewer and fewer devices.
	stop := make(chan struct{})
	var scrapes []float64
	var swg sync.WaitGroup
	swg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := p.scraper.Get(p.metrics)
			if err != nil {
				t.Errorf("scrape during destruction: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "vstellard_devices "); ok {
					f, _ := strconv.ParseFloat(v, 64)
					scrapes = append(scrapes, f)
				}
			}
		}
	})
	t0 = time.Now()
	err := parallel(count, 16, func(i int) error { return p.client.DestroyDevice(ctx, name(i)) })
	close(stop)
	swg.Wait()
	if err != nil {
		t.Fatalf("destroy: %v", err)
	}
	t.Logf("destroyed in %v; %d scrapes meanwhile", time.Since(t0).Round(time.Millisecond), len(scrapes))
	for i := 1; i < len(scrapes); i++ {
		if scrapes[i] > scrapes[i-1] {
			t.Fatalf("device gauge went up during destruction: %v", scrapes)
		}
	}

	// Goroutines and fds end asynchronously (connections closing);
	// give them a moment.
	var after usage
	var end map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		end = p.scrape(t)
		p.hangUp()
		after = p.usage(t)
		clean := after.fds <= before.fds && after.memfdMaps <= before.memfdMaps && end["go_goroutines"] <= base["go_goroutines"]+2
		if clean || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if end["vstellard_devices"] != 0 {
		t.Errorf("vstellard_devices = %v after destroying all", end["vstellard_devices"])
	}
	// Mappings: every memfd mapping must be gone. Anonymous ones are
	// the Go heap's (and, under the race detector, its shadow memory's),
	// which grow with use; a leaked device would leave at least one
	// mapping each, a thousand in all.
	anonSlack := 64
	if raceEnabled {
		anonSlack = 1 << 20 // the race runtime maps shadow memory as it likes
	}
	if after.fds > before.fds || after.memfdMaps > before.memfdMaps || after.maps > before.maps+anonSlack ||
		end["go_goroutines"] > base["go_goroutines"]+2 {
		t.Fatalf("leak after destroying %d devices: fds %d -> %d, memfd mappings %d -> %d, mappings %d -> %d, goroutines %v -> %v",
			count, before.fds, after.fds, before.memfdMaps, after.memfdMaps, before.maps, after.maps,
			base["go_goroutines"], end["go_goroutines"])
	}
}
