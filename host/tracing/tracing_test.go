package tracing_test

import (
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host/tracing"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestFromEnv: tracing is off unless the standard variables ask for it,
// and then exported over the protocol they name.
func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env      []string
		enabled  bool
		protocol string
	}{
		{nil, false, "http/protobuf"},
		{[]string{"OTEL_SERVICE_NAME=x"}, false, "http/protobuf"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}, true, "http/protobuf"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces"}, true, "http/protobuf"},
		{[]string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, true, "grpc"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=x", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf"}, true, "http/protobuf"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=x", "OTEL_SDK_DISABLED=true"}, false, "http/protobuf"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=x", "OTEL_TRACES_EXPORTER=none"}, false, "http/protobuf"},
	} {
		c, err := tracing.FromEnv(env(tc.env...))
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if c.Enabled != tc.enabled || c.Protocol != tc.protocol {
			t.Errorf("%v: enabled %v over %s, want %v over %s", tc.env, c.Enabled, c.Protocol, tc.enabled, tc.protocol)
		}
	}
	for _, bad := range [][]string{{"OTEL_TRACES_EXPORTER=zipkin"}, {"OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}} {
		if _, err := tracing.FromEnv(env(bad...)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestOffCostsNothing: tracing off is a nil *Tracing whose methods give
// nothing to run: no tracer, the handler itself, no server option.
func TestOffCostsNothing(t *testing.T) {
	var tr *tracing.Tracing
	if tr.Tracer("x") != nil || tr.GRPC() != nil || tr.Shutdown(t.Context()) != nil {
		t.Fatal("a nil Tracing gives something")
	}
	if started, err := tracing.Start(t.Context(), tracing.Config{}, "v"); started != nil || err != nil {
		t.Fatalf("Start of a disabled config: %v %v", started, err)
	}
}
