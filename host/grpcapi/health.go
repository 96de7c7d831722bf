package grpcapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// RateLimitServiceName is the rate limit service's name in the health
// service: what an Envoy health check of the RLS cluster names.
var RateLimitServiceName = rlsv3.RateLimitService_ServiceDesc.ServiceName

// DefaultHealthEvery is how often Health.Follow asks whether the daemon is
// ready.
const DefaultHealthEvery = 250 * time.Millisecond

// Health is the standard gRPC health service (Check and Watch) for the
// overall server ("") and RateLimitServiceName. Both report SERVING while
// the daemon is ready (Follow) and NOT_SERVING otherwise, and for good once
// Shutdown (health.Server's) was called, whatever Follow finds. Its methods are safe for concurrent use.
type Health struct {
	*health.Server
	log *slog.Logger

	mu      sync.Mutex
	serving bool
	stopped chan struct{} // closed by EndWatches
	once    sync.Once
}

// NewHealth returns a health service that reports NOT_SERVING until Follow
// finds the daemon ready; it logs changes to log (nil: nowhere).
func NewHealth(log *slog.Logger) *Health {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Health{Server: health.NewServer(), log: log, stopped: make(chan struct{})}
	h.set(false)
	return h
}

// EnvoyRatelimitServiceName is the name envoy ratelimit reports its health
// under; it follows readiness too, so that a check written for envoy
// ratelimit reads ruled's.
const EnvoyRatelimitServiceName = "ratelimit"

// services are the names whose status follows readiness.
func services() []string { return []string{"", RateLimitServiceName, EnvoyRatelimitServiceName} }

// ServeHTTP answers envoy ratelimit's GET /healthcheck from the same state
// as the gRPC health service: 200 "OK" while serving, else 500.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := h.Check(r.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, "NOT_SERVING", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("OK"))
}

// set reports serving for every service.
func (h *Health) set(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, s := range services() {
		h.SetServingStatus(s, st)
	}
}

// Follow asks ready every interval (DefaultHealthEvery when every <= 0)
// and sets the services' status from its answer, logging each change,
// until ctx ends.
func (h *Health) Follow(ctx context.Context, ready func(context.Context) error, every time.Duration) {
	if every <= 0 {
		every = DefaultHealthEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, every)
		err := ready(rctx)
		cancel()
		h.mu.Lock()
		changed := h.serving != (err == nil)
		h.serving = err == nil
		h.mu.Unlock()
		if changed {
			h.set(err == nil)
			if err == nil {
				h.log.Info("gRPC health: SERVING")
			} else {
				h.log.Warn("gRPC health: NOT_SERVING", "reason", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// EndWatches ends every Watch stream, open or to come, so that a graceful
// stop does not wait on them; call it after Shutdown, once the watchers
// were told NOT_SERVING.
func (h *Health) EndWatches() { h.once.Do(func() { close(h.stopped) }) }

// Watch implements healthpb.HealthServer: health.Server's Watch, ended by
// EndWatches after a last NOT_SERVING.
func (h *Health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.Server.Watch(req, watchStream{stream, ctx})
	select {
	case <-h.stopped:
		if stream.Context().Err() == nil {
			// Ended by EndWatches: the last word is NOT_SERVING, even if
			// the stream was ended before it could pass Shutdown's on.
			return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
		}
	default:
	}
	return err
}

// watchStream is a Watch stream whose context ends with EndWatches too.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }
