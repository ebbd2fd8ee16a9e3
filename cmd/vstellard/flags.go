package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/confcheck"
	"github.com/vstellar/vstellar/internal/units"
)

// options are the parsed command line.
type options struct {
	cfg     daemon.Config
	version bool
}

// deviceList collects repeated --device flags.
type deviceList []string

func (d *deviceList) String() string     { return fmt.Sprint(*d) }
func (d *deviceList) Set(v string) error { *d = append(*d, v); return nil }

// parseFlags builds the configuration: defaults, then the config file,
// then the flags that were given. The result is validated.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("vstellard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath = fs.String("config", "", "JSON config `file`")
		runDir     = fs.String("run-dir", api.DefaultRunDir, "`directory` for the device and API sockets")
		logLevel   = fs.String("log-level", daemon.DefaultLogLevel, "log `level`: debug, info, warn or error")
		logFormat  = fs.String("log-format", daemon.DefaultLogFormat, "log `format`: text or json")
		timeout    = fs.Duration("shutdown-timeout", time.Duration(daemon.DefaultShutdownTimeout), "bound on a clean shutdown")
		pinBudget  units.Size
		metrics    = fs.String("metrics-listen", "", "serve Prometheus metrics at http://`host:port`/metrics (empty: none)")
		mode       = daemon.DefaultSocketMode
		devices    deviceList
		fab        fabricFlagValues
		o          options
	)
	fs.StringVar(&fab.listen, "fabric-listen", "", "cross-host fabric: UDP `ip:port` (or :port with --fabric-interface) to bind (enables the fabric with --gid-prefix and --fabric-secret-file)")
	fs.StringVar(&fab.iface, "fabric-interface", "", "cross-host fabric: network `interface` to bind (its address and MTU unless given)")
	fs.StringVar(&fab.prefix, "gid-prefix", "", "cross-host fabric: this host's GID `prefix` (an IPv6 /64)")
	fs.StringVar(&fab.secret, "fabric-secret-file", "", "cross-host fabric: `file` holding the cluster key")
	fs.IntVar(&fab.mtu, "fabric-mtu", 0, "cross-host fabric: the host network's `MTU` (default 1500)")
	fs.IntVar(&fab.paths, "fabric-paths", 0, "cross-host fabric: `number` of UDP source ports (paths) to spray over (default 1)")
	fs.StringVar(&fab.spray, "spray", "", "cross-host fabric: path `selector`: single, ops, rr, dwrr, bestrtt, p2c or reps (default single)")
	fs.StringVar(&fab.cc, "cc", "", "cross-host fabric: congestion `controller`: fixed, swift or cubic (default fixed)")
	fs.Var(&fab.peers, "peer", "cross-host fabric: another host, `gid_prefix=ip:port` (repeatable)")
	fs.Var(&mode, "socket-mode", "permission `mode` of device sockets, octal")
	fs.Var(&pinBudget, "pin-budget", "`bytes` of guest memory all devices may keep pinned, with K, M, G or T (0: none for root, else RLIMIT_MEMLOCK)")
	fs.Var(&devices, "device", "create a device `name`d so at start (repeatable)")
	var dataCores daemon.CPUList
	fs.Var(&dataCores, "data-cores", "poll the data path from these `CPUs` (a list like 2-5,8), one pinned thread each (default: a quarter of the CPUs, unpinned)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := parse(fs, args, stderr); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.version {
		return o, nil
	}

	cfg := daemon.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = daemon.LoadConfigFile(*configPath); err != nil {
			return o, err
		}
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "run-dir":
			cfg.RunDir, err = filepath.Abs(*runDir)
		case "log-level":
			cfg.LogLevel = *logLevel
		case "log-format":
			cfg.LogFormat = *logFormat
		case "shutdown-timeout":
			cfg.ShutdownTimeout = api.Duration(*timeout)
		case "socket-mode":
			cfg.SocketMode = mode
		case "pin-budget":
			cfg.PinBudget = uint64(pinBudget)
		case "metrics-listen":
			cfg.MetricsListen = *metrics
		case "data-cores":
			cfg.DataCores = dataCores
		}
	})
	if err != nil {
		return o, fmt.Errorf("--run-dir: %w", err)
	}
	if err := fabricFlags(fs, &cfg, &fab); err != nil {
		return o, err
	}
	fileDevices := len(cfg.Devices)
	for _, name := range devices {
		cfg.Devices = append(cfg.Devices, api.DeviceSpec{Name: name})
	}
	if err := cfg.Validate(); err != nil {
		return o, blameFlag(fs, err, fileDevices)
	}
	o.cfg = cfg
	return o, nil
}

// peerList collects repeated --peer flags.
type peerList []remote.Peer

func (p *peerList) String() string { return fmt.Sprint(*p) }
func (p *peerList) Set(v string) error {
	peer, err := remote.ParsePeer(v)
	if err != nil {
		return err
	}
	*p = append(*p, peer)
	return nil
}

// fabricFlagValues are the cross-host fabric's flags.
type fabricFlagValues struct {
	listen, iface, prefix, secret, spray, cc string
	mtu, paths                               int
	peers                                    peerList
}

// fabricFlags applies the fabric flags given over the config file's
// "fabric" object (creating it when the file has none).
func fabricFlags(fs *flag.FlagSet, cfg *daemon.Config, v *fabricFlagValues) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		switch f.Name {
		case "fabric-listen", "fabric-interface", "gid-prefix", "fabric-secret-file", "fabric-mtu", "fabric-paths", "spray", "cc", "peer":
		default:
			return
		}
		if cfg.Fabric == nil {
			cfg.Fabric = &daemon.FabricSpec{}
		}
		fab := cfg.Fabric
		switch f.Name {
		case "fabric-listen":
			if fab.Listen, err = daemon.ParseListen(v.listen); err != nil {
				err = fmt.Errorf("--fabric-listen: %w", err)
			}
		case "fabric-interface":
			fab.Interface = v.iface
		case "gid-prefix":
			if fab.GIDPrefix, err = netip.ParsePrefix(v.prefix); err != nil {
				err = fmt.Errorf("--gid-prefix: %w", err)
			}
		case "fabric-secret-file":
			fab.SecretFile, err = filepath.Abs(v.secret)
		case "fabric-mtu":
			fab.MTU = v.mtu
		case "fabric-paths":
			fab.Paths = v.paths
		case "spray":
			fab.Spray = v.spray
		case "cc":
			fab.CC = v.cc
		case "peer":
			fab.Peers = v.peers
		}
	})
	return err
}

// parse parses args with errors of one line that name the flag: "--NAME:
// CAUSE". Usage goes to stderr only for -h.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	var flagErr error
	fs.VisitAll(func(f *flag.Flag) {
		what, _ := flag.UnquoteUsage(f)
		f.Value = &namedValue{Value: f.Value, name: f.Name, what: what, err: &flagErr}
	})
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stderr)
		fmt.Fprintln(stderr, "usage: vstellard [flags]")
		fs.PrintDefaults()
		return err
	case flagErr != nil:
		return flagErr
	case err != nil:
		return fmt.Errorf("%w (vstellard -h lists the flags)", err)
	}
	return nil
}

// namedValue records the error of its flag's Set as "--NAME: CAUSE".
type namedValue struct {
	flag.Value
	name, what string // the flag's name and what its value is
	err        *error
}

// IsBoolFlag keeps --version a flag without a value.
func (v *namedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (v *namedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err == nil {
		return nil
	}
	if msg := err.Error(); msg == "parse error" || msg == "value out of range" { // the flag package's own
		err = fmt.Errorf("%q is not a valid %s", s, v.what)
	}
	*v.err = &confcheck.ConfigError{Source: "--" + v.name, Err: err}
	return err
}

// flagKeys are the config keys each flag sets.
var flagKeys = map[string]string{
	"run-dir": "run_dir", "log-level": "log_level", "log-format": "log_format", "socket-mode": "socket_mode",
	"shutdown-timeout": "shutdown_timeout", "pin-budget": "pin_budget_bytes", "metrics-listen": "metrics_listen",
	"data-cores": "data_cores",
}

// blameFlag makes an error about a key a flag set name the flag, not the
// key, as the operator typed the flag.
func blameFlag(fs *flag.FlagSet, err error, fileDevices int) error {
	var ce *confcheck.ConfigError
	if !errors.As(err, &ce) || ce.Source != "" {
		return err
	}
	blamed := ""
	fs.Visit(func(f *flag.Flag) {
		if k, ok := flagKeys[f.Name]; ok && (ce.Path == k || strings.HasPrefix(ce.Path, k+".")) {
			blamed = f.Name
		}
	})
	var i int
	if blamed == "" && strings.HasPrefix(ce.Path, "devices[") {
		if _, err := fmt.Sscanf(ce.Path, "devices[%d]", &i); err == nil && i >= fileDevices {
			blamed = "device"
		}
	}
	if blamed == "" {
		return err
	}
	return &confcheck.ConfigError{Source: "--" + blamed, Err: ce.Err}
}
