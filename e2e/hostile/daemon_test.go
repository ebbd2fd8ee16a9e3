package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/vstellar/vstellar/internal/daemonproc"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The daemon under attack: the real vstellard binary as a separate
// process (the approach of e2e/daemon_test.go), with the attacker's device
// and a bystander's.

const (
	victim    = "victim"
	bystander = "bystander"
)

// victimLimits keep the exhaustion cases short: every table fills in a
// few hundred commands.
var victimLimits = map[string]uint32{"max_pd": 64, "max_cq": 16, "max_qp": 16, "max_mr": 64, "max_ah": 16, "max_srq": 8}

type daemonProc struct {
	*daemonproc.Proc
	runDir string
}

func startDaemon(t *testing.T) *daemonProc {
	t.Helper()
	// Unix socket paths are short; keep the run dir near the root.
	runDir, err := os.MkdirTemp("", "vshostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	cfg, err := json.Marshal(map[string]any{
		"devices": []map[string]any{{"name": victim, "limits": victimLimits}, {"name": bystander}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(runDir, "config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfgPath, "--run-dir", runDir, "--log-format", "json", "--log-level", "info"}
	p := &daemonProc{Proc: daemonproc.Start(t, args...), runDir: runDir}
	c := apiClient(p.apiSocket())
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := deviceCount(c)
		if err == nil && n == 2 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("vstellard not ready: %v\n%s", err, p.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apiClient speaks HTTP to the management API's unix socket.
func apiClient(socket string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		// No keep-alive: an idle connection of ours would count against
		// the daemon's descriptor baseline.
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}
}

// deviceCount is the length of GET /v1/devices.
func deviceCount(c *http.Client) (int, error) {
	resp, err := c.Get("http://vstellard/v1/devices")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list struct {
		Devices []json.RawMessage `json:"devices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, fmt.Errorf("GET /v1/devices: %s: %w", resp.Status, err)
	}
	return len(list.Devices), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (p *daemonProc) socket(name string) string { return filepath.Join(p.runDir, name+".sock") }

func (p *daemonProc) apiSocket() string { return filepath.Join(p.runDir, "vstellard.sock") }

// exitErr is non-nil once the process has exited.
func (p *daemonProc) exitErr() error {
	select {
	case err := <-p.Exited:
		p.Exited <- err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return err
	default:
		return nil
	}
}

func (p *daemonProc) pid() int { return p.Cmd.Process.Pid }

// fdCount is the number of open descriptors of the daemon.
func (p *daemonProc) fdCount() (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid()))
	return len(ents), err
}

// rss is the daemon's resident set in bytes (VmRSS).
func (p *daemonProc) rss() (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// crashLines picks the Go runtime's crash report out of the daemon's
// output: the fatal error and the first goroutine's stack.
func crashLines(logs string) string {
	i := strings.Index(logs, "fatal error")
	if i < 0 {
		if i = strings.Index(logs, "panic:"); i < 0 {
			return "(no crash report in the output)"
		}
	}
	return tail(logs[i:min(len(logs), i+4096)], 4096)
}
