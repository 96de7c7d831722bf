package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// engineFixture is an engine on a real redis-server whose loader starts
// process plugins as ruled serve does, and remembers them.
type engineFixture struct {
	engine *host.Engine
	client *redis.Client
	rules  string

	mu      sync.Mutex
	plugins []*process.Plugin
}

func newEngine(t *testing.T, opts process.Options) *engineFixture {
	t.Helper()
	rs := redistest.Start(t)
	f := &engineFixture{rules: filepath.Join(t.TempDir(), "rules.yaml")}
	f.client = redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = f.client.Close() })
	loader := func(ctx context.Context, d rules.PluginDecl) (sdk.Algorithm, error) {
		if d.Process == "" {
			return nil, errors.New("only process plugins here")
		}
		o := opts
		o.SHA256 = d.SHA256
		p, err := process.Load(ctx, d.Process, o)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.plugins = append(f.plugins, p)
		f.mu.Unlock()
		return p, nil
	}
	e, err := host.NewEngine(host.Options{Capability: capability.New(f.client, capability.Options{Timeout: 250 * time.Millisecond}),
		LoadPlugin: loader})
	if err != nil {
		t.Fatal(err)
	}
	f.engine = e
	t.Cleanup(func() { e.Close(context.Background()) })
	return f
}

func (f *engineFixture) load(t *testing.T, yaml string) error {
	t.Helper()
	if err := os.WriteFile(f.rules, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := f.engine.Load(context.Background(), f.rules)
	return err
}

func (f *engineFixture) plugin(t *testing.T) *process.Plugin {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.plugins) != 1 {
		t.Fatalf("%d plugins loaded, want 1", len(f.plugins))
	}
	return f.plugins[0]
}

const concurrencyRules = `plugins:
  conc: {process: %q, sha256: %q}
rules:
  - name: short
    when: request.path == "/short"
    subject: request.user
    plugin: conc
    config: {limit: 1, ttl: 300ms}
    deny_cache: false
  - name: inflight
    when: request.path != "/short"
    subject: request.user
    plugin: conc
    config: {limit: 2, ttl: 1m}
    on_error: deny
    deny_cache: false
`

type checkAnswer struct {
	status  int
	allowed bool
	granted int64
	retry   string
}

func postCheck(t *testing.T, url, path string, hits int64, lease string) checkAnswer {
	t.Helper()
	body := fmt.Sprintf(`{"request": {"user": "alice", "path": %q}, "hits": %d, "dedup_id": %q}`, path, hits, lease)
	resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Allowed bool `json:"allowed"`
		Results []struct {
			Granted  int64  `json:"granted"`
			Degraded string `json:"degraded"`
		} `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Results) != 1 {
		t.Fatalf("answer %v: %+v", err, out)
	}
	if out.Results[0].Degraded != "" {
		t.Fatalf("degraded answer: %+v", out)
	}
	return checkAnswer{status: resp.StatusCode, allowed: out.Allowed, granted: out.Results[0].Granted, retry: resp.Header.Get("Retry-After")}
}

// TestConcurrencyPluginOverHTTP drives the concurrency example, as a
// process plugin pinned by its digest, through the HTTP API.
func TestConcurrencyPluginOverHTTP(t *testing.T) {
	bin := binary(t, concurrencyPkg)
	f := newEngine(t, process.Options{})
	if err := f.load(t, fmt.Sprintf(concurrencyRules, bin, digest(t, bin))); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: f.engine, Leases: f.engine.ClientLeases()}))
	defer srv.Close()
	expect := func(got checkAnswer, status int, granted int64, what string) {
		t.Helper()
		if got.status != status || got.granted != granted || got.allowed != (status == http.StatusOK) {
			t.Fatalf("%s: %+v, want status %d and granted %d", what, got, status, granted)
		}
	}
	expect(postCheck(t, srv.URL, "/", 1, "r1"), 200, 1, "first acquire")
	expect(postCheck(t, srv.URL, "/", 1, "r2"), 200, 1, "second acquire")
	third := postCheck(t, srv.URL, "/", 1, "r3")
	expect(third, 429, 0, "acquire over the limit")
	if third.retry == "" {
		t.Fatal("429 without Retry-After")
	}
	expect(postCheck(t, srv.URL, "/", -1, "r1"), 200, -1, "release")
	expect(postCheck(t, srv.URL, "/", 1, "r3"), 200, 1, "acquire after the release")
	expect(postCheck(t, srv.URL, "/", -1, "r1"), 200, 0, "double release")
	expect(postCheck(t, srv.URL, "/", 1, "r4"), 429, 0, "acquire after the double release")
	expect(postCheck(t, srv.URL, "/", 1, "r2"), 200, 1, "renewing a held lease")

	// A lease nobody releases expires after its ttl.
	expect(postCheck(t, srv.URL, "/short", 1, "s1"), 200, 1, "short lease")
	expect(postCheck(t, srv.URL, "/short", 1, "s2"), 429, 0, "second short lease")
	time.Sleep(350 * time.Millisecond)
	expect(postCheck(t, srv.URL, "/short", 1, "s2"), 200, 1, "after the first lease expired")
}

// TestKilledPluginUnderLoad kills the plugin process while checks run: the
// checks made during the outage are decided by the rule's on_error policy
// (deny) without waiting, the plugin comes back, and Close leaves no
// process or goroutine behind.
func TestKilledPluginUnderLoad(t *testing.T) {
	bin := binary(t, concurrencyPkg)
	f := newEngine(t, process.Options{RestartBackoff: 300 * time.Millisecond})
	runtime.GC()
	before := runtime.NumGoroutine()
	if err := f.load(t, fmt.Sprintf(concurrencyRules, bin, digest(t, bin))); err != nil {
		t.Fatal(err)
	}
	p := f.plugin(t)
	pid := p.PID()

	var ok, degraded, slow atomic.Int64
	var sawDown atomic.Bool
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := &host.CheckRequest{Request: host.Request{User: fmt.Sprint("user-", g), Path: "/"}, Hits: 1, DedupID: fmt.Sprint(i)}
				if i%2 == 1 {
					req.Hits, req.DedupID = -1, fmt.Sprint(i-1)
				}
				start := time.Now()
				res := f.engine.Check(context.Background(), req)
				rr := res.Results[0]
				switch {
				case rr.Degraded == host.DegradedNone && res.Allowed:
					ok.Add(1)
				case rr.Degraded == host.DegradedDeny && !res.Allowed && res.FailClosed:
					degraded.Add(1)
					firstErr.CompareAndSwap(nil, rr.Err.Error())
					if errors.Is(rr.Err, process.ErrDown) {
						sawDown.Store(true)
					}
					if time.Since(start) > 500*time.Millisecond {
						slow.Add(1)
					}
				default:
					t.Errorf("unexpected result %+v (allowed %v)", rr, res.Allowed)
					return
				}
			}
		}()
	}
	waitFor(t, 5*time.Second, "checks through the plugin", func() bool { return ok.Load() > 50 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "degraded checks", func() bool { return degraded.Load() > 0 })
	if err := f.engine.Inspect().PluginsReady(); err == nil || !strings.Contains(err.Error(), "plugin concurrency") {
		t.Errorf("readiness during the outage: %v", err)
	}
	waitFor(t, 10*time.Second, "the restart", func() bool { return p.Status() == nil && p.PID() != pid })
	okAfter := ok.Load()
	waitFor(t, 5*time.Second, "checks through the restarted plugin", func() bool { return ok.Load() > okAfter+50 })
	close(stop)
	wg.Wait()
	t.Logf("ok %d, degraded %d (first: %v), restarts %d", ok.Load(), degraded.Load(), firstErr.Load(), p.Restarts())
	if !sawDown.Load() || slow.Load() > 0 || p.Restarts() != 1 || f.engine.Inspect().PluginsReady() != nil {
		t.Fatalf("saw ErrDown %v, slow degraded checks %d, restarts %d, ready %v", sawDown.Load(), slow.Load(), p.Restarts(), f.engine.Inspect().PluginsReady())
	}

	f.engine.Close(context.Background())
	if kids := childrenRunning(bin); len(kids) != 0 {
		t.Fatalf("plugin processes left after Close: %v", kids)
	}
	goroutinesSettle(t, before+3)
}

// TestWrongDigestIsALoadError pins a digest the executable does not have:
// the rule file does not load, with the declaration's position and both
// digests in the error, and no process is started.
func TestWrongDigestIsALoadError(t *testing.T) {
	bin := binary(t, concurrencyPkg)
	f := newEngine(t, process.Options{})
	wrong := strings.Repeat("0f", 32)
	err := f.load(t, fmt.Sprintf(concurrencyRules, bin, wrong))
	var list rules.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want a rules.ErrorList, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{f.rules + ":2:3", `plugin "conc"`, "sha256 mismatch", wrong, digest(t, bin)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if kids := childrenRunning(bin); len(kids) != 0 {
		t.Fatalf("a plugin with the wrong digest was started: %v", kids)
	}
}

// TestExampleRuleFileLoads loads examples/plugins/concurrency/rules.yaml,
// with the executable where the test built it.
func TestExampleRuleFileLoads(t *testing.T) {
	bin := binary(t, concurrencyPkg)
	src, err := os.ReadFile(filepath.Join(concurrencyPkg, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const path = "../../../bin/plugins/concurrency"
	if !strings.Contains(string(src), path) {
		t.Fatalf("the example no longer declares %s", path)
	}
	f := newEngine(t, process.Options{})
	if err := f.load(t, strings.Replace(string(src), path, bin, 1)); err != nil {
		t.Fatal(err)
	}
	res := f.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{Headers: map[string]string{"x-api-key": "k"}},
		Hits: 1, DedupID: "req-1"})
	if !res.Allowed || len(res.Results) != 1 || res.Results[0].Remaining != 19 || res.Results[0].Degraded != "" {
		t.Fatalf("%+v", res)
	}
}
