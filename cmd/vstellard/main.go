package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/metrics"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses (docs/operations.md). The systemd unit's
// RestartPreventExitStatus=2 keeps a daemon whose configuration is wrong
// from being restarted in a loop: only exitFailed is worth a restart.
const (
	exitFailed = 1 // a failure at run time a restart may cure
	exitConfig = 2 // bad flags or configuration: a restart cannot help
)

// exitStatus is the status for an error of New or Run: a configured
// device the daemon refuses (a bad spec, a name whose GID another device
// holds) is a configuration error.
func exitStatus(err error) int {
	if errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrExists) {
		return exitConfig
	}
	return exitFailed
}

// oneLine keeps an error message on one line (errors.Join puts each
// error on its own).
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "vstellard: %v\n", oneLine(err))
		return exitConfig
	}
	if opts.version {
		fmt.Fprintf(stdout, "vstellard %s (%s)\n", version, runtime.Version())
		return 0
	}
	cfg := opts.cfg
	log, err := daemon.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "vstellard: %v\n", oneLine(err))
		return exitConfig
	}
	cfg.Factory = daemon.StellarDevice
	cfg.Metrics = func(m *daemon.Manager) http.Handler { return metrics.Handler(m, log) }
	m, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "vstellard: %v\n", oneLine(err))
		return exitStatus(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("vstellard starting", "version", version, "pid", os.Getpid(), "run_dir", cfg.RunDir)
	if err := m.Run(ctx); err != nil {
		log.Error("vstellard failed", "err", err)
		fmt.Fprintf(stderr, "vstellard: %v\n", oneLine(err))
		return exitStatus(err)
	}
	log.Info("vstellard stopped")
	return 0
}
