package main

// The protocol floor of the envoy mode: envoy ratelimit's two faces served
// by the same libraries ruled serves them with (grpc-go with ruled's server
// options, net/http with its time-outs), answering every call with a canned
// decision of the same shape as ruled's, with no rules, no plugin and no
// Redis. What a server costs above it is its own; what the floor costs, no
// server built on those libraries can save. The HTTP face may instead be
// served by fasthttp, under the same limits, to measure what another HTTP
// server would save (the http-floor mode, httpfloor.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/host/httpapi"
)

// floorName names the floor in the envoy mode's report.
const floorName = "protocol floor"

// floorService answers ShouldRateLimit without deciding anything: denied=N
// descriptors are over their limit, probe=N ones admit 3 calls per value
// (so that the floor passes the harness's probe), every other is allowed.
type floorService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	probes sync.Map // probe value -> *atomic.Int64
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (f *floorService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i, d := range req.GetDescriptors() {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
			CurrentLimit:       grpcapi.RateLimitOf("", 1_000_000_000, time.Hour),
			LimitRemaining:     999_999_999,
			DurationUntilReset: durationpb.New(30 * time.Minute)}
		if f.over(d) {
			st.Code, st.LimitRemaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
	}
	return resp, nil
}

// over says whether d is over its limit by the floor's canned rules.
func (f *floorService) over(d *rlcommonv3.RateLimitDescriptor) bool {
	e := d.GetEntries()
	if len(e) == 0 {
		return false
	}
	switch e[0].GetKey() {
	case "denied":
		return true
	case "probe":
		n, _ := f.probes.LoadOrStore(e[0].GetValue(), new(atomic.Int64))
		return n.(*atomic.Int64).Add(1) > 3
	}
	return false
}

// Canned answers of POST /json, shaped as ruled's.
var (
	floorAllowed = []byte(`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1000000000,"unit":"HOUR"},"limitRemaining":999999999,"durationUntilReset":"1800s"}]}`)
	floorDenied  = []byte(`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"HOUR"},"durationUntilReset":"1800s"}]}`)
)

// floorHTTP serves /healthcheck and POST /json: it reads the body and
// answers the canned denial when it names a denied key, else the canned
// admission.
func floorHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthcheck":
		_, _ = io.WriteString(w, "OK")
	case "/json":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if bytes.Contains(body, []byte(`"denied"`)) {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write(floorDenied)
			return
		}
		_, _ = w.Write(floorAllowed)
	default:
		http.NotFound(w, r)
	}
}

// floorFast is floorHTTP for fasthttp.
func floorFast(c *fasthttp.RequestCtx) {
	switch string(c.Path()) {
	case "/healthcheck":
		_, _ = c.WriteString("OK")
	case "/json":
		c.SetContentType("application/json")
		if bytes.Contains(c.PostBody(), []byte(`"denied"`)) {
			c.SetStatusCode(fasthttp.StatusTooManyRequests)
			_, _ = c.Write(floorDenied)
			return
		}
		_, _ = c.Write(floorAllowed)
	default:
		c.NotFound()
	}
}

// The floor's HTTP servers (-floor-http): net/http, fasthttp, and fasthttp
// serving floorHTTP through its net/http adaptor, as an existing net/http
// handler would be served.
const (
	floorNetHTTP  = "net/http"
	floorFastHTTP = "fasthttp"
	floorAdaptor  = "fasthttp+adaptor"
)

// runFloor is the -serve-floor mode: serveFloor until SIGINT or SIGTERM.
func runFloor(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveFloor(ctx, c.floorHTTP)
}

// httpServer is what the floor needs of an HTTP server.
type httpServer interface {
	Serve(net.Listener) error
	Close() error
}

// floorHTTPServer returns the floor's HTTP face served by impl: net/http
// as ruled serves it (httpapi.NewServer's time-outs), or fasthttp under the
// same time-outs and grpcapi.MaxJSONBody, with its own handler or through
// its net/http adaptor.
func floorHTTPServer(impl string) (httpServer, error) {
	fast := func(h fasthttp.RequestHandler) httpServer {
		hs := httpapi.NewServer(nil)
		return &fastServer{&fasthttp.Server{Handler: h, ReadTimeout: hs.ReadTimeout, WriteTimeout: hs.WriteTimeout,
			IdleTimeout: hs.IdleTimeout, MaxRequestBodySize: grpcapi.MaxJSONBody}}
	}
	switch impl {
	case "", floorNetHTTP:
		return httpapi.NewServer(http.HandlerFunc(floorHTTP)), nil
	case floorFastHTTP:
		return fast(floorFast), nil
	case floorAdaptor:
		return fast(fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(floorHTTP))), nil
	}
	return nil, fmt.Errorf("-floor-http %q: want %s, %s or %s", impl, floorNetHTTP, floorFastHTTP, floorAdaptor)
}

// fastServer is a fasthttp.Server as an httpServer.
type fastServer struct{ *fasthttp.Server }

func (f *fastServer) Close() error { return f.Shutdown() }

// serveFloor serves the floor, its HTTP face by httpImpl, on the listeners
// envoy ratelimit's environment names (HOST and PORT for HTTP, GRPC_HOST
// and GRPC_PORT for gRPC) until either fails or ctx ends.
func serveFloor(ctx context.Context, httpImpl string) error {
	hs, err := floorHTTPServer(httpImpl)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("HOST"), os.Getenv("PORT")))
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	gl, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("GRPC_HOST"), os.Getenv("GRPC_PORT")))
	if err != nil {
		hl.Close()
		return fmt.Errorf("floor: %w", err)
	}
	// ruled's transport options: grpcapi.NewServer's, with the floor's
	// service in place of ruled's.
	gs := grpc.NewServer(grpcapi.ServerOptions()...)
	rlsv3.RegisterRateLimitServiceServer(gs, &floorService{})
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(hl) }()
	go func() { errc <- gs.Serve(gl) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	gs.Stop()
	_ = hs.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
