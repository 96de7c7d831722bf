package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/sdk"
)

// fixedChecker answers every check with one allowed rule, so that the
// benchmark measures the HTTP layer alone.
type fixedChecker struct{}

func (fixedChecker) Check(_ context.Context, req *host.CheckRequest) host.Result {
	return host.Result{Allowed: true, Results: []host.RuleResult{{Rule: "per-ip", Subject: req.Request.IP, Plugin: "fixedwindow",
		Decision: sdk.Decision{Allowed: true, Granted: 1, Limit: 100, Remaining: 42, Window: time.Minute, Reset: 30 * time.Second}}}}
}

// BenchmarkCheckHTTPLayer is the decoding, header and encoding work of one
// POST /v1/check, without a network or an engine.
func BenchmarkCheckHTTPLayer(b *testing.B) {
	srv := New(Options{Checker: fixedChecker{}})
	body := `{"request": {"ip": "203.0.113.7", "method": "POST", "path": "/login", "headers": {"X-Tier": "pro"}}, "attrs": {"tenant": "acme"}}`
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
