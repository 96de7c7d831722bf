package main

import (
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

// startGRPC serves Envoy's rate limit service on addr, over TLS with
// tlsConf when it is not nil. It returns a stop function (graceful, bounded
// by grpcStopTimeout) and a channel that receives the error that ends
// serving; refuseRefunds refuses negative hits. With an empty addr nothing starts: stop does nothing and the
// channel never receives.
func startGRPC(addr string, tlsConf *tls.Config, c grpcapi.Checker, refuseRefunds bool, log *slog.Logger) (stop func(), served <-chan error, err error) {
	if addr == "" {
		return func() {}, nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("grpc listen on %s: %w", addr, err)
	}
	var opts []grpc.ServerOption
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	srv := grpcapi.NewServerWith(c, log, grpcapi.ServiceOptions{RefuseRefunds: refuseRefunds}, opts...)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("ruled serving gRPC (Envoy rate limit service)", "listen", ln.Addr().String(), "tls", tlsConf != nil)
	stop = func() {
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(grpcStopTimeout):
			srv.Stop()
		}
	}
	return stop, done, nil
}
