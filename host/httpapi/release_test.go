package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// authSlotRules: one request at a time on /reports, for an hour.
const authSlotRules = `rules:
  - name: reports-in-flight
    when: request.path == "/reports"
    subject: request.path
    plugin: concurrency
    config: {limit: 1, ttl: 1h}
`

// TestAuthTakesTheLeaseIDFromXRequestID: forward-auth names a request's
// in-flight slot by the proxy's X-Request-Id, believed from a trusted
// proxy only: the same id keeps its slot, another is denied, and from an
// untrusted peer the header is ignored (the concurrency plugin then
// refuses the acquire as bad input).
func TestAuthTakesTheLeaseIDFromXRequestID(t *testing.T) {
	e, _, _ := startOpenAPIEngine(t, redistest.Start(t), authSlotRules)
	trusting := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e}))
	t.Cleanup(trusting.Close)
	untrusting := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, TrustedProxies: []netip.Prefix{}}))
	t.Cleanup(untrusting.Close)
	auth := func(base, id string) int {
		t.Helper()
		req, err := http.NewRequest("GET", base+"/v1/auth/reports", nil) // the path as Envoy's ext_authz sends it
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		base, id string
		want     int
	}{
		{trusting.URL, "r1", http.StatusOK},
		{trusting.URL, "r2", http.StatusTooManyRequests},
		{trusting.URL, "r1", http.StatusOK}, // the same request's slot, renewed
		{untrusting.URL, "r1", http.StatusBadRequest},
	} {
		if got := auth(c.base, c.id); got != c.want {
			t.Errorf("X-Request-Id %s (trusted %v): %d, want %d", c.id, c.base == trusting.URL, got, c.want)
		}
	}
}
