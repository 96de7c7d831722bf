package proxies_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// backends are what a proxy under test stands in front of: ruled's HTTP
// API over an engine on a real redis-server, and an application that
// echoes the request it got. Both count what reaches them.
type backends struct {
	redis   *redistest.Server
	ruled   *httptest.Server
	app     *httptest.Server
	checks  atomic.Int64 // requests ruled answered
	reached atomic.Int64 // requests the application answered
}

// startBackends serves rulesText from ruled, and an application that
// answers "app: METHOD URI".
func startBackends(t *testing.T, rulesText string) *backends {
	t.Helper()
	b := &backends{redis: redistest.Start(t)}
	rc := redis.NewClient(&redis.Options{Addr: b.redis.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(rc, capability.Options{Timeout: 500 * time.Millisecond}), Plugins: builtin.All()})
	if err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesText), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), rulesPath); err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases()})
	b.ruled = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.checks.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(b.ruled.Close)
	b.app = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.reached.Add(1)
		fmt.Fprintf(w, "app: %s %s\n", r.Method, r.URL.RequestURI())
	}))
	t.Cleanup(b.app.Close)
	return b
}

// proxyClient asks a proxy at base and checks its answers.
type proxyClient struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newProxyClient(t *testing.T, base string) *proxyClient {
	return &proxyClient{t: t, base: base, hc: &http.Client{Timeout: 5 * time.Second}}
}

// do makes one request through the proxy and returns the answer and body.
func (c *proxyClient) do(method, path string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// expect checks an answer's status and headers. A wanted header value of
// "*" means present, "" absent, anything else a prefix of the value.
func (c *proxyClient) expect(resp *http.Response, body string, status int, hdr map[string]string) {
	c.t.Helper()
	if resp.StatusCode != status {
		c.t.Fatalf("%s %s: status %d, want %d; body %q; headers %v", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body, resp.Header)
	}
	for k, want := range hdr {
		got := resp.Header.Get(k)
		ok := (want == "*" && got != "") || (want == "" && got == "") ||
			(want != "*" && want != "" && strings.HasPrefix(got, want))
		if !ok {
			c.t.Fatalf("%s %s: header %s %q, want %q; headers %v", resp.Request.Method, resp.Request.URL.Path, k, got, want, resp.Header)
		}
	}
}

// noLimitHeaders are the headers of an answer ruled did not limit.
var noLimitHeaders = map[string]string{"RateLimit": "", "RateLimit-Policy": "", "Retry-After": ""}

// runProxy starts a proxy's cmd, stops it with stop when the test ends
// (killing it after 5 s), and waits up to 10 s for it to listen on listen;
// it returns the proxy's base URL. logs is what the proxy wrote, shown when
// it fails to start or the test fails.
func runProxy(t *testing.T, name string, cmd *exec.Cmd, stop os.Signal, listen string, logs func() string) string {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(stop)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, logs())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited: %v\n%s", name, err, logs())
		default:
		}
		if c, err := net.DialTimeout("tcp", listen, 100*time.Millisecond); err == nil {
			c.Close()
			return "http://" + listen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after 10s\n%s", name, listen, logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The addresses every example proxy configuration names: where the proxy
// listens, ruled, and the application. Tests replace them with their own.
const (
	confProxy = "127.0.0.1:8000"
	confRuled = "127.0.0.1:8080"
	confApp   = "127.0.0.1:9000"
)

// findProxy looks for a proxy's binary on PATH, then in dirs. A missing
// proxy fails the test: CI installs it (scripts/deps.sh test).
func findProxy(t *testing.T, name string, dirs ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s is not installed: run scripts/deps.sh (it installs Debian's %s package), or apt-get install %s", name, name, name)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// writeExampleConfig copies the example configuration at example into a new
// temporary directory, with the proxy on a free loopback address and ruled
// and app for the example's own, and returns the copy's directory, its path
// and the proxy's address. It fails the test if the example no longer
// names one of the addresses, or no longer contains a line of mustHave.
func writeExampleConfig(t *testing.T, example, ruled, app string, mustHave ...string) (dir, path, listen string) {
	t.Helper()
	conf, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	text := string(conf)
	for _, want := range append([]string{confProxy, confRuled, confApp}, mustHave...) {
		if !strings.Contains(text, want) {
			t.Fatalf("%s no longer contains %q", example, want)
		}
	}
	listen = freeAddr(t)
	text = strings.NewReplacer(confProxy, listen, confRuled, ruled, confApp, app).Replace(text)
	dir = t.TempDir()
	path = filepath.Join(dir, filepath.Base(example))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path, listen
}

// slotHeldUntilTTL: a forward-auth proxy asks before a request and never
// says when it ended, so an in-flight slot taken through it (the rule
// one-slow: one at a time on /slow, ttl 1s, named by the X-Request-Id the
// example configuration sends) is held until its ttl. A second request
// right after the first has ended is denied; one after the ttl goes
// through. Each is a different request id: the proxy sets it, and a
// client's own is not believed. It returns how many of its requests
// reached the application.
func slotHeldUntilTTL(t *testing.T, c *proxyClient) (reached int64) {
	t.Helper()
	for try := 1; ; try++ {
		resp, body := c.do("GET", "/slow")
		c.expect(resp, body, 200, nil)
		reached++
		end := time.Now().Add(time.Second) // the lease was taken before the answer
		resp, body = c.do("GET", "/slow")
		if time.Now().After(end) && try < 3 {
			if resp.StatusCode == 200 {
				reached++
			}
			// The second answer came after the lease's ttl, on a machine
			// slower than a second a request: it says nothing of the slot.
			time.Sleep(time.Until(end))
			continue
		}
		c.expect(resp, body, 429, map[string]string{"Retry-After": "*"})
		time.Sleep(time.Until(end))
		resp, body = c.do("GET", "/slow")
		c.expect(resp, body, 200, nil)
		return reached + 1
	}
}
