package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// otlpReceiver is an OTLP trace receiver over gRPC, in process: it keeps
// every span exported to it, with its resource's service.name.
type otlpReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	*tracepb.Span
}

func startOTLP(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

// Export implements the collector's trace service.
func (r *otlpReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service, s})
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// find returns the span named name in trace traceID, if it came.
func (r *otlpReceiver) find(traceID []byte, name string) (receivedSpan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if bytes.Equal(s.TraceId, traceID) && s.Name == name {
			return s, true
		}
	}
	return receivedSpan{}, false
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			if s := kv.GetValue().GetStringValue(); s != "" {
				return s
			}
			return kv.GetValue().String()
		}
	}
	return ""
}

// traceparent is a W3C traceparent header for a new trace, with the
// trace's and the parent span's ids.
func traceparent(seed byte) (header string, traceID, spanID []byte) {
	traceID = bytes.Repeat([]byte{seed}, 16)
	spanID = bytes.Repeat([]byte{seed + 1}, 8)
	return "00-" + hex.EncodeToString(traceID) + "-" + hex.EncodeToString(spanID) + "-01", traceID, spanID
}

// checkTrace waits for the spans of one decision in trace traceID: the
// server span named server, a child of the caller's span parent; the
// engine's span named check, its child, with the decision's attributes;
// and a Redis call, the check's child. It returns the server span.
func checkTrace(t *testing.T, r *otlpReceiver, traceID, parent []byte, server, check, rule string) receivedSpan {
	t.Helper()
	var srv, chk, call receivedSpan
	waitFor(t, 20*time.Second, "the spans of "+server, func() bool {
		var ok1, ok2, ok3 bool
		srv, ok1 = r.find(traceID, server)
		chk, ok2 = r.find(traceID, check)
		call, ok3 = r.find(traceID, "redis EVALSHA")
		return ok1 && ok2 && ok3
	})
	if !bytes.Equal(srv.ParentSpanId, parent) {
		t.Errorf("%s's parent %x, want the caller's span %x", server, srv.ParentSpanId, parent)
	}
	if !bytes.Equal(chk.ParentSpanId, srv.SpanId) {
		t.Errorf("%s's parent %x, want %s's %x", check, chk.ParentSpanId, server, srv.SpanId)
	}
	if !bytes.Equal(call.ParentSpanId, chk.SpanId) {
		t.Errorf("the Redis call's parent %x, want %s's %x", call.ParentSpanId, check, chk.SpanId)
	}
	for k, want := range map[string]string{"ruled.rule": rule, "ruled.plugin": "fixedwindow", "ruled.decision": "allowed", "ruled.allowed": "bool_value:true"} {
		if got := attr(chk.Attributes, k); got != want {
			t.Errorf("%s attribute %s = %q, want %q", check, k, got, want)
		}
	}
	for k, want := range map[string]string{"ruled.plugin": "fixedwindow", "db.operation.name": "EVALSHA", "ruled.rule": rule} {
		if got := attr(call.Attributes, k); got != want {
			t.Errorf("the Redis call's attribute %s = %q, want %q", k, got, want)
		}
	}
	return srv
}

// TestTracingOTLP: with the standard OTEL_* variables, ruled serve exports
// a span per HTTP check and per RLS call, continuing the caller's W3C
// trace context (traceparent header, gRPC metadata), with the engine's
// check span and a span per Redis call below, to an OTLP receiver.
func TestTracingOTLP(t *testing.T) {
	r := startOTLP(t)
	grpcAddr := freePort(t)
	d := spawnServeEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.addr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=ruled-test"},
		"--rules", writeFile(t, t.TempDir(), "rules.yaml", envoyContractRules+`  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
`), "--grpc-listen", grpcAddr)
	d.waitReady(20 * time.Second)

	header, traceID, parent := traceparent(0x11)
	req, _ := http.NewRequest(http.MethodPost, d.base+"/v1/check", bytes.NewBufferString(`{"request": {"ip": "192.0.2.7", "method": "GET", "path": "/"}}`))
	req.Header.Set("traceparent", header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %d", resp.StatusCode)
	}
	if srv := checkTrace(t, r, traceID, parent, "POST /v1/check", "ruled.check", "per-ip"); srv.service != "ruled-test" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's ruled-test", srv.service)
	}

	header, traceID, parent = traceparent(0x21)
	c := dialRLS(t, grpcAddr)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "traceparent", header), 5*time.Second)
	defer cancel()
	if _, err := c.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: entriesList("user", "u1")}); err != nil {
		t.Fatal(err)
	}
	checkTrace(t, r, traceID, parent, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "ruled.check", "per-user")
}

// TestTracingEnvoyMode: envoy ratelimit's TRACING_* variables turn tracing
// on in its mode, with its service name.
func TestTracingEnvoyMode(t *testing.T) {
	r := startOTLP(t)
	rdb := redistest.Start(t)
	root := t.TempDir()
	conf := filepath.Join(root, "config")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, conf, "edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	rl := startRatelimit(t, buildRuled(t), []string{"RUNTIME_ROOT=" + root, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr(),
		"USE_STATSD=false", "TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.addr,
		"OTEL_BSP_SCHEDULE_DELAY=100"}, "envoy-ratelimit")
	waitFor(t, 30*time.Second, "/healthcheck 200", func() bool { return rl.healthcheck() == http.StatusOK })
	header, traceID, parent := traceparent(0x31)
	c := dialRLS(t, rl.grpc)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "traceparent", header), 5*time.Second)
	defer cancel()
	if _, err := c.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: entriesList("user", "u1")}); err != nil {
		t.Fatal(err)
	}
	srv := checkTrace(t, r, traceID, parent, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "ruled.check", "edge-user")
	if srv.service != "RateLimit" {
		t.Errorf("service.name %q, want TRACING_SERVICE_NAME's default RateLimit", srv.service)
	}
}
