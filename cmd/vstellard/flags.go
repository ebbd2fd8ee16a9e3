package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/vstellar/vstellar/daemon"
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
		runDir     = fs.String("run-dir", daemon.DefaultRunDir, "`directory` for the device and API sockets")
		logLevel   = fs.String("log-level", daemon.DefaultLogLevel, "log `level`: debug, info, warn or error")
		logFormat  = fs.String("log-format", daemon.DefaultLogFormat, "log `format`: text or json")
		timeout    = fs.Duration("shutdown-timeout", time.Duration(daemon.DefaultShutdownTimeout), "bound on a clean shutdown")
		pinBudget  = fs.Uint64("pin-budget", 0, "`bytes` of guest memory all devices may keep pinned (0: none for root, else RLIMIT_MEMLOCK)")
		mode       = daemon.DefaultSocketMode
		devices    deviceList
		o          options
	)
	fs.Var(&mode, "socket-mode", "permission `mode` of device sockets, octal")
	fs.Var(&devices, "device", "create a device `name`d so at start (repeatable)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
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
			cfg.ShutdownTimeout = daemon.Duration(*timeout)
		case "socket-mode":
			cfg.SocketMode = mode
		case "pin-budget":
			cfg.PinBudget = *pinBudget
		}
	})
	if err != nil {
		return o, fmt.Errorf("--run-dir: %w", err)
	}
	for _, name := range devices {
		cfg.Devices = append(cfg.Devices, daemon.DeviceSpec{Name: name})
	}
	if err := cfg.Validate(); err != nil {
		return o, err
	}
	o.cfg = cfg
	return o, nil
}
