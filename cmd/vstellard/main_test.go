package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
)

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.cfg, daemon.DefaultConfig()) {
		t.Fatalf("defaults: %+v", o.cfg)
	}
}

func TestParseFlagsOverrideConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vstellard.json")
	file := `{"run_dir": "/run/from-file", "log_level": "debug", "socket_mode": "0660",
	          "devices": [{"name": "f0", "limits": {"max_qp": 8}}]}`
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--config", path, "--run-dir", "rel", "--log-format", "json",
		"--device", "a", "--device", "b", "--shutdown-timeout", "3s", "--pin-budget", "10G", "--metrics-listen", ":9474", "--data-cores", "0,2-3"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	wd, _ := os.Getwd()
	if c.RunDir != filepath.Join(wd, "rel") || c.LogLevel != "debug" || c.LogFormat != "json" ||
		c.SocketMode != 0o660 || time.Duration(c.ShutdownTimeout) != 3*time.Second || c.PinBudget != 10<<30 || c.MetricsListen != ":9474" {
		t.Fatalf("merged config: %+v", c)
	}
	if c.DataCores.String() != "0,2-3" || len(c.DataCores) != 3 {
		t.Fatalf("data cores: %v", c.DataCores)
	}
	if len(c.Devices) != 3 || c.Devices[0].Name != "f0" || c.Devices[1].Name != "a" || c.Devices[2].Name != "b" {
		t.Fatalf("devices: %+v", c.Devices)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "loud"}, `--log-level: "loud": want debug, info, warn or error`},
		{[]string{"--log-format", "xml"}, `--log-format: "xml": want text or json`},
		{[]string{"--pin-budget", "1"}, "--pin-budget: 1 is below one pinning chunk (2M)"},
		{[]string{"--pin-budget", "10X"}, `--pin-budget: size "10X"`},
		{[]string{"--pin-budget", "-1"}, `--pin-budget: size "-1"`},
		{[]string{"--shutdown-timeout", "soon"}, `--shutdown-timeout: "soon" is not a valid duration`},
		{[]string{"--fabric-mtu", "x"}, `--fabric-mtu: "x" is not a valid MTU`},
		{[]string{"--device", "a", "--device", "a"}, `--device: "a" is listed twice`},
		{[]string{"--socket-mode", "rw"}, "octal"},
		{[]string{"--device", "../x"}, "device name"},
		{[]string{"--device", "a", "--device", "a"}, "twice"},
		{[]string{"--config", "/nonexistent/vstellard.json"}, "no such file"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout: -1s is out of range"},
		{[]string{"--no-such-flag"}, "not defined"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--metrics-listen", "9474"}, "--metrics-listen: "},
		{[]string{"--metrics-listen", "metrics.example:9474"}, "not an IP address"},
		{[]string{"--metrics-listen", "127.0.0.1:0"}, "want 1..65535"},
		{[]string{"--data-cores", "5-2"}, `--data-cores: "5-2" is not a CPU list`},
		{[]string{"--data-cores", "1,1"}, "--data-cores: CPU 1 is listed twice"},
	} {
		_, err := parseFlags(tc.args, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: err = %q, want one line with %q", tc.args, err, tc.want)
		}
	}
}

func TestRunVersionAndUsageErrors(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "vstellard ") {
		t.Fatalf("--version: %d %q %q", code, out.String(), errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"--log-level", "loud"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "vstellard: ") {
		t.Fatalf("bad flag: %d %q", code, errOut.String())
	}
}

func TestRunStartupErrorAPISocketInUse(t *testing.T) {
	dir := shortDir(t)
	ln, err := net.Listen("unix", filepath.Join(dir, api.APISocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var errOut strings.Builder
	code := run([]string{"--run-dir", dir, "--device", "d0"}, &strings.Builder{}, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "in use") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "d0.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Error("device socket created although start-up failed")
	}
}

// TestRunServesRealDeviceUntilSIGTERM runs the whole daemon with the real
// device model and vhost back-end, talks vhost-user to a device and stops
// the daemon with SIGTERM.
func TestRunServesRealDeviceUntilSIGTERM(t *testing.T) {
	dir := shortDir(t)
	var errOut syncBuilder
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--run-dir", dir, "--device", "vm0", "--log-level", "debug"}, &strings.Builder{}, &errOut)
	}()

	client := api.NewClient(filepath.Join(dir, api.APISocketName))
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := client.Health(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not up; stderr:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, err := client.CreateDevice(context.Background(), api.DeviceSpec{Name: "vm1", Limits: json.RawMessage(`{"max_qp": 16}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CreateDevice(context.Background(), api.DeviceSpec{Name: "vm2", Limits: json.RawMessage(`{"max_sge": 4000000000}`)})
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad limits: %v", err)
	}

	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: info.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req [12]byte
	binary.LittleEndian.PutUint32(req[0:], 1) // GET_FEATURES
	binary.LittleEndian.PutUint32(req[4:], 1)
	c.Write(req[:])
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var resp [20]byte
	if n, err := c.Read(resp[:]); err != nil || n != 20 {
		t.Fatalf("GET_FEATURES: %d %v", n, err)
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("daemon did not stop on SIGTERM")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("run dir not empty after shutdown: %v", ents)
	}
	if _, err := c.Read(resp[:]); err == nil {
		t.Error("front-end connection still open after shutdown")
	}
	for _, want := range []string{"vstellard ready", "devices shut down", "device=vm0", "device=vm1"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// TestFabricFlags: the --fabric-* flags make (or override) the config's
// fabric object; a bad one is an error naming the flag.
func TestFabricFlags(t *testing.T) {
	o, err := parseFlags([]string{"--run-dir", "/run/x", "--fabric-listen", "10.0.0.1:4791", "--gid-prefix", "fd00:0:0:1::/64",
		"--fabric-secret-file", "/etc/k", "--fabric-mtu", "9000", "--peer", "fd00:0:0:2::/64=10.0.0.2:4791",
		"--peer", "fd00:0:0:3::/64=10.0.0.3:4791", "--fabric-paths", "128", "--spray", "reps", "--cc", "swift"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	f := o.cfg.Fabric
	if f == nil || f.Listen.String() != "10.0.0.1:4791" || f.GIDPrefix.String() != "fd00:0:0:1::/64" || f.SecretFile != "/etc/k" ||
		f.MTU != 9000 || len(f.Peers) != 2 || f.Peers[1].Addr.String() != "10.0.0.3:4791" ||
		f.Paths != 128 || f.Spray != "reps" || f.CC != "swift" {
		t.Fatalf("fabric %+v", f)
	}
	o, err = parseFlags([]string{"--run-dir", "/run/x", "--fabric-interface", "eth1", "--fabric-listen", ":4791", "--gid-prefix", "fd00:0:0:1::/64",
		"--fabric-secret-file", "/etc/k"}, &strings.Builder{})
	if err != nil || o.cfg.Fabric.Interface != "eth1" || o.cfg.Fabric.Listen.String() != "0.0.0.0:4791" {
		t.Fatalf("--fabric-interface: %+v %v", o.cfg.Fabric, err)
	}
	if o, _ := parseFlags([]string{"--run-dir", "/run/x"}, &strings.Builder{}); o.cfg.Fabric != nil {
		t.Fatal("a fabric without fabric flags")
	}
	for _, args := range [][]string{
		{"--fabric-listen", "nowhere"},
		{"--gid-prefix", "fd00::/200"},
		{"--peer", "fd00:0:0:2::/64"},
		{"--fabric-listen", "10.0.0.1:4791", "--gid-prefix", "fd00:0:0:1::/64"}, // no secret
		{"--fabric-listen", "10.0.0.1:4791", "--gid-prefix", "fd00:0:0:1::/64", "--fabric-secret-file", "/etc/k", "--spray", "ecmp"},
		{"--fabric-listen", "10.0.0.1:4791", "--gid-prefix", "fd00:0:0:1::/64", "--fabric-secret-file", "/etc/k", "--cc", "bbr"},
		{"--fabric-interface", "eth/1", "--fabric-listen", ":4791", "--gid-prefix", "fd00:0:0:1::/64", "--fabric-secret-file", "/etc/k"},
	} {
		if _, err := parseFlags(append([]string{"--run-dir", "/run/x"}, args...), &strings.Builder{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
