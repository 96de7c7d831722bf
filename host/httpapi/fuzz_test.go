package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host"
)

// FuzzCheckBody holds decodeCheck to encoding/json (sameAsEncodingJSON) and
// every body API to a 200 or a 400.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range checkBodySeeds {
		f.Add(seed)
	}
	srv := New(Options{Checker: &recorder{answer: host.Result{Allowed: true}}})
	f.Fuzz(func(t *testing.T, body string) {
		sameAsEncodingJSON(t, body)
		for _, path := range []string{"/v1/check", "/v1/check/batch", "/v1/acquire"} {
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
				t.Fatalf("%s %q: status %d", path, body, rec.Code)
			}
		}
	})
}

func FuzzAuthHeaders(f *testing.F) {
	f.Add("/login?a=1", "POST", "203.0.113.7", "198.51.100.1, 127.0.0.1", "api.example.com")
	f.Add("%zz", "", "not-an-ip", ",,,", "")
	f.Add("http://x/y", "GET", "::ffff:1.2.3.4", "[::1]", "h")
	rec := &recorder{answer: host.Result{Allowed: true}}
	srv := New(Options{Checker: rec})
	f.Fuzz(func(t *testing.T, uri, method, realIP, xff, fwdHost string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/auth", nil)
		req.RemoteAddr = "127.0.0.1:1234"
		for k, v := range map[string]string{"X-Original-URI": uri, "X-Original-Method": method, "X-Real-IP": realIP,
			"X-Forwarded-For": xff, "X-Forwarded-Host": fwdHost} {
			if strings.ContainsAny(v, "\r\n") {
				return // not a header value a proxy can send
			}
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		rec.mu.Lock()
		got := rec.got[len(rec.got)-1]
		rec.mu.Unlock()
		if _, err := netip.ParseAddr(got.Request.IP); err != nil {
			t.Fatalf("client IP %q is not an address (X-Real-IP %q, XFF %q)", got.Request.IP, realIP, xff)
		}
	})
}
