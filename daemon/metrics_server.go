package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
)

// metricsServer serves /metrics over TCP; the zero value (no
// metrics_listen) does nothing.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
	log *slog.Logger
}

// listenMetrics binds the metrics address, if one is configured.
func (m *Manager) listenMetrics() (metricsServer, error) {
	if m.cfg.MetricsListen == "" {
		return metricsServer{}, nil
	}
	if m.cfg.Metrics == nil {
		return metricsServer{}, errors.New("metrics: metrics_listen is set but the program gave no metrics handler")
	}
	ln, err := net.Listen("tcp", m.cfg.MetricsListen)
	if err != nil {
		return metricsServer{}, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.cfg.Metrics(m))
	return metricsServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: apiReadHeaderTimeout,
			ReadTimeout:       apiReadTimeout,
			WriteTimeout:      apiReadTimeout + apiWriteSlack,
			IdleTimeout:       apiIdleTimeout,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		},
		ln:  ln,
		log: m.log,
	}, nil
}

// serve starts serving; a failure is sent on errc.
func (s metricsServer) serve(errc chan<- error) {
	if s.srv == nil {
		return
	}
	s.log.Info("serving metrics", "addr", s.ln.Addr().String()+"/metrics")
	go func() {
		if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics: %w", err)
		}
	}()
}

// shutdown stops serving, cutting off scrapes that outlive ctx.
func (s metricsServer) shutdown(ctx context.Context) {
	if s.srv == nil {
		return
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
}

// close releases an address that was never served.
func (s metricsServer) close() {
	if s.ln != nil {
		s.ln.Close()
	}
}
