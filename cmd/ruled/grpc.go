package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/host/rlqs"
)

// grpcStopTimeout bounds the graceful stop of the gRPC server; past it the
// remaining calls are cut.
const grpcStopTimeout = 10 * time.Second

// grpcServer is the running gRPC server: Envoy's rate limit service and
// the health service that follows readiness. The zero value (no
// --grpc-listen) does nothing and is never served.
type grpcServer struct {
	srv        *grpc.Server
	health     *grpcapi.Health
	service    grpcapi.ServiceOptions
	stopHealth context.CancelFunc
	served     chan error
}

// grpcOptions configure the gRPC listener.
type grpcOptions struct {
	addr    string      // "" for none
	tls     *tls.Config // nil for plaintext
	service grpcapi.ServiceOptions
	envoy   *envoyServe // envoy ratelimit's connection ages; nil for ruled's
	extra   []grpc.ServerOption
	// rlqs, when not nil, is served too: Envoy's rate limit quota service.
	rlqs *rlqs.Server
}

// startGRPC serves Envoy's rate limit service on o.addr and the gRPC
// health service, whose services follow ready (grpcapi.Health.Follow).
// With an empty addr nothing starts.
func startGRPC(o grpcOptions, c grpcapi.Checker, ready func(context.Context) error, log *slog.Logger) (*grpcServer, error) {
	if o.addr == "" {
		return &grpcServer{}, nil
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("grpc listen on %s: %w", o.addr, err)
	}
	var opts []grpc.ServerOption
	if o.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.tls)))
	}
	if o.envoy != nil {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: o.envoy.grpcMaxAge, MaxConnectionAgeGrace: o.envoy.grpcMaxAgeGrace}))
	}
	opts = append(opts, o.extra...)
	h := grpcapi.NewHealth(log)
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpcapi.NewServer(c, h, log, o.service, opts...)
	if o.rlqs != nil {
		rlqsv3.RegisterRateLimitQuotaServiceServer(srv, o.rlqs)
	}
	g := &grpcServer{srv: srv, health: h, service: o.service, stopHealth: cancel, served: make(chan error, 1)}
	go h.Follow(ctx, ready, grpcapi.DefaultHealthEvery)
	go func() { g.served <- g.srv.Serve(ln) }()
	log.Info("ruled serving gRPC (Envoy rate limit service)", "listen", ln.Addr().String(), "tls", o.tls != nil, "rlqs", o.rlqs != nil)
	return g, nil
}

// Served receives the error that ends serving; nil (never receives)
// without a server.
func (g *grpcServer) Served() <-chan error {
	if g.srv == nil {
		return nil
	}
	return g.served
}

// NotServing makes the health service report NOT_SERVING for good: the
// first step of a shutdown, so that Envoy stops sending before the
// listener closes.
func (g *grpcServer) NotServing() {
	if g.health == nil {
		return
	}
	g.stopHealth()
	g.health.Shutdown()
}

// Stop reports NOT_SERVING, ends the health Watch streams and stops the
// server gracefully, within grpcStopTimeout; past it the remaining calls
// are cut.
func (g *grpcServer) Stop() {
	if g.srv == nil {
		return
	}
	g.NotServing()
	g.health.EndWatches()
	stopped := make(chan struct{})
	go func() { g.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grpcStopTimeout):
		g.srv.Stop()
	}
}
