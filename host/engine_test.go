package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/sdk"
)

// newEngine returns an engine with its own Redis connection pool, as a
// separate ruled instance would have, serving the rules in yaml.
func newEngine(t *testing.T, srv *redistest.Server, yaml string, timeout time.Duration) *host.Engine {
	t.Helper()
	return newEngineOpts(t, srv, yaml, capability.Options{Timeout: timeout})
}

// newEngineTB is newEngine for benchmarks: autopipelined, as ruled serves.
func newEngineTB(tb testing.TB, srv *redistest.Server, yaml string) *host.Engine {
	return newEngineOpts(tb, srv, yaml, capability.Options{Timeout: time.Second, Pipeline: redis.DefaultBlockingAutoPipelineOptions()})
}

// newEngineOpts is newEngine with the capability's options o; each of with
// may change the engine's options.
func newEngineOpts(t testing.TB, srv *redistest.Server, yaml string, o capability.Options, with ...func(*host.Options)) *host.Engine {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		ReadTimeout: max(o.Timeout, capability.DefaultTimeout), WriteTimeout: max(o.Timeout, capability.DefaultTimeout)})
	t.Cleanup(func() { _ = client.Close() })
	opts := host.Options{Capability: capability.New(client, o), Plugins: builtin.All()}
	for _, f := range with {
		f(&opts)
	}
	e, err := host.NewEngine(opts)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatalf("load: %v", err)
	}
	return e
}

func check(e *host.Engine, ip string) host.Result {
	return e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: ip, Method: "GET", Path: "/"}, Hits: 1})
}

const perIP = `
rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 40, window: 1h}
`

func TestTwoInstancesAdmitExactlyTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	engines := []*host.Engine{newEngine(t, srv, perIP, 5*time.Second), newEngine(t, srv, perIP, 5*time.Second)}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(e *host.Engine) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				res := check(e, "198.51.100.1")
				if len(res.Results) != 1 || res.Results[0].Degraded != "" {
					t.Errorf("unexpected result %+v", res)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}(engines[g%2])
	}
	wg.Wait()
	if allowed.Load() != 40 || denied.Load() != 120 {
		t.Fatalf("allowed %d denied %d, want exactly 40 and 120", allowed.Load(), denied.Load())
	}
}

func TestRedisRestartNeedsNoOperator(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, perIP, 2*time.Second)
	if res := check(e, "a"); !res.Allowed || res.Results[0].Degraded != "" {
		t.Fatalf("before: %+v", res)
	}
	// Scripts flushed while running.
	if err := srv.Client().ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if res := check(e, "a"); !res.Allowed || res.Results[0].Degraded != "" || res.Results[0].Remaining != 38 {
		t.Fatalf("after SCRIPT FLUSH: %+v", res.Results)
	}
	// A restarted server: data and scripts gone.
	srv.Restart()
	var res host.Result
	for i := 0; i < 20; i++ { // the pool may hold connections to the dead server
		if res = check(e, "a"); res.Results[0].Degraded == "" {
			break
		}
	}
	if !res.Allowed || res.Results[0].Degraded != "" || res.Results[0].Remaining != 39 {
		t.Fatalf("after restart: %+v", res.Results)
	}
}

func TestOnErrorPolicies(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, `
rules:
  - name: open
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
    on_error: allow
  - name: closed
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
    on_error: deny
`, 300*time.Millisecond)
	srv.Kill()
	start := time.Now()
	res := check(e, "a")
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("decision took %v with Redis down", took)
	}
	if res.Allowed || !res.FailClosed || len(res.Results) != 2 {
		t.Fatalf("result %+v, want denied fail-closed with both rules", res)
	}
	if r := res.Results[0]; !r.Allowed || r.Degraded != host.DegradedAllow || !capability.Unavailable(r.Err) {
		t.Fatalf("open rule: %+v", r)
	}
	if r := res.Results[1]; r.Allowed || r.Degraded != host.DegradedDeny {
		t.Fatalf("closed rule: %+v", r)
	}
}

func TestDeniedRequestUsesNoOtherQuota(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, `
rules:
  - name: wide
    subject: '"global"'
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
  - name: narrow
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1h}
`, 5*time.Second)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if check(e, "203.0.113.9").Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 3 {
		t.Fatalf("allowed %d, want 3", allowed.Load())
	}
	peek := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "198.51.100.200"}, Hits: 0})
	if peek.Results[0].Rule != "wide" || peek.Results[0].Remaining != 97 {
		t.Fatalf("wide rule remaining %+v, want 97: denied requests must not use its quota", peek.Results[0])
	}
}

func TestNoShortcutsSendsEveryRequestToThePlugin(t *testing.T) {
	srv := redistest.Start(t)
	var calls atomic.Int64
	o := capability.Options{Timeout: 5 * time.Second, Observe: func(string, string, string, time.Duration, error) { calls.Add(1) }}
	e := newEngineOpts(t, srv, `
rules:
  - name: leased
    subject: request.ip
    plugin: fixedwindow
    lease: 5
    config: {limit: 3, window: 1h}
`, o, func(o *host.Options) { o.NoShortcuts = true })
	for i := range 6 {
		before := calls.Load()
		res := check(e, "192.0.2.1")
		if res.Allowed != (i < 3) {
			t.Fatalf("check %d allowed %v", i, res.Allowed)
		}
		if calls.Load() != before+1 {
			t.Fatalf("check %d made %d script calls, want 1 (no lease, no deny cache)", i, calls.Load()-before)
		}
	}
	if e.Inspect().DenyCacheHits() != 0 {
		t.Errorf("deny cache answered %d checks", e.Inspect().DenyCacheHits())
	}
}

// hugeReply is a plugin whose script answers a reply over the cap: its
// decision is allowed when the reply came back, an error otherwise.
type hugeReply struct{ sdk.OneStep }

func (hugeReply) Info() sdk.Info {
	return sdk.Info{Name: "huge", Scripts: []sdk.Script{{Name: "big", Source: `return string.rep('x', 1048576)`}}}
}
func (hugeReply) Configure(map[string]any) (sdk.Config, error) { return struct{}{}, nil }
func (hugeReply) Decide(ctx context.Context, h sdk.Host, _ sdk.Config, _ sdk.Request) (sdk.Decision, error) {
	if _, err := h.Eval(ctx, "big", nil); err != nil {
		return sdk.Decision{}, err
	}
	return sdk.Decision{Allowed: true, Granted: 1}, nil
}

// TestCompiledInPluginsRunWithoutTheReplyCap: the engine's Plugins run
// without capability.MaxReplyBytes, unless Options.PluginsLoaded says they
// are code ruled loaded (the built-ins through the Wasm driver).
func TestCompiledInPluginsRunWithoutTheReplyCap(t *testing.T) {
	srv := redistest.Start(t)
	const yaml = "rules:\n  - name: huge\n    subject: request.ip\n    plugin: huge\n    on_error: deny\n"
	for _, loaded := range []bool{false, true} {
		e := newEngineOpts(t, srv, yaml, capability.Options{}, func(o *host.Options) {
			o.Plugins = append(o.Plugins, hugeReply{})
			o.PluginsLoaded = loaded
		})
		res := check(e, "192.0.2.1")
		err := res.Results[0].Err
		if capped := err != nil && strings.Contains(err.Error(), "TOOLARGE"); capped != loaded || res.Allowed == loaded {
			t.Errorf("PluginsLoaded %v: allowed %v, error %v; want the reply capped: %v", loaded, res.Allowed, err, loaded)
		}
	}
}
