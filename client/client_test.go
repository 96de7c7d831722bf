package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/client"
	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

const testRules = `rules:
  - name: per-ip
    when: request.ip != ""
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1m}
  - name: per-user
    when: request.user != ""
    subject: request.user
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
  - name: guarded
    when: attrs["guard"] == "yes"
    subject: '"g"'
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
    on_error: deny
  - name: fast
    when: attrs["fast"] != ""
    subject: attrs["fast"]
    plugin: fixedwindow
    config: {limit: 1, window: 300ms}
`

// ruled is a real ruled HTTP server: engine, httpapi and a redis-server.
type ruled struct {
	url    string
	srv    *httptest.Server
	redis  *redistest.Server
	engine *host.Engine
	conns  atomic.Int64 // connections accepted
}

func startRuled(t *testing.T) *ruled {
	t.Helper()
	return startRuledWith(t, testRules, nil)
}

// startRuledWith serves rulesText, each request seen by observe first when
// it is set.
func startRuledWith(t testing.TB, rulesText string, observe func(r *http.Request)) *ruled {
	t.Helper()
	rs := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(rc, capability.Options{Timeout: 500 * time.Millisecond}), Plugins: builtin.All()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesText), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	r := &ruled{redis: rs, engine: e}
	api := httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases(), Holds: e})
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if observe != nil {
			observe(req)
		}
		api.ServeHTTP(w, req)
	}))
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	r.url = r.srv.URL
	return r
}

func ip(addr string) client.CheckRequest {
	return client.CheckRequest{Request: client.Request{IP: addr}}
}

func TestCheck(t *testing.T) {
	r := startRuled(t)
	c := client.New(r.url + "/")
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		a, err := c.Check(ctx, ip("203.0.113.1"))
		if err != nil {
			t.Fatal(err)
		}
		if !a.Allowed || a.StatusCode != 200 || a.FailClosed || len(a.Results) != 1 {
			t.Fatalf("check %d: %+v", i, a)
		}
		res := a.Results[0]
		if res.Rule != "per-ip" || res.Subject != "203.0.113.1" || res.Plugin != "fixedwindow" || res.Limit != 3 ||
			res.Remaining != int64(3-i) || res.Granted != 1 || res.Reset <= 0 || res.Reset > time.Minute {
			t.Fatalf("check %d: %+v", i, res)
		}
		if a.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` || a.Header.Get("RateLimit") == "" || a.Header.Get("Retry-After") != "" {
			t.Fatalf("check %d headers: %v", i, a.Header)
		}
	}
	a, err := c.Check(ctx, ip("203.0.113.1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Allowed || a.StatusCode != 429 || a.FailClosed || a.RetryAfter <= 0 || a.RetryAfter > time.Minute || a.Header.Get("Retry-After") == "" {
		t.Fatalf("4th check: %+v", a)
	}
	// Peek consumes nothing; Hits asks for several units.
	for i := 0; i < 2; i++ {
		if a, err = c.Check(ctx, client.CheckRequest{Request: client.Request{IP: "203.0.113.2"}, Peek: true}); err != nil || a.Results[0].Remaining != 3 {
			t.Fatalf("peek: %+v %v", a, err)
		}
	}
	if a, err = c.Check(ctx, client.CheckRequest{Request: client.Request{IP: "203.0.113.2"}, Hits: 2}); err != nil || a.Results[0].Remaining != 1 {
		t.Fatalf("hits 2: %+v %v", a, err)
	}
	// No matching rule: allowed, no results, no headers.
	if a, err = c.Check(ctx, client.CheckRequest{}); err != nil || !a.Allowed || len(a.Results) != 0 || len(a.Header) != 0 {
		t.Fatalf("no rule: %+v %v", a, err)
	}
}

func TestBatch(t *testing.T) {
	r := startRuled(t)
	c := client.New(r.url)
	reqs := []client.CheckRequest{ip("192.0.2.1"), ip("192.0.2.1"), ip("192.0.2.1"), ip("192.0.2.1"),
		{Request: client.Request{IP: "192.0.2.2"}, Peek: true}, {}}
	answers, err := c.Batch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(answers) != len(reqs) {
		t.Fatalf("%d answers", len(answers))
	}
	allowed := 0
	for _, a := range answers[:4] {
		if a.Allowed {
			allowed++
		} else if a.StatusCode != 429 || a.RetryAfter <= 0 {
			t.Fatalf("denied batch entry: %+v", a)
		}
	}
	if allowed != 3 || answers[4].Results[0].Subject != "192.0.2.2" || answers[4].Results[0].Remaining != 3 || !answers[5].Allowed {
		t.Fatalf("batch: %+v", answers)
	}
	// Bad input in one entry fails the batch with ruled's error.
	_, err = c.Batch(context.Background(), []client.CheckRequest{{}, {DedupID: strings.Repeat("x", 300)}})
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 400 || e.Code != "invalid_field" || !strings.Contains(e.Message, "checks[1]") {
		t.Fatalf("bad batch: %v", err)
	}
}

func TestAcquire(t *testing.T) {
	r := startRuled(t)
	c := client.New(r.url)
	ctx := context.Background()
	req := client.CheckRequest{Attrs: map[string]string{"fast": "x"}}
	// The first acquire opens a 300ms window; one that ends within 150ms
	// could end before the second acquire: start over in the next one.
	for {
		a, err := c.Acquire(ctx, req, 0)
		if err != nil || !a.Allowed {
			t.Fatalf("first acquire: %+v %v", a, err)
		}
		if a.Results[0].Reset >= 150*time.Millisecond {
			break
		}
		time.Sleep(a.Results[0].Reset + 10*time.Millisecond)
	}
	if a, err := c.Acquire(ctx, req, 0); err != nil || a.Allowed || a.StatusCode != 429 {
		t.Fatalf("acquire without waiting: %+v %v", a, err)
	}
	// The wait is longer than the client's time-out: Acquire adds it.
	start := time.Now()
	a, err := c.WithTimeout(100*time.Millisecond).Acquire(ctx, req, 2*time.Second)
	if err != nil || !a.Allowed {
		t.Fatalf("waiting acquire: %+v %v", a, err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("acquire took %v, want about one 300ms window", took)
	}
	// ruled refuses a wait over a minute: a typed 400.
	_, err = c.Acquire(ctx, req, 2*time.Minute)
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 400 || e.Code != "invalid_field" || !strings.Contains(e.Message, "timeout_ms") {
		t.Fatalf("2-minute acquire: %v", err)
	}
}

func TestFailClosedIsAnAnswer(t *testing.T) {
	r := startRuled(t)
	c := client.New(r.url)
	r.redis.Kill()
	a, err := c.Check(context.Background(), client.CheckRequest{Attrs: map[string]string{"guard": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Allowed || !a.FailClosed || a.StatusCode != 503 || a.Results[0].Degraded != "deny" || a.Results[0].Error == "" {
		t.Fatalf("fail-closed answer: %+v", a)
	}
	// In a batch, fail-closed is derived from the results.
	answers, err := c.Batch(context.Background(), []client.CheckRequest{{Attrs: map[string]string{"guard": "yes"}}})
	if err != nil || !answers[0].FailClosed || answers[0].StatusCode != 503 {
		t.Fatalf("batch fail-closed: %+v %v", answers, err)
	}
}

func TestRuledErrorBodyIsTyped(t *testing.T) {
	r := startRuled(t)
	_, err := client.New(r.url).Check(context.Background(), client.CheckRequest{DedupID: strings.Repeat("x", 257)})
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 400 || e.Code != "invalid_field" || !strings.Contains(e.Message, "dedup_id") {
		t.Fatalf("long dedup_id: %v", err)
	}
	// A canned answer: the error body is decoded whatever the status.
	canned := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error": {"code": "unknown_field", "message": "unknown field \"hist\""}}`))
	}))
	defer canned.Close()
	_, err = client.New(canned.URL).Check(context.Background(), client.CheckRequest{})
	if !errors.As(err, &e) || e.Code != "unknown_field" || e.Message != `unknown field "hist"` {
		t.Fatalf("canned 400: %v", err)
	}
	if !strings.Contains(err.Error(), "400 unknown_field") {
		t.Fatalf("message %q", err)
	}
}

func TestOtherAnswersAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		code   string
	}{
		{"proxy 503", 503, "<html>upstream down</html>", ""},
		{"bad gateway", 502, "bad gateway", ""},
		{"not json", 200, "hello", client.CodeInvalidAnswer},
		{"not an answer", 200, `{"status": "ok"}`, client.CodeInvalidAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			_, err := client.New(srv.URL).Check(context.Background(), client.CheckRequest{})
			var e *client.Error
			if !errors.As(err, &e) || e.StatusCode != tc.status || e.Code != tc.code {
				t.Fatalf("got %v, want *Error %d %q", err, tc.status, tc.code)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	// Nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = client.New("http://"+addr).Check(context.Background(), client.CheckRequest{})
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || ue.Op != "check" || ue.Timeout() {
		t.Fatalf("closed port: %v", err)
	}

	// A server that closes every connection without answering.
	closer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer closer.Close()
	if _, err = client.New(closer.URL).Batch(context.Background(), []client.CheckRequest{{}}); !errors.As(err, &ue) || ue.Op != "batch" {
		t.Fatalf("closed connection: %v", err)
	}

	// A server slower than the time-out.
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	start := time.Now()
	_, err = client.New(slow.URL, client.WithTimeout(100*time.Millisecond)).Check(context.Background(), client.CheckRequest{})
	if !errors.As(err, &ue) || !ue.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow server: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("time-out after %v, want about 100ms", took)
	}
	// A context deadline that comes first ends the call earlier.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err = client.New(slow.URL).Check(ctx, client.CheckRequest{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("context deadline: %v", err)
	}

	// A base URL that is not http(s) fails every call.
	if _, err = client.New("localhost:8080").Check(context.Background(), client.CheckRequest{}); err == nil || !strings.Contains(err.Error(), "base URL") {
		t.Fatalf("bad base URL: %v", err)
	}
}

// TestKeepsConnectionsAlive: rounds of concurrent calls reuse the
// connections of the earlier rounds instead of opening new ones (net/http's
// default of 2 idle connections per host would open about 30 a round).
func TestKeepsConnectionsAlive(t *testing.T) {
	r := startRuled(t)
	c := client.New(r.url)
	round := func() {
		var wg sync.WaitGroup
		for i := 0; i < 32; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Check(context.Background(), client.CheckRequest{}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	// 32 concurrent callers never need more than 32 connections when the
	// idle ones are kept; with 2 kept per host, each round opens about 30.
	round()
	round()
	round()
	n := r.conns.Load()
	if n > 40 {
		t.Fatalf("%d connections for three rounds of 32 concurrent calls: connections are not kept alive", n)
	}
	for i := 0; i < 20; i++ {
		if _, err := c.Check(context.Background(), client.CheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if m := r.conns.Load(); m > n {
		t.Fatalf("sequential calls opened %d connections", m-n)
	}
}
