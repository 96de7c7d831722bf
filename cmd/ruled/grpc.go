package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ruled-dev/ruled/host/grpcapi"
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
	stopHealth context.CancelFunc
	served     chan error
}

// startGRPC serves Envoy's rate limit service on addr, over TLS with
// tlsConf when it is not nil, and the gRPC health service, whose services
// follow ready (grpcapi.Health.Follow); refuseRefunds refuses negative
// hits. With an empty addr nothing starts.
func startGRPC(addr string, tlsConf *tls.Config, c grpcapi.Checker, refuseRefunds bool, ready func(context.Context) error, log *slog.Logger) (*grpcServer, error) {
	if addr == "" {
		return &grpcServer{}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("grpc listen on %s: %w", addr, err)
	}
	var opts []grpc.ServerOption
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	h := grpcapi.NewHealth(log)
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpcapi.NewServer(c, h, log, grpcapi.ServiceOptions{RefuseRefunds: refuseRefunds}, opts...)
	g := &grpcServer{srv: srv, health: h, stopHealth: cancel, served: make(chan error, 1)}
	go h.Follow(ctx, ready, grpcapi.DefaultHealthEvery)
	go func() { g.served <- g.srv.Serve(ln) }()
	log.Info("ruled serving gRPC (Envoy rate limit service)", "listen", ln.Addr().String(), "tls", tlsConf != nil)
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
