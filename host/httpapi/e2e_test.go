package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/sdk"
)

const testRules = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1m}
  - name: per-path
    when: request.path != ""
    subject: request.path
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
`

type fixture struct {
	redis  *redistest.Server
	srv    *httptest.Server
	engine *host.Engine
	rules  string
}

func newFixture(t *testing.T, token string) *fixture {
	return newFixtureTimeout(t, token, 2*time.Second)
}

// newFixtureTimeout is newFixture with a Redis call time-out of timeout.
func newFixtureTimeout(t *testing.T, token string, timeout time.Duration) *fixture {
	t.Helper()
	rs := redistest.Start(t)
	e, path := newTestEngine(t, rs, timeout, testRules, builtin.All())
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases(), Admin: e, AdminToken: token,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "# metrics\n") }),
		UI:      http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "<html></html>") }),
		Stats:   func(context.Context) any { return map[string]any{} },
	}))
	t.Cleanup(srv.Close)
	return &fixture{redis: rs, srv: srv, engine: e, rules: path}
}

// newTestEngine returns an engine of plugins on rs serving rulesText, and
// the path of its rule file.
func newTestEngine(t *testing.T, rs *redistest.Server, timeout time.Duration, rulesText string, plugins []sdk.Algorithm) (*host.Engine, string) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: timeout}), Plugins: plugins})
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
	return e, path
}

func (f *fixture) do(t *testing.T, method, path, token, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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

func TestForwardAuthFromProxyHeaders(t *testing.T) {
	f := newFixture(t, "")
	hdr := map[string]string{"X-Original-URI": "/login?x=1", "X-Original-Method": "POST", "X-Real-IP": "198.51.100.4"}
	for i := 1; i <= 4; i++ {
		resp, _ := f.do(t, "GET", "/v1/auth", "", "", hdr)
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
		if i == 4 && (resp.Header.Get("Retry-After") == "" || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"per-ip";r=0;`)) {
			t.Fatalf("429 headers %v", resp.Header)
		}
	}
	// The path came from X-Original-URI, without its query.
	peek := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "x", Path: "/login"}, Hits: 0})
	if peek.Results[1].Rule != "per-path" || peek.Results[1].Remaining != 97 {
		t.Fatalf("per-path after 4 calls (1 denied, refunded): %+v", peek.Results[1])
	}
	// X-Forwarded-For: the right-most address that is not a trusted proxy.
	resp, _ := f.do(t, "GET", "/v1/auth", "", "", map[string]string{"X-Forwarded-For": "203.0.113.50, 127.0.0.1", "X-Forwarded-Uri": "/a"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if p := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "203.0.113.50"}, Hits: 0}); p.Results[0].Remaining != 2 {
		t.Fatalf("X-Forwarded-For client not limited: %+v", p.Results[0])
	}
}

func TestForwardAuthIgnoresHeadersFromUntrustedPeers(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer client.Close()
	e, _ := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: 2 * time.Second}), Plugins: builtin.All()})
	path := filepath.Join(t.TempDir(), "r.yaml")
	_ = os.WriteFile(path, []byte(testRules), 0o600)
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases(), TrustedProxies: nil}))
	defer srv.Close()
	// Trust nobody: the spoofed X-Real-IP must not be believed.
	strict := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases(), TrustedProxies: []netip.Prefix{}}))
	defer strict.Close()
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("GET", strict.URL+"/v1/auth", nil)
		req.Header.Set("X-Real-IP", "192.0.2.1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if p := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "192.0.2.1"}, Hits: 0}); p.Results[0].Remaining != 3 {
		t.Fatalf("spoofed IP was limited: %+v", p.Results[0])
	}
	if p := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "127.0.0.1"}, Hits: 0}); p.Results[0].Remaining != 0 {
		t.Fatalf("the peer itself was not limited: %+v", p.Results[0])
	}
}

// TestAdminBearerSchemeIsCaseInsensitive: the auth scheme is
// case-insensitive (RFC 9110 section 11.1, RFC 6750 section 2.1); the token
// is not.
func TestAdminBearerSchemeIsCaseInsensitive(t *testing.T) {
	f := newFixture(t, "s3cret")
	for _, c := range []struct {
		header string
		want   int
	}{
		{"Bearer s3cret", http.StatusOK},
		{"bearer s3cret", http.StatusOK},
		{"BEARER s3cret", http.StatusOK},
		{"bEaReR s3cret", http.StatusOK},
		{"Bearer  s3cret", http.StatusOK}, // 1*SP
		{"bearer S3CRET", http.StatusUnauthorized},
		{"Bearers3cret", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Basic s3cret", http.StatusUnauthorized},
		{"Bearerx s3cret", http.StatusUnauthorized},
	} {
		resp, body := f.do(t, "GET", "/v1/admin/rules", "", "", map[string]string{"Authorization": c.header})
		if resp.StatusCode != c.want {
			t.Errorf("Authorization: %q: %d, want %d: %s", c.header, resp.StatusCode, c.want, body)
		}
	}
	resp, body := f.do(t, "POST", "/v1/admin/reload", "", "", map[string]string{"Authorization": "bearer s3cret"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload with a lower-case scheme: %d %s", resp.StatusCode, body)
	}
}

func TestAdminNeedsTheToken(t *testing.T) {
	f := newFixture(t, "s3cret")
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/admin/rules"}, {"GET", "/v1/admin/plugins"}, {"POST", "/v1/admin/reload"}, {"POST", "/v1/admin/reset"},
	} {
		if resp, _ := f.do(t, c.method, c.path, "", "{}", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without token: %d, want 401", c.method, c.path, resp.StatusCode)
		}
		if resp, _ := f.do(t, c.method, c.path, "wrong", "{}", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", c.method, c.path, resp.StatusCode)
		}
	}
	resp, body := f.do(t, "GET", "/v1/admin/rules", "s3cret", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"name":"per-ip"`) {
		t.Fatalf("rules: %d %s", resp.StatusCode, body)
	}
	resp, body = f.do(t, "GET", "/v1/admin/plugins", "s3cret", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"name":"fixedwindow"`) ||
		!strings.Contains(body, `"traits":["firm_denials","leasable","refunds"]`) || !strings.Contains(body, `"traits":["refunds"]`) {
		t.Fatalf("plugins: %d %s", resp.StatusCode, body)
	}
}

func TestAdminAbsentWithoutToken(t *testing.T) {
	f := newFixture(t, "")
	if resp, _ := f.do(t, "GET", "/v1/admin/rules", "anything", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("admin without a configured token: %d, want 404", resp.StatusCode)
	}
}

func TestAdminReloadKeepsOldRulesOnError(t *testing.T) {
	f := newFixture(t, "t")
	if err := os.WriteFile(f.rules, []byte("rules:\n  - name: broken\n    subject: request.nope\n    plugin: fixedwindow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, body := f.do(t, "POST", "/v1/admin/reload", "t", "", nil)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `"line":3`) {
		t.Fatalf("bad reload: %d %s", resp.StatusCode, body)
	}
	if _, body = f.do(t, "GET", "/v1/admin/rules", "t", "", nil); !strings.Contains(body, `"name":"per-ip"`) || !strings.Contains(body, `"last_error"`) {
		t.Fatalf("after a bad reload: %s", body)
	}
	if res := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "a"}, Hits: 1}); len(res.Results) != 1 || res.Results[0].Rule != "per-ip" {
		t.Fatalf("old rules not serving: %+v", res)
	}
	_ = os.WriteFile(f.rules, []byte("rules: []\n"), 0o600)
	if resp, body = f.do(t, "POST", "/v1/admin/reload", "t", "", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"rules":0`) {
		t.Fatalf("good reload: %d %s", resp.StatusCode, body)
	}
}

func TestAdminResetOneSubject(t *testing.T) {
	f := newFixture(t, "t")
	for i := 0; i < 3; i++ {
		f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "10.0.0.1"}, Hits: 1})
		f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "10.0.0.2"}, Hits: 1})
	}
	resp, body := f.do(t, "POST", "/v1/admin/reset", "t", `{"rule": "per-ip", "subject": "10.0.0.1"}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"deleted_keys":1`) {
		t.Fatalf("reset: %d %s", resp.StatusCode, body)
	}
	if res := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "10.0.0.1"}, Hits: 0}); res.Results[0].Remaining != 3 {
		t.Fatalf("reset subject: %+v", res.Results[0])
	}
	if res := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "10.0.0.2"}, Hits: 0}); res.Results[0].Remaining != 0 {
		t.Fatalf("other subject touched: %+v", res.Results[0])
	}
	if resp, _ := f.do(t, "POST", "/v1/admin/reset", "t", `{"rule": "nope", "subject": "x"}`, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown rule: %d", resp.StatusCode)
	}
}

// TestBatchHasOneBound: with Redis stopped, a batch of 64 checks (four
// rounds of 16 in parallel) is answered within the engine's decision
// time-out, which its checks share, not within four.
func TestBatchHasOneBound(t *testing.T) {
	const call = 100 * time.Millisecond
	f := newFixtureTimeout(t, "", call)
	bound := f.engine.DecisionTimeout()
	var checks []string
	for i := range 64 {
		checks = append(checks, fmt.Sprintf(`{"request": {"ip": "192.0.2.%d"}}`, i))
	}
	body := `{"checks": [` + strings.Join(checks, ",") + `]}`
	f.redis.Pause()
	defer f.redis.Resume()
	start := time.Now()
	resp, out := f.do(t, "POST", "/v1/check/batch", "", body, nil)
	took := time.Since(start)
	t.Logf("64 checks on a stopped Redis: answered in %v (decision time-out %v)", took, bound)
	if resp.StatusCode != http.StatusOK || strings.Count(out, `"degraded":"allow"`) != 64 {
		t.Fatalf("%d %s, want every check degraded allow", resp.StatusCode, out)
	}
	if took > bound+100*time.Millisecond {
		t.Fatalf("answered in %v, want within the decision time-out %v (four rounds of calls take %v)", took, bound, 4*call)
	}
}

func TestBatchAnswersInOrder(t *testing.T) {
	f := newFixture(t, "")
	var checks []string
	for i := 0; i < 5; i++ {
		checks = append(checks, `{"request": {"ip": "192.0.2.9"}}`)
	}
	checks = append(checks, `{"request": {"ip": "192.0.2.10"}, "hits": 0}`)
	resp, body := f.do(t, "POST", "/v1/check/batch", "", `{"checks": [`+strings.Join(checks, ",")+`]}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var out struct {
		Results []struct {
			Allowed bool
			Results []struct{ Subject string }
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for _, r := range out.Results[:5] {
		if r.Allowed {
			allowed++
		}
	}
	if len(out.Results) != 6 || allowed != 3 || out.Results[5].Results[0].Subject != "192.0.2.10" || !out.Results[5].Allowed {
		t.Fatalf("batch answer %s", body)
	}
	if resp, body := f.do(t, "POST", "/v1/check/batch", "", `{"checks": [{}, {"hits": "x"}]}`, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "checks[1].hits: want an integer") {
		t.Fatalf("bad batch: %d %s", resp.StatusCode, body)
	}
}

func TestAcquireWaitsForTheWindow(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer client.Close()
	e, _ := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: 2 * time.Second}), Plugins: builtin.All()})
	path := filepath.Join(t.TempDir(), "r.yaml")
	_ = os.WriteFile(path, []byte("rules:\n  - name: fast\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 1, window: 300ms}\n"), 0o600)
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases()}))
	defer srv.Close()
	post := func(body string) int {
		resp, err := http.Post(srv.URL+"/v1/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(`{"request": {"ip": "a"}, "timeout_ms": 0}`); c != 200 {
		t.Fatalf("first acquire %d", c)
	}
	// The 300ms windows are aligned on the clock: if the first acquire was
	// the last of its window, the second opens the next one and is allowed,
	// and the third must then be refused.
	if c := post(`{"request": {"ip": "a"}, "timeout_ms": 0}`); c != 429 {
		if c := post(`{"request": {"ip": "a"}, "timeout_ms": 0}`); c != 429 {
			t.Fatalf("no wait allowed: %d, want 429", c)
		}
	}
	start := time.Now()
	if c := post(`{"request": {"ip": "a"}, "timeout_ms": 2000}`); c != 200 {
		t.Fatalf("waiting acquire %d", c)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("acquire took %v, want about one window", took)
	}
	if c := post(`{"request": {"ip": "a"}, "timeout_ms": 999999}`); c != 400 {
		t.Fatalf("huge timeout: %d, want 400", c)
	}
	// A client that goes away ends the wait: exhaust, then cancel mid-wait.
	post(`{"request": {"ip": "b"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/acquire", strings.NewReader(`{"request": {"ip": "b"}, "timeout_ms": 60000}`))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("cancelled acquire answered %d", resp.StatusCode)
		}
	}()
	wg.Wait()
}
