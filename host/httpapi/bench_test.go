package httpapi

import (
	"context"
	"io"
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

// benchBodies are check bodies for the decoding benchmarks: the one the wrk
// profile sent, and a fuller one with maps.
var benchBodies = []struct{ name, body string }{
	{"small", `{"request":{"ip":"10.0.1.2","method":"GET","path":"/"}}`},
	{"full", `{"request": {"ip": "203.0.113.7", "method": "POST", "path": "/login", "headers": {"X-Tier": "pro"}}, "attrs": {"tenant": "acme"}}`},
}

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// cleared between requests, as net/http's does.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkDecodeCheck is decodeCheck alone on a reused request, so that
// httptest.NewRequest does not hide the decoding cost.
func BenchmarkDecodeCheck(b *testing.B) {
	for _, bb := range benchBodies {
		b.Run(bb.name, func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			rd := strings.NewReader(bb.body)
			r := httptest.NewRequest(http.MethodPost, "/v1/check", rd)
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(bb.body)
				r.Body = io.NopCloser(rd)
				if _, e := decodeCheck(w, r); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// BenchmarkCheckHandler is the whole handler on a reused request and writer:
// what the HTTP layer costs per check on top of net/http's own work.
func BenchmarkCheckHandler(b *testing.B) {
	for _, bb := range benchBodies {
		b.Run(bb.name, func(b *testing.B) {
			srv := New(Options{Checker: fixedChecker{}})
			w := &discardWriter{h: http.Header{}}
			rd := strings.NewReader(bb.body)
			r := httptest.NewRequest(http.MethodPost, "/v1/check", rd)
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(bb.body)
				r.Body = io.NopCloser(rd)
				clear(w.h)
				srv.ServeHTTP(w, r)
				if w.status != http.StatusOK {
					b.Fatal(w.status)
				}
			}
		})
	}
}
