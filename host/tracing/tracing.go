// Package tracing sets up OpenTelemetry tracing for the daemon: a tracer
// provider configured by the standard OTEL_* environment variables (or
// envoy ratelimit's TRACING_* ones in its mode), exported with OTLP over
// gRPC or HTTP, W3C trace context propagation, and the server
// instrumentation of the HTTP and gRPC listeners. Tracing is off unless
// the environment asks for it; off, nothing here is on the decision path.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Config says whether and how to trace.
type Config struct {
	// Enabled turns tracing on.
	Enabled bool
	// Protocol is the OTLP transport: "grpc" or "http/protobuf".
	Protocol string
	// Resource holds attributes that win over OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES (envoy ratelimit's TRACING_SERVICE_*).
	Resource []attribute.KeyValue
	// SampleRatio, when set, samples that share of the traces that start
	// here (children follow their parent's choice), instead of
	// OTEL_TRACES_SAMPLER.
	SampleRatio *float64
}

// FromEnv is the configuration the standard variables give: tracing is on
// when OTEL_TRACES_EXPORTER is "otlp", or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says no. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf (the specification's
// default). The exporter, the sampler and the resource read their own
// variables.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	var c Config
	exporter := strings.ToLower(get("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp", "none":
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: ruled exports traces with otlp (or none)", exporter)
	}
	c.Enabled = exporter == "otlp" || get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if disabled, _ := strconv.ParseBool(get("OTEL_SDK_DISABLED")); disabled || exporter == "none" {
		c.Enabled = false
	}
	c.Protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if c.Protocol == "" {
		c.Protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if c.Protocol == "" {
		c.Protocol = "http/protobuf"
	}
	if c.Protocol != "grpc" && c.Protocol != "http/protobuf" {
		return c, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", c.Protocol)
	}
	return c, nil
}

// Tracing is the daemon's tracer provider. A nil *Tracing is tracing off:
// its methods then return what costs nothing.
type Tracing struct {
	provider *sdktrace.TracerProvider
	prop     propagation.TextMapPropagator
}

// Start builds the tracer provider c asks for; nil when c is not enabled.
// version is the service's version.
func Start(ctx context.Context, c Config, version string) (*Tracing, error) {
	if !c.Enabled {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if c.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "ruled"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithAttributes(c.Resource...))
	if err != nil {
		return nil, fmt.Errorf("tracing: the resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if c.SampleRatio != nil {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))))
	}
	return &Tracing{provider: sdktrace.NewTracerProvider(opts...),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}, nil
}

// Tracer is the tracer of a part of the daemon; nil when tracing is off.
func (t *Tracing) Tracer(name string) trace.Tracer {
	if t == nil {
		return nil
	}
	return t.provider.Tracer(name)
}

// HTTP wraps h in a server span per request, continuing the trace the
// request's traceparent header names; h itself when tracing is off.
func (t *Tracing) HTTP(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "ruled", otelhttp.WithTracerProvider(t.provider), otelhttp.WithPropagators(t.prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
}

// GRPC is the server option that gives each call a server span,
// continuing the trace its traceparent metadata names; none when tracing
// is off.
func (t *Tracing) GRPC() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider), otelgrpc.WithPropagators(t.prop)))}
}

// Shutdown sends the spans still buffered and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
