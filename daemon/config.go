package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/confcheck"
	"github.com/vstellar/vstellar/internal/units"
	"github.com/vstellar/vstellar/pvdma"
)

// Defaults for Config fields left empty (and api.DefaultRunDir).
const (
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "text"
	DefaultSocketMode      = FileMode(0o600)
	DefaultShutdownTimeout = api.Duration(10 * time.Second)

	maxConfigFileSize  = 1 << 20
	maxShutdownTimeout = 5 * time.Minute
	// sunPathMax is the usable length of sockaddr_un.sun_path on Linux
	// (108 bytes including the terminating NUL).
	sunPathMax = 107
)

// Config is the daemon configuration: the JSON config file, overridden by
// command-line flags. Zero fields take the defaults above (see
// DefaultConfig and LoadConfigFile).
//
// Example file:
//
//	{
//	  "run_dir": "/run/vstellar",
//	  "log_level": "info",
//	  "log_format": "json",
//	  "socket_mode": "0660",
//	  "shutdown_timeout": "10s",
//	  "pin_budget_bytes": 68719476736,
//	  "devices": [
//	    {"name": "vm1-rdma0", "limits": {"max_qp": 1024}},
//	    {"name": "vm2-rdma0", "pin": {"mode": "on-demand", "budget_bytes": 8589934592}}
//	  ]
//	}
type Config struct {
	// RunDir holds the device sockets and the API socket. Absolute.
	RunDir string `json:"run_dir"`
	// LogLevel is debug, info, warn or error. Used by NewLogger.
	LogLevel string `json:"log_level"`
	// LogFormat is text or json. Used by NewLogger.
	LogFormat string `json:"log_format"`
	// SocketMode is the permission mode of device sockets (default
	// 0600). The API socket is always 0600.
	SocketMode FileMode `json:"socket_mode"`
	// ShutdownTimeout bounds the whole shutdown of the Manager.
	ShutdownTimeout api.Duration `json:"shutdown_timeout"`
	// PinBudget bounds the guest memory all devices together keep pinned
	// for DMA, in bytes; least recently used chunks are released to stay
	// under it. 0 means no bound when running as root (CAP_IPC_LOCK) and
	// RLIMIT_MEMLOCK otherwise.
	PinBudget uint64 `json:"pin_budget_bytes"`
	// Fabric, if set, joins the devices to those of other hosts (see
	// FabricSpec). Without it they reach only each other.
	Fabric *FabricSpec `json:"fabric,omitempty"`
	// MetricsListen is the TCP address ("127.0.0.1:9474", ":9474")
	// that serves Prometheus metrics at /metrics; empty serves none.
	MetricsListen string `json:"metrics_listen,omitempty"`
	// DataCores, if set, are the CPUs the data path polls from: one
	// data-path thread pinned to each, the devices spread over them.
	// Empty: engine.DefaultDataThreads threads, unpinned.
	DataCores CPUList `json:"data_cores,omitempty"`
	// Devices are created when Run starts.
	Devices []api.DeviceSpec `json:"devices"`

	// Factory builds a device model and its vhost-user back-end. It is
	// injected by the program, never read from the file. Required.
	Factory DeviceFactory `json:"-"`
	// Metrics builds the /metrics handler for the Manager (package
	// metrics). Injected by the program; required with MetricsListen.
	Metrics func(*Manager) http.Handler `json:"-"`
	// ListenIn, if set, runs open (which opens the fabric's UDP socket)
	// where the socket should live, such as a network namespace (tests
	// and the demo run each host in one). Nil runs it in place.
	ListenIn func(open func() error) error `json:"-"`
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		RunDir:          api.DefaultRunDir,
		LogLevel:        DefaultLogLevel,
		LogFormat:       DefaultLogFormat,
		SocketMode:      DefaultSocketMode,
		ShutdownTimeout: DefaultShutdownTimeout,
	}
}

// LoadConfigFile reads a JSON config file on top of DefaultConfig.
// Unknown keys are errors, so a misspelt key is never silently ignored.
// Errors are *confcheck.ConfigError naming the file, the line and
// column, and the key. The result's file values are checked; call
// Validate after applying overrides.
func LoadConfigFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		// The PathError names the file already.
		return Config{}, &confcheck.ConfigError{Err: err, Offset: -1}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileSize+1))
	if err != nil {
		return Config{}, &confcheck.ConfigError{Err: err, Offset: -1}
	}
	return parseConfig(path, data)
}

// ParseConfig decodes a JSON config on top of DefaultConfig. See
// LoadConfigFile; errors name no file.
func ParseConfig(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigFileSize+1))
	if err != nil {
		return Config{}, err
	}
	return parseConfig("", data)
}

// configFile is Config as the file writes it: sizes may take a unit
// ("64G"). Its own fields hide the embedded ones of the same JSON name.
type configFile struct {
	configFields
	PinBudget units.Size   `json:"pin_budget_bytes"`
	Devices   []deviceFile `json:"devices"`
}

type configFields Config

type deviceFile struct {
	deviceFields
	Pin *pinFile `json:"pin,omitempty"`
}

type deviceFields api.DeviceSpec

type pinFile struct {
	Mode   string     `json:"mode,omitempty"`
	Budget units.Size `json:"budget_bytes,omitempty"`
}

// parseConfig decodes data, the config named source, and checks the
// values that the file alone decides (each device, the sizes), locating
// each error in data.
func parseConfig(source string, data []byte) (Config, error) {
	fail := func(err error) (Config, error) {
		var ce *confcheck.ConfigError
		if !errors.As(err, &ce) {
			ce = &confcheck.ConfigError{Err: err, Offset: -1}
		}
		if ce.Offset < 0 && ce.Path != "" {
			for _, v := range confcheck.Index(data) {
				if v.Path == ce.Path {
					ce.Offset = v.Start // the last: the decoder keeps a repeated key's last value
				}
			}
		}
		return Config{}, ce.Locate(source, data)
	}
	if len(data) > maxConfigFileSize {
		return fail(fmt.Errorf("larger than %d bytes", maxConfigFileSize))
	}
	f := configFile{configFields: configFields(DefaultConfig())}
	if err := confcheck.DecodeStrict(data, &f); err != nil {
		return fail(err)
	}
	cfg := Config(f.configFields)
	cfg.PinBudget = uint64(f.PinBudget)
	cfg.Devices = nil
	for _, d := range f.Devices {
		spec := api.DeviceSpec(d.deviceFields)
		if d.Pin != nil {
			spec.Pin = &api.PinSpec{Mode: d.Pin.Mode, Budget: uint64(d.Pin.Budget)}
		}
		cfg.Devices = append(cfg.Devices, spec)
	}
	if err := cfg.validateFields(); err != nil {
		var ce *confcheck.ConfigError
		if errors.As(err, &ce) && ce.Offset >= 0 {
			// Offsets inside a device's limits count from its object.
			for _, v := range confcheck.Index(data) {
				if strings.HasSuffix(v.Path, ".limits") && strings.HasPrefix(ce.Path+".", v.Path+".") {
					ce.Offset += v.Start
					break
				}
			}
		}
		return fail(err)
	}
	return cfg, nil
}

// decodeStrict is confcheck.DecodeStrict on a reader; the reader's own
// errors (an http.MaxBytesError) come back unchanged.
func decodeStrict(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return confcheck.DecodeStrict(data, v)
}

// Validate checks every field and reports the first problem (all the
// limits of a device at once). Errors are *confcheck.ConfigError, which
// wrap api.ErrInvalid, naming the key. Factory is checked by New, not here.
func (c Config) Validate() error {
	if err := c.validateFields(); err != nil {
		return err
	}
	if c.Fabric != nil {
		if err := c.Fabric.validate(); err != nil {
			return confcheck.UnderPath("fabric", err)
		}
	}
	return nil
}

// validateFields is Validate but for the fabric, which flags may
// complete: what a config file alone decides.
func (c Config) validateFields() error {
	if c.RunDir == "" {
		return confcheck.BadValue("run_dir", "is empty")
	}
	if !filepath.IsAbs(c.RunDir) {
		return confcheck.BadValue("run_dir", "%q is not an absolute path", c.RunDir)
	}
	// Device sockets are checked when created, as their length depends
	// on the name; a run dir too long for the API socket is useless.
	if n := len(filepath.Join(c.RunDir, api.APISocketName)); n > sunPathMax {
		return confcheck.BadValue("run_dir", "%q is too long: the API socket path would be %d bytes, the limit is %d",
			c.RunDir, n, sunPathMax)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		return err
	}
	if err := checkLogFormat(c.LogFormat); err != nil {
		return err
	}
	if err := c.SocketMode.validate(); err != nil {
		return confcheck.UnderPath("socket_mode", err)
	}
	if d := time.Duration(c.ShutdownTimeout); d <= 0 || d > maxShutdownTimeout {
		return confcheck.BadValue("shutdown_timeout", "%v is out of range (more than 0, at most %v)", d, maxShutdownTimeout)
	}
	if err := c.checkPinBudget(); err != nil {
		return err
	}
	if c.MetricsListen != "" {
		if err := checkTCPAddr(c.MetricsListen); err != nil {
			return confcheck.UnderPath("metrics_listen", err)
		}
	}
	if err := c.DataCores.validate(); err != nil {
		return confcheck.UnderPath("data_cores", err)
	}
	return c.validateDevices()
}

// checkPinBudget refuses a host budget that cannot hold one pinning
// chunk: every DMA would fail.
func (c Config) checkPinBudget() error {
	if c.PinBudget != 0 && c.PinBudget < pvdma.ChunkSize {
		return confcheck.BadValue("pin_budget_bytes", "%d is below one pinning chunk (%s); 0 means no budget", c.PinBudget, units.FormatSize(pvdma.ChunkSize))
	}
	return nil
}

// validateDevices checks each device and that no name is listed twice.
func (c Config) validateDevices() error {
	seen := make(map[string]bool, len(c.Devices))
	for i, d := range c.Devices {
		if err := confcheck.ValidateSpec(d); err != nil {
			return confcheck.UnderPath("devices"+confcheck.PathIndex(i), err)
		}
		if seen[d.Name] {
			return confcheck.BadValue("devices"+confcheck.PathIndex(i)+".name", "%q is listed twice", d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

// ParseLogLevel parses debug, info, warn or error (any case).
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, confcheck.BadValue("log_level", "%q: want debug, info, warn or error", s)
}

func checkLogFormat(s string) error {
	if s != "text" && s != "json" {
		return confcheck.BadValue("log_format", "%q: want text or json", s)
	}
	return nil
}

// FileMode is a permission mode written in JSON and on the command line
// as an octal string such as "0660". It implements flag.Value.
type FileMode os.FileMode

// String returns the mode as 4 octal digits.
func (m FileMode) String() string { return fmt.Sprintf("%04o", uint32(m)) }

// Set parses an octal mode ("0660", "660" or "0o660").
func (m *FileMode) Set(s string) error {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	v, err := strconv.ParseUint(t, 8, 32)
	if err != nil || t == "" {
		return fmt.Errorf("%w: %q is not an octal number like 0660", api.ErrInvalid, s)
	}
	*m = FileMode(v)
	return m.validate()
}

func (m FileMode) validate() error {
	if m&^0o777 != 0 {
		return fmt.Errorf("%w: %s has bits outside 0777", api.ErrInvalid, m)
	}
	if m&0o600 != 0o600 {
		return fmt.Errorf("%w: %s must give the owner read and write (0600)", api.ErrInvalid, m)
	}
	return nil
}

// MarshalJSON writes the mode as an octal string.
func (m FileMode) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON accepts only an octal string: a bare JSON number is
// ambiguous (600 decimal is not 0600).
func (m *FileMode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want an octal string such as \"0660\", got %s", b)
	}
	return m.Set(s)
}

// checkTCPAddr checks a host:port listen address: the host an IP or
// empty (every address), the port 1..65535.
func checkTCPAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: host %q is not an IP address", addr, host)
		}
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: port %q: want 1..65535", addr, port)
	}
	return nil
}

// CPUList is a set of CPUs written as Linux writes CPU lists ("2-5,8",
// as in /sys/devices/system/cpu/online or taskset -c), in JSON as such a
// string. It implements flag.Value.
type CPUList []int

// maxCPU bounds CPU numbers (the kernel's CONFIG_NR_CPUS at most).
const maxCPU = 8191

// String writes the list with ranges, in the order given.
func (l CPUList) String() string {
	var b strings.Builder
	for i := 0; i < len(l); {
		j := i
		for j+1 < len(l) && l[j+1] == l[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", l[i], l[j])
		} else {
			fmt.Fprintf(&b, "%d", l[i])
		}
		i = j + 1
	}
	return b.String()
}

// Set parses a CPU list: comma-separated CPUs and ranges ("2-5,8").
func (l *CPUList) Set(s string) error {
	var out CPUList
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b > maxCPU {
			return fmt.Errorf("%w: %q is not a CPU list like 2-5,8 (CPUs 0..%d, ranges low-high)", api.ErrInvalid, s, maxCPU)
		}
		for cpu := a; cpu <= b; cpu++ {
			out = append(out, cpu)
		}
	}
	if err := out.validate(); err != nil {
		return err
	}
	*l = out
	return nil
}

// validate refuses a CPU listed twice: two threads pinned to one CPU
// would take turns on it.
func (l CPUList) validate() error {
	seen := make(map[int]bool, len(l))
	for _, cpu := range l {
		if cpu < 0 || cpu > maxCPU {
			return fmt.Errorf("%w: CPU %d is out of range (0..%d)", api.ErrInvalid, cpu, maxCPU)
		}
		if seen[cpu] {
			return fmt.Errorf("%w: CPU %d is listed twice", api.ErrInvalid, cpu)
		}
		seen[cpu] = true
	}
	return nil
}

// MarshalJSON writes the list as a string.
func (l CPUList) MarshalJSON() ([]byte, error) { return json.Marshal(l.String()) }

// UnmarshalJSON accepts only a CPU list string.
func (l *CPUList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a CPU list string such as \"2-5\", got %s", b)
	}
	return l.Set(s)
}
