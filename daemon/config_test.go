package daemon_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
)

const exampleConfig = `{
  "run_dir": "/run/vstellar",
  "log_level": "debug",
  "log_format": "json",
  "socket_mode": "0660",
  "shutdown_timeout": "3s",
  "devices": [
    {"name": "vm1-rdma0", "limits": {"max_qp": 1024}},
    {"name": "vm2-rdma0"}
  ]
}`

func TestParseConfigExample(t *testing.T) {
	cfg, err := daemon.ParseConfig(strings.NewReader(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.SocketMode != 0o660 || time.Duration(cfg.ShutdownTimeout) != 3*time.Second ||
		cfg.LogLevel != "debug" || cfg.LogFormat != "json" || len(cfg.Devices) != 2 {
		t.Fatalf("parsed %+v", cfg)
	}
	if got := string(cfg.Devices[0].Limits); got != `{"max_qp": 1024}` {
		t.Errorf("limits not passed through verbatim: %s", got)
	}
	// Round trip: the config marshals back to something that parses equal.
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := daemon.ParseConfig(strings.NewReader(string(b)))
	if err != nil || again.SocketMode != cfg.SocketMode || again.ShutdownTimeout != cfg.ShutdownTimeout {
		t.Fatalf("round trip: %v %+v", err, again)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := daemon.ParseConfig(strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	def := daemon.DefaultConfig()
	if cfg.RunDir != def.RunDir || cfg.SocketMode != 0o600 || cfg.LogLevel != "info" || cfg.LogFormat != "text" {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"unknown field", `{"run_dri": "/x"}`, "unknown field"},
		{"numeric mode", `{"socket_mode": 660}`, "octal string"},
		{"bad mode", `{"socket_mode": "0999"}`, "octal"},
		{"bad duration", `{"shutdown_timeout": "soon"}`, "duration"},
		{"trailing", `{} {}`, "trailing"},
		{"empty", ``, "empty"},
		{"not json", `run_dir=/x`, "invalid character"},
		{"device unknown field", `{"devices": [{"name": "a", "limit": {}}]}`, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := daemon.ParseConfig(strings.NewReader(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*daemon.Config)
		want   string
	}{
		{"relative run dir", func(c *daemon.Config) { c.RunDir = "run" }, "absolute"},
		{"empty run dir", func(c *daemon.Config) { c.RunDir = "" }, "empty"},
		{"long run dir", func(c *daemon.Config) { c.RunDir = "/" + strings.Repeat("d", 100) }, "too long"},
		{"log level", func(c *daemon.Config) { c.LogLevel = "chatty" }, `log_level: "chatty": want debug`},
		{"log format", func(c *daemon.Config) { c.LogFormat = "xml" }, `log_format: "xml": want text or json`},
		{"mode without owner rw", func(c *daemon.Config) { c.SocketMode = 0o060 }, "owner"},
		{"mode with setuid", func(c *daemon.Config) { c.SocketMode = 0o4600 }, "outside 0777"},
		{"zero timeout", func(c *daemon.Config) { c.ShutdownTimeout = 0 }, "shutdown_timeout"},
		{"bad device name", func(c *daemon.Config) { c.Devices = []api.DeviceSpec{{Name: "../x"}} }, "devices[0]"},
		{"duplicate device", func(c *daemon.Config) { c.Devices = []api.DeviceSpec{{Name: "a"}, {Name: "a"}} }, "twice"},
		{"pin mode", func(c *daemon.Config) {
			c.Devices = []api.DeviceSpec{{Name: "a", Pin: &api.PinSpec{Mode: "eager"}}}
		}, `devices[0].pin.mode: "eager": want on-demand`},
		{"limits not object", func(c *daemon.Config) {
			c.Devices = []api.DeviceSpec{{Name: "a", Limits: json.RawMessage(`[1]`)}}
		}, "devices[0].limits: want a JSON object, got array"},
		{"limit zero", func(c *daemon.Config) {
			c.Devices = []api.DeviceSpec{{Name: "a", Limits: json.RawMessage(`{"max_qp": 0}`)}}
		}, "devices[0].limits.max_qp: 0 is out of range: leave the key out for the default"},
		{"limit too large", func(c *daemon.Config) {
			c.Devices = []api.DeviceSpec{{Name: "a", Limits: json.RawMessage(`{"max_qp": 999999}`)}}
		}, "devices[0].limits.max_qp: 999999 is out of range (at most 262144)"},
		{"host pin budget below a chunk", func(c *daemon.Config) { c.PinBudget = 1 }, "pin_budget_bytes: 1 is below one pinning chunk (2M)"},
		{"device pin budget below a chunk", func(c *daemon.Config) {
			c.Devices = []api.DeviceSpec{{Name: "a", Pin: &api.PinSpec{Budget: 4096}}}
		}, "devices[0].pin.budget_bytes: 4096 is below one pinning chunk"},
		{"budget with mode all", func(c *daemon.Config) {
			c.Devices = []api.DeviceSpec{{Name: "a", Pin: &api.PinSpec{Mode: "all", Budget: 1 << 30}}}
		}, "devices[0].pin.budget_bytes: has no effect with mode all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := daemon.DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vstellard.json")
	if err := os.WriteFile(path, []byte(exampleConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.LoadConfigFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.LoadConfigFile(path + ".missing"); err == nil {
		t.Fatal("missing file accepted")
	}
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"run_dir": "`+strings.Repeat(" ", 2<<20)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.LoadConfigFile(big); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Fatalf("oversized config: %v", err)
	}
}

func TestNewLogger(t *testing.T) {
	var sb strings.Builder
	log, err := daemon.NewLogger(&sb, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "device", "d0")
	if out := sb.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"device":"d0"`) {
		t.Fatalf("log output %q", out)
	}
	if _, err := daemon.NewLogger(&sb, "info", "yaml"); err == nil {
		t.Fatal("bad format accepted")
	}
}

func TestNewRequiresFactory(t *testing.T) {
	if _, err := daemon.New(daemon.DefaultConfig(), nil); err == nil || !strings.Contains(err.Error(), "factory") {
		t.Fatalf("New without factory: %v", err)
	}
}

// TestNewRefusesForeignDataCores: a data core the process may not run on
// is the operator's error, named by its key.
func TestNewRefusesForeignDataCores(t *testing.T) {
	cfg := daemon.DefaultConfig()
	cfg.Factory = daemon.StellarDevice
	cfg.DataCores = daemon.CPUList{8000}
	_, err := daemon.New(cfg, nil)
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "data_cores: CPU 8000 is not one this process may run on") {
		t.Fatalf("New with data core 8000: %v", err)
	}
}

// TestShippedConfigIsValid: the example config shipped beside the
// systemd unit (dist/) loads and validates.
func TestShippedConfigIsValid(t *testing.T) {
	cfg, err := daemon.LoadConfigFile("../dist/vstellard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsListen == "" || len(cfg.Devices) != 2 || cfg.Devices[1].Tenant != 7 {
		t.Fatalf("shipped config read as %+v", cfg)
	}
	unit, err := os.ReadFile("../dist/vstellard.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/vstellard --config /etc/vstellar/vstellard.json") ||
		!strings.Contains(string(unit), "RuntimeDirectory=vstellar") {
		t.Fatal("the unit does not start vstellard with the shipped config in /run/vstellar")
	}
}
