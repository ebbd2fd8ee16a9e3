package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// API server timeouts. Writes must outlast the slowest handler, a DELETE
// bounded by the shutdown timeout.
const (
	apiReadHeaderTimeout = 5 * time.Second
	apiReadTimeout       = 10 * time.Second
	apiIdleTimeout       = 60 * time.Second
	apiWriteSlack        = 10 * time.Second
)

// Run creates the configured devices, serves the management API on
// <RunDir>/vstellard.sock and returns when ctx ends, after a clean
// shutdown (Shutdown, bounded by the configured timeout): the API stops
// first, then every device is destroyed. A start-up error (run dir, API
// socket, a configured device) is returned after undoing what was done.
// Run may be called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running || m.closing {
		m.mu.Unlock()
		return errors.New("manager: Run called twice or after Shutdown")
	}
	m.running = true
	m.mu.Unlock()

	timeout := time.Duration(m.cfg.ShutdownTimeout)
	// shutdown undoes a failed start.
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		_ = m.Shutdown(sctx)
	}

	if err := m.prepareRunDir(); err != nil {
		return err
	}
	if err := m.startFabric(ctx); err != nil {
		shutdown()
		return err
	}
	ln, sock, err := listenSocket(m.APISocket(), 0o600)
	if err != nil {
		shutdown() // removes the run dir if we created it
		return fmt.Errorf("management API: %w", err)
	}
	metrics, err := m.listenMetrics()
	if err != nil {
		ln.Close()
		_ = sock.remove()
		shutdown()
		return err
	}
	for _, spec := range m.cfg.Devices {
		if _, err := m.CreateDevice(ctx, spec); err != nil {
			ln.Close()
			_ = sock.remove()
			metrics.close()
			shutdown()
			return fmt.Errorf("creating configured device: %w", err)
		}
	}

	srv := &http.Server{
		Handler:           m.Handler(),
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      timeout + apiWriteSlack,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- fmt.Errorf("management API: %w", srv.Serve(ln)) }()
	metrics.serve(serveErr)
	close(m.ready)
	m.log.Info("vstellard ready", "run_dir", m.cfg.RunDir, "api", m.APISocket(), "devices", len(m.cfg.Devices))

	var runErr error
	select {
	case <-ctx.Done():
		m.log.Info("shutting down", "cause", context.Cause(ctx))
	case err := <-serveErr:
		runErr = fmt.Errorf("stopped serving: %w", err)
		m.log.Error("serving failed; shutting down", "err", err)
	}

	// One deadline for the whole shutdown. The API stops first: no new
	// requests; requests in flight get a quarter of the budget, then are
	// cut off (device operations they started finish under Shutdown).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	actx, acancel := context.WithTimeout(sctx, timeout/4)
	if err := srv.Shutdown(actx); err != nil {
		m.log.Warn("management API did not stop in time; closing connections", "err", err)
		srv.Close()
	}
	metrics.shutdown(actx)
	acancel()
	if err := sock.remove(); err != nil {
		m.log.Warn("management API socket", "err", err)
	}
	if err := m.Shutdown(sctx); err != nil {
		m.log.Error("shutdown incomplete", "err", err)
		runErr = errors.Join(runErr, err)
	}
	return runErr
}
