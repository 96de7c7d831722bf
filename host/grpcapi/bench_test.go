package grpcapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/internal/redisinfo"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

// BenchmarkShouldRateLimit is one RLS call of one descriptor on rules
// translated from an envoy ratelimit config, as ruled envoy-ratelimit
// serves it (autopipelined Redis, no RateLimit headers), in process: ruled's
// own cost of a call, without gRPC's transport.
func BenchmarkShouldRateLimit(b *testing.B) {
	svc := benchService(b)
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: strconv.Itoa(i)}}}}}
	}
	runDecisions(b, func(i int) error {
		resp, err := svc.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			return fmt.Errorf("%v %v", resp.GetOverallCode(), err)
		}
		return nil
	})
}

// BenchmarkJSONHandler is BenchmarkShouldRateLimit through envoy
// ratelimit's HTTP face, POST /json, in process: the handler's cost of a
// decision, without HTTP's transport.
func BenchmarkJSONHandler(b *testing.B) {
	h := grpcapi.JSONHandler(benchService(b), nil)
	bodies := make([]string, 10000)
	for i := range bodies {
		bodies[i] = `{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"` + strconv.Itoa(i) + `"}]}]}`
	}
	runDecisions(b, func(i int) error {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(bodies[i%len(bodies)])))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"overallCode":"OK"`) {
			return fmt.Errorf("%d %s", w.Code, w.Body)
		}
		return nil
	})
}

// runDecisions runs decide for b.N decisions from 16 goroutines per CPU,
// each with the next index, and reports allocations and CPU per decision.
func runDecisions(b *testing.B, decide func(i int) error) {
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := decide(int(next.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchService is ruled envoy-ratelimit's service on bench/envoy.go's
// config against a private Redis.
func benchService(b testing.TB) *grpcapi.RateLimitService {
	rs := redistest.Start(b)
	if bb, ok := b.(*testing.B); ok {
		b.Cleanup(reportRedisCPU(bb, rs))
	}
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	b.Cleanup(func() { _ = rc.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(rc, capability.Options{Pipeline: redis.DefaultBlockingAutoPipelineOptions()}),
		Plugins: builtin.All()})
	if err != nil {
		b.Fatal(err)
	}
	// bench -envoy's config, so that these figures and the harness's are of
	// one workload.
	config, err := os.ReadFile("../../bench/envoy-config.yaml")
	if err != nil {
		b.Fatal(err)
	}
	files, _, err := envoyconfig.Translate([]envoyconfig.Source{{Name: "bench.yaml", Content: config}}, envoyconfig.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.LoadFrom(context.Background(), host.RuleSource{Origin: "bench", Read: func(context.Context) (*rules.Files, error) {
		return rules.ParseSources(envoyconfig.RuleSources(files))
	}}); err != nil {
		b.Fatal(err)
	}
	return grpcapi.NewRateLimitService(e, nil, grpcapi.ServiceOptions{OmitHeaders: true})
}

// reportRedisCPU returns the function that reports Redis's CPU time
// (redis-cpu-ns/op) and script commands (scripts/op) per operation since
// it was called; the few script loads before b's timer starts are within
// the noise.
func reportRedisCPU(b *testing.B, rs *redistest.Server) func() {
	read := func() (time.Duration, int64) {
		ctx := context.Background()
		cpu, err := redisinfo.CPU(ctx, rs.Client())
		if err != nil {
			b.Fatal(err)
		}
		calls, err := redisinfo.ScriptCalls(ctx, rs.Client())
		if err != nil {
			b.Fatal(err)
		}
		return cpu, calls
	}
	cpu0, calls0 := read()
	return func() {
		if b.N > 1 {
			cpu, calls := read()
			b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "redis-cpu-ns/op")
			b.ReportMetric(float64(calls-calls0)/float64(b.N), "scripts/op")
		}
	}
}

// reportCPU resets b's timer and returns the function that reports this
// process's CPU time per operation since (cpu-ns/op): the decisions wait on
// Redis, so time per operation is mostly Redis's and the round trips'.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	start := cpu()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
	}
}
