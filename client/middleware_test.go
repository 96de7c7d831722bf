package client_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/client"
)

// app is an application limited by the middleware; it counts the
// requests that reach it.
type app struct {
	srv     *httptest.Server
	reached atomic.Int64
}

func newApp(t *testing.T, c *client.Client, o client.MiddlewareOptions) *app {
	t.Helper()
	a := &app{}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.reached.Add(1)
		_, _ = io.WriteString(w, "hello\n")
	})
	a.srv = httptest.NewServer(client.Middleware(c, o)(h))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) get(t *testing.T, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", a.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestMiddlewareLimitsByIP(t *testing.T) {
	r := startRuled(t)
	a := newApp(t, client.New(r.url), client.MiddlewareOptions{})
	for i := 1; i <= 3; i++ {
		resp, body := a.get(t, "/", nil)
		if resp.StatusCode != 200 || body != "hello\n" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if resp.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"per-ip";r=`) ||
			resp.Header.Get("Retry-After") != "" {
			t.Fatalf("request %d headers: %v", i, resp.Header)
		}
	}
	resp, body := a.get(t, "/", nil)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "too many requests") {
		t.Fatalf("4th request: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` ||
		!strings.HasPrefix(resp.Header.Get("RateLimit"), `"per-ip";r=0;`) {
		t.Fatalf("429 headers: %v", resp.Header)
	}
	if n := a.reached.Load(); n != 3 {
		t.Fatalf("the application saw %d requests, want 3", n)
	}
	// The peer was 127.0.0.1: that is the subject ruled limited.
	if got := peek(t, r, client.CheckRequest{Request: client.Request{IP: "127.0.0.1"}}); got != 0 {
		t.Fatalf("127.0.0.1 has %d left, want 0", got)
	}
}

// peek returns the remaining units of the first rule matching req.
func peek(t *testing.T, r *ruled, req client.CheckRequest) int64 {
	t.Helper()
	req.Peek = true
	a, err := client.New(r.url).Check(t.Context(), req)
	if err != nil || len(a.Results) == 0 {
		t.Fatalf("peek: %+v %v", a, err)
	}
	return a.Results[0].Remaining
}

func TestMiddlewareBuildsTheCheck(t *testing.T) {
	r := startRuled(t)
	var mu sync.Mutex
	var seen []string
	o := client.MiddlewareOptions{
		IP:   func(r *http.Request) string { return r.Header.Get("X-Test-Client") },
		User: func(r *http.Request) string { return r.Header.Get("X-Test-User") },
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		OnError: func(_ *http.Request, err error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, err.Error())
		},
	}
	a := newApp(t, client.New(r.url), o)
	// per-user (limit 2) denies the third request of alice although her
	// IPs differ; a skipped path is never checked.
	for i, want := range []int{200, 200, 429} {
		resp, _ := a.get(t, "/api?x=1", map[string]string{"X-Test-Client": "198.51.100." + string(rune('1'+i)), "X-Test-User": "alice"})
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	for i := 0; i < 5; i++ {
		if resp, _ := a.get(t, "/healthz", map[string]string{"X-Test-User": "alice"}); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("skipped path: %d %v", resp.StatusCode, resp.Header)
		}
	}
	if got := peek(t, r, client.CheckRequest{Request: client.Request{User: "alice"}}); got != 0 {
		t.Fatalf("alice has %d left, want 0", got)
	}
	if got := peek(t, r, client.CheckRequest{Request: client.Request{IP: "198.51.100.1"}}); got != 2 {
		t.Fatalf("198.51.100.1 has %d left, want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 0 {
		t.Fatalf("errors: %v", seen)
	}
}

func TestMiddlewareFailOpenAndClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	var errs atomic.Int64
	onErr := func(*http.Request, error) { errs.Add(1) }

	// InFlight: a request let through unchecked holds nothing, so
	// nothing is renewed or released (either would be one more error).
	open := newApp(t, client.New(down), client.MiddlewareOptions{OnError: onErr, InFlight: true})
	if resp, body := open.get(t, "/", nil); resp.StatusCode != 200 || body != "hello\n" {
		t.Fatalf("fail-open: %d %q", resp.StatusCode, body)
	}
	closed := newApp(t, client.New(down), client.MiddlewareOptions{OnError: onErr, FailClosed: true})
	if resp, _ := closed.get(t, "/", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("fail-closed: %d", resp.StatusCode)
	}
	if closed.reached.Load() != 0 || errs.Load() != 2 {
		t.Fatalf("reached %d, errors %d", closed.reached.Load(), errs.Load())
	}
}

// TestMiddlewareHonoursRuledFailClosed: ruled decides 503 by a rule's
// on_error: deny policy (its Redis is gone); the middleware passes that on
// even when it is itself fail-open.
func TestMiddlewareHonoursRuledFailClosed(t *testing.T) {
	r := startRuled(t)
	a := newApp(t, client.New(r.url), client.MiddlewareOptions{
		IP:    func(*http.Request) string { return "" },
		Attrs: func(*http.Request) map[string]string { return map[string]string{"guard": "yes"} },
	})
	if resp, _ := a.get(t, "/", nil); resp.StatusCode != 200 {
		t.Fatalf("before: %d", resp.StatusCode)
	}
	r.redis.Kill()
	if resp, body := a.get(t, "/", nil); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "unavailable") {
		t.Fatalf("after: %d %q", resp.StatusCode, body)
	}
	if a.reached.Load() != 1 {
		t.Fatalf("reached %d, want 1", a.reached.Load())
	}
}

func TestMiddlewareHeadersSent(t *testing.T) {
	// A canned ruled that records the check it was sent.
	var mu sync.Mutex
	var body string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		body = string(b)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"allowed": true, "retry_after_ms": 0, "results": []}`)
	}))
	defer fake.Close()
	sent := func() string {
		mu.Lock()
		defer mu.Unlock()
		return body
	}
	a := newApp(t, client.New(fake.URL), client.MiddlewareOptions{})
	a.get(t, "/p?q=1&q=2", map[string]string{"X-Tier": "pro", "Authorization": "Bearer secret", "Cookie": "s=1"})
	got := sent()
	for _, want := range []string{`"x-tier":"pro"`, `"path":"/p"`, `"method":"GET"`, `"query":{"q":"1"}`, `"ip":"127.0.0.1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("check %s lacks %s", got, want)
		}
	}
	if strings.Contains(got, "secret") || strings.Contains(got, "s=1") {
		t.Errorf("credentials sent to ruled: %s", got)
	}
	b := newApp(t, client.New(fake.URL), client.MiddlewareOptions{Headers: []string{"Authorization"}})
	b.get(t, "/", map[string]string{"X-Tier": "pro", "Authorization": "Bearer secret"})
	if got = sent(); !strings.Contains(got, `"headers":{"authorization":"Bearer secret"}`) {
		t.Errorf("named headers: %s", got)
	}
}

// TestMiddlewareWaitsForTheShapingDelay: an admitted request with a delay
// (a shaping rule) reaches the application once the delay has passed.
func TestMiddlewareWaitsForTheShapingDelay(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"allowed": true, "retry_after_ms": 0, "results": [{"rule": "shape", "allowed": true,
			"granted": 1, "limit": 10, "remaining": 9, "reset_ms": 1000, "retry_after_ms": 0, "delay_ms": 150, "shadow": false, "degraded": ""}]}`)
	}))
	defer fake.Close()
	a := newApp(t, client.New(fake.URL), client.MiddlewareOptions{})
	start := time.Now()
	if resp, _ := a.get(t, "/", nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("answered after %v, before the 150ms delay", took)
	}
}

// slotRules: one request at a time per path, and a rate limit per IP.
const slotRules = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
  - name: one-at-a-time
    subject: request.path
    plugin: concurrency
    config: {limit: 1, ttl: 1h}
`

// TestMiddlewareReleasesTheSlot: under InFlight, a request's slot is held
// while the handler runs and released when it returns or panics (a lease
// of an hour: only the release frees it), and the rate limit on the same
// requests counts each once.
func TestMiddlewareReleasesTheSlot(t *testing.T) {
	r := startRuledWith(t, slotRules, nil)
	c := client.New(r.url)
	var inHandler atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ans, err := c.Check(req.Context(), client.CheckRequest{Request: client.Request{IP: "192.0.2.1", Path: req.URL.Path}, DedupID: "other"})
		if err != nil || ans.Allowed {
			t.Errorf("a second request while one is in the handler: %+v, %v; want denied", ans, err)
		}
		inHandler.Add(1)
		if req.URL.Path == "/panic" {
			panic(http.ErrAbortHandler) // net/http's quiet panic
		}
	})
	srv := httptest.NewServer(client.Middleware(c, client.MiddlewareOptions{InFlight: true,
		OnError: func(_ *http.Request, err error) { t.Errorf("middleware: %v", err) }})(h))
	t.Cleanup(srv.Close)
	// A new connection each: a GET on a reused connection that drops is
	// sent again.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i, path := range []string{"/ok", "/ok", "/panic", "/panic", "/ok"} {
		resp, err := hc.Get(srv.URL + path)
		if path == "/panic" {
			if err == nil { // the handler aborted: the connection is dropped
				t.Fatalf("request %d %s: %s, want the handler reached and the connection dropped (429: a slot was not released)", i, path, resp.Status)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d %s: %s, want 200: the slot was not released", i, path, resp.Status)
		}
	}
	if n := inHandler.Load(); n != 5 {
		t.Fatalf("%d requests reached the handler, want 5", n)
	}
	for _, path := range []string{"/ok", "/panic"} {
		if free := peekRule(t, r, client.CheckRequest{Request: client.Request{IP: "127.0.0.1", Path: path}}, "one-at-a-time"); free != 1 {
			t.Fatalf("%s: %d slots free after the requests, want 1", path, free)
		}
	}
	if left := peekRule(t, r, client.CheckRequest{Request: client.Request{IP: "127.0.0.1", Path: "/ok"}}, "per-ip"); left != 95 {
		t.Fatalf("per-ip has %d left after 5 requests, want 95: releases gave back rate-limit counts", left)
	}
}

// peekRule returns the remaining units of rule for req.
func peekRule(t *testing.T, r *ruled, req client.CheckRequest, rule string) int64 {
	t.Helper()
	req.Peek = true
	a, err := client.New(r.url).Check(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range a.Results {
		if res.Rule == rule {
			return res.Remaining
		}
	}
	t.Fatalf("peek: no result of %s in %+v", rule, a)
	return 0
}
