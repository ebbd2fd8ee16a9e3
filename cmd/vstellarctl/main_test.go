package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/daemon/daemontest"
)

// startDaemon runs a Manager with fake devices in-process and returns its
// API socket.
func startDaemon(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return runDaemon(t, dir).APISocket()
}

// runDaemon runs a Manager with fake devices (one, boot0) in runDir until
// the test ends.
func runDaemon(t *testing.T, runDir string) *daemon.Manager {
	t.Helper()
	cfg := daemon.DefaultConfig()
	cfg.RunDir = runDir
	cfg.Factory = (&daemontest.Factory{}).New
	cfg.Devices = []daemon.DeviceSpec{{Name: "boot0"}}
	m, err := daemon.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-m.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready")
	}
	return m
}

func ctl(t *testing.T, sock string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	code := run(context.Background(), append([]string{"--socket", sock}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCtlVersion(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"--version"}, &out, &errOut); code != exitOK ||
		!strings.HasPrefix(out.String(), "vstellarctl "+version+" (go") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("--version: %d %q %q", code, out.String(), errOut.String())
	}
}

func TestCtlDevicesLifecycle(t *testing.T) {
	sock := startDaemon(t)

	code, out, errOut := ctl(t, sock, "devices", "create", "vm1", "--limits", `{"max_qp": 8}`, "--pin", "all", "--pin-budget", "1048576", "--tenant", "7")
	if code != 0 || !strings.Contains(out, "created vm1") || !strings.Contains(out, "vm1.sock") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	code, out, _ = ctl(t, sock, "devices", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.HasPrefix(lines[1], "boot0") || !strings.HasPrefix(lines[2], "vm1") {
		t.Fatalf("list: %d\n%s", code, out)
	}

	// --json before the command or after it, as for every listing.
	for _, args := range [][]string{{"--json", "devices", "list"}, {"devices", "list", "--json"}} {
		code, out, _ = ctl(t, sock, args...)
		var l daemon.DeviceList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Devices) != 2 {
			t.Fatalf("%v: %d %q", args, code, out)
		}
	}
	if code, _, errOut := ctl(t, sock, "devices", "list", "vm1"); code != exitUsage || !strings.Contains(errOut, "takes no arguments") {
		t.Fatalf("list with an argument: %d %q", code, errOut)
	}
	code, out, _ = ctl(t, sock, "devices", "show", "vm1", "--json")
	var d daemon.DeviceStatus
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Name != "vm1" || d.Connected || d.Tenant != 7 {
		t.Fatalf("show --json: %d %q", code, out)
	}
	code, out, _ = ctl(t, sock, "health")
	if code != 0 || !strings.Contains(out, "status: ok") || !strings.Contains(out, "devices: 2") {
		t.Fatalf("health: %d %q", code, out)
	}

	code, out, _ = ctl(t, sock, "devices", "destroy", "vm1")
	if code != 0 || out != "destroyed vm1\n" {
		t.Fatalf("destroy: %d %q", code, out)
	}
	code, _, errOut = ctl(t, sock, "devices", "show", "vm1")
	if code != exitNotFound || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, "404") {
		t.Fatalf("show destroyed: %d %q", code, errOut)
	}
}

func TestCtlErrors(t *testing.T) {
	sock := startDaemon(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"devices", "create", "boot0"}, exitConflict, "already exists"},
		{[]string{"devices", "create", "../x"}, exitInvalid, "invalid"},
		{[]string{"devices", "create", "x", "--limits", "{"}, 2, "not valid JSON"},
		{[]string{"devices", "create", "x", "--limits", "[1]"}, exitInvalid, "JSON object"},
		{[]string{"devices", "create", "x", "--pin", "eager"}, exitInvalid, "pin mode"},
		{[]string{"devices", "create", "x", "--tenant", "4294967296"}, 2, "32 bits"},
		{[]string{"devices", "qps", "nope"}, exitNotFound, "not found"},
		{[]string{"devices", "mrs", "boot0", "--limit", "200000"}, exitInvalid, "limit"},
		{[]string{"host", "paths"}, exitNotFound, "no cross-host fabric"},
		{[]string{"host", "frob"}, 2, "unknown subcommand"},
		{[]string{"devices", "destroy"}, 2, "one device NAME"},
		{[]string{"devices", "show", "a", "b"}, 2, "one device NAME"},
		{[]string{"devices", "frobnicate"}, 2, "unknown subcommand"},
		{[]string{"nonsense"}, 2, "unknown command"},
		{[]string{}, 2, "no command"},
	} {
		code, _, errOut := ctl(t, sock, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %d %q, want %d %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	code, _, errOut := ctl(t, sock+".missing", "devices", "list")
	if code != exitUnreachable || !strings.Contains(errOut, "no vstellard answers") {
		t.Errorf("unreachable daemon: %d %q", code, errOut)
	}
}
