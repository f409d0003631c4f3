package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsPath is where `peer run --metrics` serves the metrics, go-libp2p's
// customary path.
const metricsPath = "/debug/metrics/prometheus"

// newMetricsRegistry is a fresh registry with the Go runtime's and the
// process's collectors, for the peer's components to register on.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// metricsHandler serves g at metricsPath.
func metricsHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}
