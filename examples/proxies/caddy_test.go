package proxies_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// startCaddy runs examples/proxies/caddy/Caddyfile with the test's
// addresses and nothing else changed. The Caddyfile itself turns the admin
// endpoint and automatic HTTPS off; HOME and the XDG directories point into
// a temporary directory, so Caddy's storage and autosaved config stay there.
func startCaddy(t *testing.T, bin, ruled, app string) string {
	t.Helper()
	dir, path, listen := writeExampleConfig(t, "caddy/Caddyfile", ruled, app, "admin off", "auto_https off")
	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "--adapter", "caddyfile", "--config", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HOME="+dir,
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "data"),
		"XDG_CACHE_HOME="+filepath.Join(dir, "cache"),
	)
	cmd.Stdout, cmd.Stderr = &out, &out
	return runProxy(t, "caddy", cmd, syscall.SIGTERM, listen, out.String)
}

// TestCaddyForwardAuth: Caddy with caddy/Caddyfile in front of an
// application, limited by a real ruled (its HTTP API on a real Redis).
// Allowed requests reach the application (forward_auth does not put the
// RateLimit headers on them); the one over the limit gets ruled's 429 with
// Retry-After, RateLimit and RateLimit-Policy and ruled's body through Caddy;
// a fail-closed 503 passes too; with ruled down Caddy answers 502.
func TestCaddyForwardAuth(t *testing.T) {
	bin := findProxy(t, "caddy") // Debian's caddy package installs /usr/bin/caddy
	b := startBackends(t, nginxRules)
	base := startCaddy(t, bin, strings.TrimPrefix(b.ruled.URL, "http://"), strings.TrimPrefix(b.app.URL, "http://"))
	c := newProxyClient(t, base)

	// The method and path reach ruled from X-Forwarded-Method and -Uri:
	// one POST /login a minute. The application gets the client's own
	// request, query included, without ruled's headers.
	resp, body := c.do("POST", "/login?next=/home")
	c.expect(resp, body, 200, noLimitHeaders)
	if body != "app: POST /login?next=/home\n" {
		t.Fatalf("the application answered %q", body)
	}
	resp, body = c.do("POST", "/login")
	c.expect(resp, body, 429, map[string]string{"Retry-After": "*", "RateLimit-Policy": `"login";q=1;w=60`, "RateLimit": `"login";r=0;`})
	if body != "too many requests\n" {
		t.Fatalf("429 body %q", body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q, want 1 to 60 seconds", resp.Header.Get("Retry-After"))
	}
	// No rule matches GET /login: allowed.
	resp, body = c.do("GET", "/login")
	c.expect(resp, body, 200, noLimitHeaders)
	if body != "app: GET /login\n" {
		t.Fatalf("the application answered %q", body)
	}

	// Three requests a minute for the rest.
	for i := 1; i <= 3; i++ {
		resp, body = c.do("GET", "/api/items")
		c.expect(resp, body, 200, noLimitHeaders)
	}
	resp, body = c.do("GET", "/api/items")
	c.expect(resp, body, 429, map[string]string{"Retry-After": "*", "RateLimit-Policy": `"per-ip";q=3;w=60`, "RateLimit": `"per-ip";r=0;`})
	if n := b.reached.Load(); n != 5 {
		t.Fatalf("the application saw %d requests, want 5", n)
	}
	// Every request was checked, the denied ones too.
	if n := b.checks.Load(); n != 7 {
		t.Fatalf("ruled saw %d checks, want 7", n)
	}
	slow := slotHeldUntilTTL(t, c)

	// Redis gone: the on_error: deny rule fails closed, and Caddy passes
	// ruled's 503 on.
	b.redis.Kill()
	resp, body = c.do("GET", "/guarded")
	c.expect(resp, body, 503, map[string]string{"Retry-After": "*"})
	if body != "rate limiter unavailable\n" {
		t.Fatalf("503 body %q", body)
	}
	// ruled gone: forward_auth fails closed with 502.
	b.ruled.Close()
	resp, body = c.do("GET", "/api/items")
	c.expect(resp, body, 502, noLimitHeaders)
	if n := b.reached.Load(); n != 5+slow {
		t.Fatalf("the application saw %d requests, want %d", n, 5+slow)
	}
}
