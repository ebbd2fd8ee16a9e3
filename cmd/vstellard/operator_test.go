package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/testkit/hosttest"
)

// TestRunConfigErrorsExitTwo: a configuration a restart cannot fix, a
// value out of range included, exits 2 with one line on stderr.
func TestRunConfigErrorsExitTwo(t *testing.T) {
	dir := shortDir(t)
	cfg := filepath.Join(dir, "c.json")
	for _, tc := range []struct{ file, want string }{
		{`{"run_dir": "` + dir + `", "devices": [{"name": "x7", "limits": {"max_qp": 999999}}]}`,
			cfg + `:1:` + "%d" + `: devices[0].limits.max_qp: 999999 is out of range (at most 262144)`},
		{`{"run_dir": "` + dir + `", "devices": [{"name": "x7", "limits": {"max_cq": 16777216, "max_qp": 16777216}}]}`,
			"max_cq: 16777216 is out of range (at most 262144); max_qp: 16777216 is out of range"},
		{`{"run_dir": "` + dir + `", "pin_budget_bytes": 1}`, "pin_budget_bytes: 1 is below one pinning chunk"},
	} {
		if err := os.WriteFile(cfg, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if strings.Contains(want, "%d") {
			want = strings.Replace(want, "%d", strconv.Itoa(strings.Index(tc.file, "999999")+1), 1)
		}
		var errOut strings.Builder
		code := run([]string{"--config", cfg}, &strings.Builder{}, &errOut)
		if code != exitConfig || !strings.Contains(errOut.String(), want) || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("exit %d, stderr %q; want %d and one line with %q", code, errOut.String(), exitConfig, want)
		}
	}
	var errOut strings.Builder
	if code := run([]string{"--pin-budget", "10G", "--no-such-flag"}, &strings.Builder{}, &errOut); code != exitConfig ||
		errOut.String() != "vstellard: flag provided but not defined: -no-such-flag (vstellard -h lists the flags)\n" {
		t.Errorf("unknown flag: %d %q", code, errOut.String())
	}
}

// TestUnitDoesNotRestartConfigErrors: the shipped unit restarts run-time
// failures (1) but not configuration errors (2).
func TestUnitDoesNotRestartConfigErrors(t *testing.T) {
	b, err := os.ReadFile("../../dist/vstellard.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys[k] = v
		}
	}
	if keys["Restart"] != "on-failure" || keys["RestartPreventExitStatus"] != strconv.Itoa(exitConfig) {
		t.Fatalf("Restart=%q RestartPreventExitStatus=%q, want on-failure and %d", keys["Restart"], keys["RestartPreventExitStatus"], exitConfig)
	}
}

// lineCounter counts log records by message, at every level.
type lineCounter struct {
	mu sync.Mutex
	n  map[string]int
	// features holds the "features" attribute of "device active" lines.
	features []string
}

func (c *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *lineCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *lineCounter) WithGroup(string) slog.Handler            { return c }
func (c *lineCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r.Message]++
	if r.Message == "device active" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "features" {
				c.features = append(c.features, a.Value.String())
			}
			return true
		})
	}
	return nil
}

// TestOneDeviceActiveLinePerActivation: an activation logs "device
// active" once, its features by name.
func TestOneDeviceActiveLinePerActivation(t *testing.T) {
	lc := &lineCounter{n: map[string]int{}}
	ctx, h := hosttest.Start(t, 30*time.Second, hostsim.Options{Log: slog.New(lc)})
	if _, err := h.AddVM(ctx, "vm0", hostsim.VMOptions{MemSize: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.n["device active"] != 1 || len(lc.features) != 1 || strings.Trim(lc.features[0], "0123456789") == "" {
		t.Fatalf("%d device active lines, features %q; want one, by name", lc.n["device active"], lc.features)
	}
}
