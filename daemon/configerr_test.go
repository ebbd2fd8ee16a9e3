package daemon_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/confcheck"
)

// TestConfigFileErrorsAreOneLocatedLine: every mistake in a config file
// is one line naming the file, the line and column and the key, in words
// without Go's types, once.
func TestConfigFileErrorsAreOneLocatedLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, file, want string }{
		{"syntax", "{\n  \"run_dir\": \"/run/x\",\n  \"devices\": [}\n", `:3:15: invalid character '}' looking for beginning of value`},
		{"truncated", "{\"devices\": [", `:1:14: the document ends early`},
		{"type", "{\n \"devices\": [{\"name\": \"x7\", \"tenant\": -1}]}", `:2:39: devices[0].tenant: want a whole number from 0 to 4294967295, got number -1`},
		{"limit type", "{\"devices\": [{\"name\": \"x7\",\n \"limits\": {\"max_qp\": \"lots\"}}]}", `:2:23: devices[0].limits.max_qp: want a whole number from 0 to 4294967295, got string`},
		{"limit range", "{\"devices\": [{\"name\": \"x7\",\n \"limits\": {\"max_qp\": 999999}}]}", `:2:23: devices[0].limits.max_qp: 999999 is out of range (at most 262144)`},
		{"two limits", "{\"devices\": [{\"name\": \"x7\", \"limits\": {\"max_cq\": 16777216, \"max_qp\": 16777216}}]}",
			`:1:50: devices[0].limits: max_cq: 16777216 is out of range (at most 262144); max_qp: 16777216 is out of range (at most 262144)`},
		{"unknown key", "{\n\"devices\": [{\"name\": \"x7\", \"limit\": {}}]}", `:2:28: devices[0]: unknown field "limit"`},
		{"unknown limit", "{\"devices\": [{\"name\": \"x7\", \"limits\": {\"max_q\": 1}}]}", `:1:40: devices[0].limits: unknown field "max_q"`},
		{"mode", "{\"socket_mode\": \"0999\"}", `:1:17: socket_mode: "0999" is not an octal number like 0660`},
		{"duration", "{\"shutdown_timeout\": 10}", `:1:22: shutdown_timeout: want a duration string such as "10s", got 10`},
		{"size", "{\"pin_budget_bytes\": \"10X\"}", `:1:22: pin_budget_bytes: size "10X"`},
		{"name", "{\"devices\": [{\"name\": \"../x\"}]}", `:1:23: devices[0].name: device name "../x" has a character`},
		{"fabric", "{\"fabric\": {\"listen\": \"1.2.3.4:5\", \"mtu\": \"x\"}}", `:1:43: fabric.mtu: want a whole number, got string`},
		{"budget", "{\"pin_budget_bytes\": 1}", `:1:22: pin_budget_bytes: 1 is below one pinning chunk (2M); 0 means no budget`},
		{"duplicate", "{\"devices\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}", `:1:38: devices[1].name: "a" is listed twice`},
		{"data cores", "{\"data_cores\": \"2-\"}", `:1:16: data_cores: "2-" is not a CPU list like 2-5,8`},
		{"data cores type", "{\"data_cores\": [2, 3]}", `:1:16: data_cores: want a CPU list string such as "2-5", got [2, 3]`},
		{"data cores twice", "{\"data_cores\": \"1-3,2\"}", `:1:16: data_cores: CPU 2 is listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := daemon.LoadConfigFile(path)
			var ce *confcheck.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, api.ErrInvalid) || ce.Source != path {
				t.Fatalf("err = %#v, want a ConfigError from %s", err, path)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+tc.want) {
				t.Errorf("err = %q\nwant %q", msg, path+tc.want)
			}
			for _, bad := range []string{"\n", "Go struct", "uint32", "json: ", "invalid argument"} {
				if strings.Contains(msg, bad) {
					t.Errorf("err = %q holds %q", msg, bad)
				}
			}
		})
	}
}

// TestConfigSizesTakeUnits: sizes in the file may be written with a unit.
func TestConfigSizesTakeUnits(t *testing.T) {
	cfg, err := daemon.ParseConfig(strings.NewReader(`{"pin_budget_bytes": "64G",
		"devices": [{"name": "a", "pin": {"budget_bytes": "8GiB"}}, {"name": "b", "pin": {"budget_bytes": 4194304}}]}`))
	if err != nil || cfg.PinBudget != 64<<30 || cfg.Devices[0].Pin.Budget != 8<<30 || cfg.Devices[1].Pin.Budget != 4<<20 {
		t.Fatalf("%+v %v", cfg, err)
	}
}

// FuzzParseConfig: no document makes the parser panic, and every error
// is one located line.
func FuzzParseConfig(f *testing.F) {
	for _, path := range []string{"../dist/vstellard.json"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(exampleConfig))
	f.Add([]byte(`{"devices": [{"name": "x", "limits": {"max_qp": 0, "max_cq": 1e9}, "pin": {"mode": "all", "budget_bytes": "1G"}}]}`))
	f.Add([]byte(`{"fabric": {"listen": ":4791", "gid_prefix": "fd00::/64", "secret_file": "/k", "peers": ["fd00:0:0:1::/64=10.0.0.2:4791"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := daemon.ParseConfig(strings.NewReader(string(b)))
		if err != nil {
			if !errors.Is(err, api.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: not one line of ErrInvalid", err)
			}
			return
		}
		_ = cfg.Validate()
	})
}
