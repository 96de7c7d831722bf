package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ruled-dev/ruled/host/envoystats"
	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/host/metrics"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/internal/lograte"
)

// envoyHTTP adds envoy ratelimit's paths to ruled's HTTP API: GET
// /healthcheck (the gRPC health service's answer: 200 "OK" or 500) and
// POST /json (a RateLimitRequest as JSON).
func envoyHTTP(api http.Handler, health *grpcapi.Health, rls *grpcapi.RateLimitService, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthcheck", health)
	mux.Handle("/json", grpcapi.JSONHandler(rls, log))
	mux.Handle("/", api)
	return mux
}

// startEnvoyMetrics serves ruled's Prometheus metrics on envoy
// ratelimit's PROMETHEUS_ADDR and PROMETHEUS_PATH (USE_PROMETHEUS); it
// does nothing unless e asks for it.
func startEnvoyMetrics(e *envoyServe, metrics http.Handler, log *slog.Logger) (stop func(), err error) {
	if e == nil || e.prometheusAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", e.prometheusAddr)
	if err != nil {
		return nil, fmt.Errorf("prometheus listen on %s: %w", e.prometheusAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(e.prometheusPath, metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("prometheus listener stopped", "err", err)
		}
	}()
	log.Info("prometheus metrics serving", "listen", ln.Addr().String(), "path", e.prometheusPath)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// startEnvoyStats starts sending envoy ratelimit's stats to statsd when e
// asks for it; the sink is nil otherwise. stop sends the last counts.
func startEnvoyStats(e *envoyServe, log *slog.Logger) (*envoyStats, func(), error) {
	if e == nil || e.statsd == "" {
		return nil, func() {}, nil
	}
	sink, err := envoystats.New(envoystats.Options{Addr: e.statsd, Flush: e.statsFlush, NearLimitRatio: e.nearLimitRatio,
		Logger: slog.New(lograte.NewHandler(log.With("component", "statsd").Handler(), 10*time.Second))})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sink.Run(ctx); close(done) }()
	log.Info("envoy ratelimit stats to statsd", "statsd", e.statsd, "flush", e.statsFlush)
	return &envoyStats{sink}, func() { cancel(); <-done; _ = sink.Close() }, nil
}

// envoyStats is the statsd sink of envoy ratelimit's stats; its methods
// work on a nil one, which sends nothing.
type envoyStats struct{ sink *envoystats.Sink }

// CallObserver is what each RLS call is told to.
func (s *envoyStats) CallObserver() grpcapi.CallObserver {
	if s == nil {
		return nil
	}
	return s.sink
}

// statsObserver is ruled's metrics, with the config loads counted in
// envoy ratelimit's stats too.
type statsObserver struct {
	*metrics.Metrics
	stats *envoyStats
}

// Reload implements host.Observer.
func (o statsObserver) Reload(err error, rules int) {
	o.Metrics.Reload(err, rules)
	o.stats.sink.ConfigLoad(err)
}

// translation is the last translation of envoy configs to load: its
// rules' stats keys go to the stats, and GET /rlconfig on the debug
// listener shows its rule files.
type translation struct {
	stats *envoyStats
	files atomic.Pointer[[]envoyconfig.File]
}

// set takes a new translation.
func (t *translation) set(files []envoyconfig.File) {
	t.files.Store(&files)
	if t.stats != nil {
		t.stats.sink.SetKeys(files)
	}
}

// ServeHTTP writes the translated rule files, as envoy ratelimit's
// /rlconfig writes the config it serves.
func (t *translation) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	files := t.files.Load()
	if files == nil {
		_, _ = io.WriteString(w, "# no envoy ratelimit config loaded yet\n")
		return
	}
	for _, f := range *files {
		_, _ = fmt.Fprintf(w, "# ---- %s (domain %q, from %s)\n", f.Name, f.Domain, f.Source)
		_, _ = w.Write(f.Content)
		_, _ = io.WriteString(w, "\n")
	}
}
