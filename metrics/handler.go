package metrics

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry returns a private registry holding a Collector for src and the
// Go runtime and process collectors.
func Registry(src Source) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(src), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves src's metrics at any path (mount it on /metrics). log
// receives exposition errors.
func Handler(src Source, log *slog.Logger) http.Handler {
	reg := Registry(src)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg,
		EnableOpenMetrics: true,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Scrapes of a thousand devices are cheap, but never let a slow
		// scraper pile them up.
		MaxRequestsInFlight: 4,
	})
}
