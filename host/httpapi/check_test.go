package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/sdk"
)

// recorder is a Checker that records what it was asked and answers with a
// fixed result: these tests are about the HTTP layer alone.
type recorder struct {
	mu     sync.Mutex
	got    []*host.CheckRequest
	answer host.Result
}

func (r *recorder) Check(_ context.Context, req *host.CheckRequest) host.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req)
	return r.answer
}

func post(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	return rec
}

func TestBadInputGets400WithAReason(t *testing.T) {
	rec := &recorder{}
	srv := New(Options{Checker: rec})
	for _, tc := range []struct {
		name, body, code, msg string
	}{
		{"empty", "", "invalid_json", "empty"},
		{"not json", "hello", "invalid_json", "invalid JSON"},
		{"truncated", `{"request": {"ip": "1.2.3.4"`, "invalid_json", "ends in the middle"},
		{"trailing", `{} {}`, "invalid_json", "at byte 3: invalid character '{' after top-level value"},
		{"hits string", `{"hits": "one"}`, "invalid_field", "hits: want an integer"},
		{"hits fraction", `{"hits": 1.5}`, "invalid_field", "hits: want an integer"},
		{"hits huge", `{"hits": 5000000000}`, "invalid_field", "hits: must be between"},
		{"hits very negative", `{"hits": -5000000000}`, "invalid_field", "hits: must be between"},
		{"ip number", `{"request": {"ip": 7}}`, "invalid_field", "request.ip: want a string"},
		{"headers list", `{"request": {"headers": ["a"]}}`, "invalid_field", "request.headers: want an object"},
		{"unknown field", `{"hist": 1}`, "unknown_field", `"hist"`},
		{"unknown nested field", `{"request": {"ipp": "1.2.3.4"}}`, "unknown_field", `"request.ipp"`},
		// Bodies two JSON parsers could read differently are refused, not guessed at.
		{"duplicate field", `{"hits": 1, "hits": 1000}`, "invalid_json", `duplicate field "hits"`},
		{"duplicate nested field", `{"request": {"ip": "a", "ip": "b"}}`, "invalid_json", `duplicate field "request.ip"`},
		{"name in another case", `{"HITS": 2}`, "unknown_field", `"HITS"`},
		{"invalid UTF-8", "{\"dedup_id\": \"\xff\"}", "invalid_json", `in "dedup_id"`},
		{"attrs value number", `{"attrs": {"a": 1}}`, "invalid_field", "attrs.a: want a string, got a number"},
		// An all-digit map key is a name, not an array index.
		{"attrs digit key", `{"attrs": {"7": 1}}`, "invalid_field", "attrs.7: want a string, got a number"},
		{"headers digit key", `{"request": {"headers": {"12": true}}}`, "invalid_field", "request.headers.12: want a string"},
		{"duplicate digit key", `{"attrs": {"7": "a", "7": "b"}}`, "invalid_json", `duplicate field "attrs.7"`},
		{"array body", `[1,2]`, "invalid_field", "want an object"},
		{"long dedup", `{"dedup_id": "` + strings.Repeat("x", 300) + `"}`, "invalid_field", "dedup_id"},
		{"10 MB", `{"attrs": {"a": "` + strings.Repeat("x", 10<<20) + `"}}`, "body_too_large", "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := post(t, srv, tc.body)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", w.Code, w.Body)
			}
			var e struct{ Error Error }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q is not the error shape: %v", w.Body, err)
			}
			if e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("error %+v, want code %s with %q", e.Error, tc.code, tc.msg)
			}
		})
	}
	if len(rec.got) != 0 {
		t.Fatalf("bad input reached the engine %d times", len(rec.got))
	}
}

func TestCheckDecodesTheContract(t *testing.T) {
	rec := &recorder{answer: host.Result{Allowed: true}}
	srv := New(Options{Checker: rec})
	w := post(t, srv, `{"request": {"ip": "203.0.113.7", "method": "POST", "path": "/login", "host": "api.example.com",
		"user": "alice", "headers": {"X-Tier": "pro"}, "query": {"q": "1"}},
		"attrs": {"tenant": "acme"}, "hits": 0, "dedup_id": "abc", "best_effort": true}`)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	got := rec.got[0]
	want := host.Request{IP: "203.0.113.7", Method: "POST", Path: "/login", Host: "api.example.com", User: "alice",
		Headers: map[string]string{"x-tier": "pro"}, Query: map[string]string{"q": "1"}}
	if got.Request.IP != want.IP || got.Request.Path != want.Path || got.Request.Headers["x-tier"] != "pro" ||
		got.Request.Query["q"] != "1" || got.Attrs["tenant"] != "acme" || got.Hits != 0 || got.DedupID != "abc" || !got.BestEffort {
		t.Fatalf("decoded %+v", got)
	}
	post(t, srv, `{}`)
	if rec.got[1].Hits != 1 {
		t.Fatalf("hits default %d, want 1", rec.got[1].Hits)
	}
}

func TestDeniedAnswerAndHeaders(t *testing.T) {
	rec := &recorder{answer: host.Result{Allowed: false, RetryAfter: 1200 * time.Millisecond, Results: []host.RuleResult{
		{Rule: "per-user", Subject: "alice", Plugin: "fixedwindow", Decision: sdk.Decision{
			Allowed: true, Granted: 1, Limit: 100, Remaining: 40, Window: time.Minute, Reset: 30 * time.Second}},
		{Rule: "login-per-ip", Subject: "203.0.113.7", Plugin: "fixedwindow", Decision: sdk.Decision{
			Allowed: false, Limit: 5, Remaining: 0, Window: 10 * time.Second, Reset: 1200 * time.Millisecond, RetryAfter: 1200 * time.Millisecond}},
	}}}
	w := post(t, New(Options{Checker: rec}), `{"request": {"ip": "203.0.113.7"}}`)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	for h, want := range map[string]string{
		"Retry-After":      "2",
		"RateLimit-Policy": `"per-user";q=100;w=60, "login-per-ip";q=5;w=10`,
		"RateLimit":        `"login-per-ip";r=0;t=2`, // a denial reports the denying rules only
	} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body["allowed"] != false || body["retry_after_ms"] != float64(1200) {
		t.Fatalf("body %v", body)
	}
	r1 := body["results"].([]any)[1].(map[string]any)
	for k, want := range map[string]any{"rule": "login-per-ip", "subject": "203.0.113.7", "plugin": "fixedwindow",
		"allowed": false, "granted": float64(0), "limit": float64(5), "remaining": float64(0), "reset_ms": float64(1200),
		"retry_after_ms": float64(1200), "delay_ms": float64(0), "shadow": false, "degraded": ""} {
		if r1[k] != want {
			t.Errorf("results[1].%s = %v, want %v", k, r1[k], want)
		}
	}
}

// TestAuthBadRequestReportsNoLimit: a forward-auth call a plugin refused as
// bad input is a 400 with the reason and, as /v1/check's, no RateLimit
// fields or Retry-After: nothing was limited.
func TestAuthBadRequestReportsNoLimit(t *testing.T) {
	rec := &recorder{answer: host.Result{BadRequest: errors.New("hits: want at most 5"), RetryAfter: time.Second,
		Results: []host.RuleResult{{Rule: "r", Err: errors.New("hits: want at most 5"), Decision: sdk.Decision{Limit: 5}}}}}
	w := httptest.NewRecorder()
	New(Options{Checker: rec}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/auth", nil))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "hits: want at most 5") {
		t.Fatalf("status %d, body %q", w.Code, w.Body.String())
	}
	for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
		if v := w.Header().Values(h); len(v) != 0 {
			t.Errorf("%s: %q on a bad request", h, v)
		}
	}
}

func TestNoMatchingRuleIsAllowedWithEmptyResults(t *testing.T) {
	w := post(t, New(Options{Checker: &recorder{answer: host.Result{Allowed: true}}}), `{}`)
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"allowed":true,"retry_after_ms":0,"results":[]}` {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if w.Header().Get("RateLimit") != "" || w.Header().Get("Retry-After") != "" {
		t.Fatalf("headers without a rule: %v", w.Header())
	}
}

func TestFailClosedIs503(t *testing.T) {
	w := post(t, New(Options{Checker: &recorder{answer: host.Result{FailClosed: true}}}), `{}`)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
}

func TestReadyz(t *testing.T) {
	var down error = context.DeadlineExceeded
	srv := New(Options{Checker: &recorder{}, Ready: func(context.Context) error { return down }})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("not ready: %d", rec.Code)
	}
	down = nil
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("ready: %d", rec.Code)
	}
}

// TestBatchFieldPaths: the array of a batch is indexed in messages, the
// maps inside its checks are not.
func TestBatchFieldPaths(t *testing.T) {
	srv := New(Options{Checker: &recorder{}})
	for body, want := range map[string]string{
		`{"checks": [{}, {"hits": "x"}]}`:               `checks[1].hits: want an integer, got a string`,
		`{"checks": [{"attrs": {"7": 1}}]}`:             `checks[0].attrs.7: want a string, got a number`,
		`{"checks": [{}, {}, {"request": {"ipp": 1}}]}`: `unknown field "checks[2].request.ipp"`,
	} {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/check/batch", strings.NewReader(body)))
		var e struct{ Error Error }
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != http.StatusBadRequest || e.Error.Message != want {
			t.Errorf("%s: %d %s, want 400 %q", body, w.Code, w.Body, want)
		}
	}
}
