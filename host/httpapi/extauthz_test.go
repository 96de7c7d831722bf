package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/ruled-dev/ruled/host"
)

// TestForwardAuthEnvoyExtAuthzStyle: Envoy's ext_authz HTTP service calls
// path_prefix + the original path with the original method, and appends
// the client to X-Forwarded-For.
func TestForwardAuthEnvoyExtAuthzStyle(t *testing.T) {
	f := newFixture(t, "")
	hdr := map[string]string{"X-Forwarded-For": "198.51.100.20"}
	for i := 1; i <= 4; i++ {
		resp, _ := f.do(t, "POST", "/v1/auth/orders/7?x=1", "", "", hdr)
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("call %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	// per-path counted the original path, without /v1/auth or the query.
	res := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "x", Path: "/orders/7"}, Hits: 0})
	if len(res.Results) != 2 || res.Results[1].Rule != "per-path" || res.Results[1].Remaining != 97 {
		t.Fatalf("per-path: %+v", res.Results)
	}
	// The X-Original-URI of a trusted proxy still wins over the path.
	if resp, _ := f.do(t, "GET", "/v1/auth/ignored", "", "", map[string]string{"X-Original-URI": "/from-header", "X-Real-IP": "198.51.100.21"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	res = f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "x", Path: "/from-header"}, Hits: 0})
	if res.Results[1].Remaining != 99 {
		t.Fatalf("X-Original-URI path: %+v", res.Results[1])
	}
}
