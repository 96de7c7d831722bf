package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/metrics"
	"github.com/ruled-dev/ruled/host/ui"
)

// newObservedServer serves the fixture's engine with metrics, the status
// page and the stats endpoint.
func newObservedServer(t *testing.T, token string, loopback bool) (*fixture, *metrics.Metrics) {
	t.Helper()
	f := newFixture(t, "")
	m := metrics.New(metrics.Options{Version: "test"})
	m.Bind(f.engine.Inspect())
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Checker: f.engine, Leases: f.engine.ClientLeases(), Admin: f.engine, AdminToken: token, LoopbackStatus: loopback,
		Metrics: m.Handler(), UI: ui.Handler(), Stats: m.StatusFunc("test redis", nil),
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	return f, m
}

func get(t *testing.T, url, host, token string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestMetricsAndStatusPageAreServed(t *testing.T) {
	f, _ := newObservedServer(t, "s3cret", false)
	if code, _, body := get(t, f.srv.URL+"/metrics", "", ""); code != 200 || !strings.Contains(body, `ruled_decisions_total{outcome="allowed",rule="per-ip"} 0`) {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	code, hdr, body := get(t, f.srv.URL+"/ui/", "", "")
	if code != 200 || !strings.Contains(body, "<title>ruled status</title>") || !strings.Contains(hdr.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("/ui/: %d %v\n%s", code, hdr, body)
	}
	if code, _, body := get(t, f.srv.URL+"/ui/app.js", "", ""); code != 200 || !strings.Contains(body, "v1/admin/stats") {
		t.Fatalf("/ui/app.js: %d", code)
	}
	// /ui redirects to /ui/.
	if code, _, _ := get(t, f.srv.URL+"/ui", "", ""); code != 200 {
		t.Fatalf("/ui: %d", code)
	}
}

func TestStatsNeedTheTokenWhenOneIsSet(t *testing.T) {
	f, _ := newObservedServer(t, "s3cret", true) // LoopbackStatus has no effect with a token
	for _, path := range []string{"/v1/admin/stats", "/v1/admin/rules", "/v1/admin/plugins"} {
		if code, _, _ := get(t, f.srv.URL+path, "", ""); code != http.StatusUnauthorized {
			t.Fatalf("%s without the token: %d", path, code)
		}
		if code, _, _ := get(t, f.srv.URL+path, "", "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong token: %d", path, code)
		}
	}
	code, _, body := get(t, f.srv.URL+"/v1/admin/stats", "", "s3cret")
	if code != 200 {
		t.Fatalf("stats: %d %s", code, body)
	}
	var st metrics.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Rules["per-ip"].Outcomes["allowed"] != 0 || st.Redis != "test redis" || st.Ready != "" || st.Version != "test" {
		t.Fatalf("stats %+v", st)
	}
	code, _, body = get(t, f.srv.URL+"/v1/admin/plugins", "", "s3cret")
	if code != 200 || !strings.Contains(body, `"name":"fixedwindow"`) || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("plugins: %d %s", code, body)
	}
}

func TestStatusWithoutTokenOnlyOnLoopback(t *testing.T) {
	// No token and not loopback: the admin endpoints do not exist.
	f, _ := newObservedServer(t, "", false)
	for _, path := range []string{"/v1/admin/stats", "/v1/admin/rules", "/v1/admin/plugins"} {
		if code, _, _ := get(t, f.srv.URL+path, "", ""); code != http.StatusNotFound {
			t.Fatalf("%s: %d, want 404", path, code)
		}
	}

	// No token on loopback: the read-only endpoints answer loopback host
	// names; reload and reset stay off.
	f, _ = newObservedServer(t, "", true)
	port := f.srv.URL[strings.LastIndexByte(f.srv.URL, ':'):]
	for _, path := range []string{"/v1/admin/stats", "/v1/admin/rules", "/v1/admin/plugins"} {
		for _, host := range []string{"", "localhost" + port, "[::1]" + port, "127.0.0.2"} {
			if code, _, body := get(t, f.srv.URL+path, host, ""); code != 200 {
				t.Fatalf("%s Host %q: %d %s", path, host, code, body)
			}
		}
		// DNS rebinding: a page of evil.example resolved to 127.0.0.1.
		if code, _, _ := get(t, f.srv.URL+path, "evil.example"+port, ""); code != http.StatusForbidden {
			t.Fatalf("%s with a foreign Host: %d, want 403", path, code)
		}
	}
	for _, path := range []string{"/v1/admin/reload", "/v1/admin/reset"} {
		resp, err := http.Post(f.srv.URL+path, "application/json", strings.NewReader(`{"rule":"per-ip","subject":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("POST %s without a token: %d", path, resp.StatusCode)
		}
	}
}
