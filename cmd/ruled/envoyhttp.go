package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ruled-dev/ruled/host/grpcapi"
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
