package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
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
	cfg.Devices = []api.DeviceSpec{{Name: "boot0"}}
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

	code, out, errOut := ctl(t, sock, "devices", "create", "vm1", "--limits", `{"max_qp": 8}`, "--pin", "at-reg-mr", "--pin-budget", "64M", "--tenant", "7")
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
		var l api.DeviceList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Devices) != 2 {
			t.Fatalf("%v: %d %q", args, code, out)
		}
	}
	if code, _, errOut := ctl(t, sock, "devices", "list", "vm1"); code != exitUsage || !strings.Contains(errOut, "takes no arguments") {
		t.Fatalf("list with an argument: %d %q", code, errOut)
	}
	code, out, _ = ctl(t, sock, "devices", "show", "vm1", "--json")
	var d api.DeviceStatus
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
		{[]string{"devices", "create", "../x"}, 2, `devices create: name: device name "../x" has a character`},
		{[]string{"devices", "create", "x", "--limits", "{"}, 2, "devices create: --limits:1:2: the document ends early"},
		{[]string{"devices", "create", "x", "--limits", "[1]"}, 2, "--limits:1:1: want a JSON object, got array"},
		{[]string{"devices", "create", "x", "--limits", `{"max_qp":999999}`}, 2, "--limits:1:11: max_qp: 999999 is out of range (at most 262144)"},
		{[]string{"devices", "create", "x", "--limits", `{"max_qp":-1}`}, 2, "--limits:1:11: max_qp: want a whole number from 0 to 4294967295, got number -1"},
		{[]string{"devices", "create", "x", "--limits", `{"max_qp":0}`}, 2, "--limits:1:11: max_qp: 0 is out of range: leave the key out for the default"},
		{[]string{"devices", "create", "x", "--limits", `{"max_cq":16777216,"max_qp":16777216}`}, 2,
			"--limits:1:11: max_cq: 16777216 is out of range (at most 262144); max_qp: 16777216 is out of range (at most 262144)"},
		{[]string{"devices", "create", "x", "--pin", "eager"}, 2, `--pin: "eager": want on-demand, at-reg-mr or all`},
		{[]string{"devices", "create", "x", "--pin", "all", "--pin-budget", "1G"}, 2, "--pin-budget: has no effect with mode all"},
		{[]string{"devices", "create", "x", "--pin-budget", "1"}, 2, "--pin-budget: 1 is below one pinning chunk (2M)"},
		{[]string{"devices", "create", "x", "--pin-budget", "1Q"}, 2, `--pin-budget: size "1Q"`},
		{[]string{"devices", "create", "x", "--tenant", "4294967296"}, 2, "32 bits"},
		{[]string{"devices", "qps", "nope"}, exitNotFound, "not found"},
		{[]string{"devices", "mrs", "boot0", "--limit", "200000"}, exitInvalid, "limit"},
		{[]string{"host", "paths"}, exitFailed, "host paths: this daemon has no cross-host fabric"},
		{[]string{"host", "paths", "--json"}, exitFailed, "host paths: this daemon has no cross-host fabric"},
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
		// One line, one cause (usage aside when no command was given).
		if len(tc.args) > 0 && (strings.Count(errOut, "\n") != 1 || strings.Contains(errOut, "invalid argument: invalid argument") || strings.Contains(errOut, "Go struct")) {
			t.Errorf("%v: stderr is not one plain line: %q", tc.args, errOut)
		}
	}
	code, _, errOut := ctl(t, sock+".missing", "devices", "list")
	if code != exitUnreachable || !strings.Contains(errOut, "no vstellard answers") {
		t.Errorf("unreachable daemon: %d %q", code, errOut)
	}
}

// TestCtlJSONAndVersionEverywhere: every command that prints takes
// --json and --version before or after its arguments.
func TestCtlJSONAndVersionEverywhere(t *testing.T) {
	sock := startDaemon(t)
	for _, args := range [][]string{
		{"health"}, {"devices", "list"}, {"devices", "show", "boot0"}, {"devices", "qps", "boot0"}, {"devices", "mrs", "boot0"},
		{"host"}, {"host", "nics"},
	} {
		for _, v := range [][]string{append(slices.Clone(args), "--json"), append([]string{"--json"}, args...)} {
			code, out, errOut := ctl(t, sock, v...)
			if code != 0 || !json.Valid([]byte(out)) {
				t.Errorf("%v: %d %q %q", v, code, out, errOut)
			}
		}
		code, out, errOut := ctl(t, sock, append(slices.Clone(args), "--version")...)
		if code != 0 || !strings.HasPrefix(out, "vstellarctl "+version+" (go") || strings.Count(out, "\n") != 1 {
			t.Errorf("%v --version: %d %q %q", args, code, out, errOut)
		}
	}
	// --version does nothing else: no device is created.
	if code, out, _ := ctl(t, sock, "devices", "create", "v1", "--version"); code != 0 || !strings.HasPrefix(out, "vstellarctl ") {
		t.Fatalf("create --version: %d %q", code, out)
	}
	if code, _, _ := ctl(t, sock, "devices", "show", "v1"); code != exitNotFound {
		t.Fatalf("create --version created the device: %d", code)
	}
}

// TestCtlShowLimitsAndGIDs: show prints the limits; the GID is written as
// rdma tools write one, so its low half reads as the node GUID.
func TestCtlShowLimitsAndGIDs(t *testing.T) {
	for gid, want := range map[string]string{"fe80::af1:107:b58d:6690": "fe80:0000:0000:0000:0af1:0107:b58d:6690", "": "", "x": "x"} {
		if got := gidIB(gid); got != want {
			t.Errorf("gidIB(%q) = %q, want %q", gid, got, want)
		}
	}
	if got := pageSizes(1<<12 | 1<<21 | 1<<30); got != "4.0 KiB, 2.0 MiB, 1.0 GiB" {
		t.Errorf("pageSizes = %q", got)
	}
}

// TestCtlCreateTakesSizeUnits: --pin-budget takes K, M, G, T.
func TestCtlCreateTakesSizeUnits(t *testing.T) {
	sock := startDaemon(t)
	if code, out, errOut := ctl(t, sock, "devices", "create", "u1", "--pin-budget", "1G"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	code, out, _ := ctl(t, sock, "--json", "devices", "list")
	if code != 0 || !strings.Contains(out, `"u1"`) {
		t.Fatalf("list: %d %q", code, out)
	}
}
