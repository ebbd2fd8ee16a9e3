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
	"syscall"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/metrics"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "vstellard: %v\n", err)
		return 2
	}
	if opts.version {
		fmt.Fprintf(stdout, "vstellard %s (%s)\n", version, runtime.Version())
		return 0
	}
	cfg := opts.cfg
	log, err := daemon.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "vstellard: %v\n", err)
		return 2
	}
	cfg.Factory = daemon.StellarDevice
	cfg.Metrics = func(m *daemon.Manager) http.Handler { return metrics.Handler(m, log) }
	m, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "vstellard: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("vstellard starting", "version", version, "pid", os.Getpid(), "run_dir", cfg.RunDir)
	if err := m.Run(ctx); err != nil {
		log.Error("vstellard failed", "err", err)
		fmt.Fprintf(stderr, "vstellard: %v\n", err)
		return 1
	}
	log.Info("vstellard stopped")
	return 0
}
