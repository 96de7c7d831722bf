// Package proxies_test runs the proxy configurations of this directory
// against a real ruled.
package proxies_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const nginxRules = `rules:
  - name: login
    when: request.method == "POST" && request.path == "/login"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1m}
  - name: per-ip
    when: request.path != "/login" && request.path != "/guarded" && request.path != "/slow"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1m}
  - name: guarded
    when: request.path == "/guarded"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
    on_error: deny
  - name: one-slow
    when: request.path == "/slow"
    subject: request.path
    plugin: concurrency
    config: {limit: 1, ttl: 1s}
`

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startNginx runs examples/proxies/nginx/nginx.conf with the test's
// addresses, in the foreground, as a single process (so that it never
// switches to another user when run as root), with every path in dir.
func startNginx(t *testing.T, bin, ruled, app string) string {
	t.Helper()
	dir, path, listen := writeExampleConfig(t, "nginx/nginx.conf", ruled, app)
	errLog := filepath.Join(dir, "error.log")
	var out bytes.Buffer
	cmd := exec.Command(bin, "-p", dir+"/", "-c", path, "-e", errLog,
		"-g", fmt.Sprintf("daemon off; master_process off; pid %s;", filepath.Join(dir, "nginx.pid")))
	cmd.Stdout, cmd.Stderr = &out, &out
	logs := func() string {
		b, _ := os.ReadFile(errLog)
		return out.String() + string(b)
	}
	return runProxy(t, "nginx", cmd, syscall.SIGQUIT, listen, logs)
}

// TestNginxAuthRequest: nginx with nginx/nginx.conf in front of an
// application, limited by a real ruled. Allowed requests reach the
// application with the RateLimit headers; the one over the limit gets
// ruled's 429 with Retry-After, RateLimit and RateLimit-Policy through
// nginx; a fail-closed 503 passes too; with ruled down nginx fails open.
func TestNginxAuthRequest(t *testing.T) {
	bin := findProxy(t, "nginx", "/usr/sbin") // Debian puts nginx in /usr/sbin, not on every PATH
	b := startBackends(t, nginxRules)
	base := startNginx(t, bin, strings.TrimPrefix(b.ruled.URL, "http://"), strings.TrimPrefix(b.app.URL, "http://"))
	c := newProxyClient(t, base)

	// The method and path reach ruled from X-Original-Method/-URI: one
	// POST /login a minute, the query left out.
	resp, body := c.do("POST", "/login?next=/home")
	c.expect(resp, body, 200, map[string]string{"RateLimit-Policy": `"login";q=1;w=60`, "RateLimit": `"login";r=0;`})
	if body != "app: POST /login?next=/home\n" {
		t.Fatalf("the application answered %q", body)
	}
	resp, body = c.do("POST", "/login")
	c.expect(resp, body, 429, map[string]string{"Retry-After": "*", "RateLimit-Policy": `"login";q=1;w=60`, "RateLimit": `"login";r=0;`})
	// No rule matches GET /login: allowed, no RateLimit headers.
	resp, body = c.do("GET", "/login")
	c.expect(resp, body, 200, map[string]string{"RateLimit": "", "RateLimit-Policy": "", "Retry-After": ""})

	// Three requests a minute for the rest.
	for i := 1; i <= 3; i++ {
		resp, body = c.do("GET", "/api/items")
		c.expect(resp, body, 200, map[string]string{"RateLimit-Policy": `"per-ip";q=3;w=60`, "RateLimit": fmt.Sprintf(`"per-ip";r=%d;`, 3-i), "Retry-After": ""})
	}
	resp, body = c.do("GET", "/api/items")
	c.expect(resp, body, 429, map[string]string{"Retry-After": "*", "RateLimit-Policy": `"per-ip";q=3;w=60`, "RateLimit": `"per-ip";r=0;`})
	if body != "too many requests\n" {
		t.Fatalf("429 body %q", body)
	}
	if n := b.reached.Load(); n != 5 {
		t.Fatalf("the application saw %d requests, want 5", n)
	}

	slow := slotHeldUntilTTL(t, c)
	if n := b.reached.Load(); n != 5+slow {
		t.Fatalf("the application saw %d requests, want %d", n, 5+slow)
	}

	// Redis gone: the on_error: deny rule fails closed, and nginx passes
	// ruled's 503 on.
	b.redis.Kill()
	resp, body = c.do("GET", "/guarded")
	c.expect(resp, body, 503, map[string]string{"Retry-After": "*"})
	// ruled gone: nginx fails open to the application.
	b.ruled.Close()
	resp, body = c.do("GET", "/api/items")
	c.expect(resp, body, 200, map[string]string{"RateLimit": ""})
	if n := b.reached.Load(); n != 6+slow {
		t.Fatalf("the application saw %d requests, want %d", n, 6+slow)
	}
}
