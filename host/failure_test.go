package host_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/redisinfo"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

const policyRules = `rules:
  - name: open
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
    on_error: allow
  - name: local
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
    on_error: local
  - name: closed
    when: request.path == "/closed"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
    on_error: deny
`

// load drives e from 8 goroutines until stop is closed and reports every
// decision's latency and outcome to record.
func load(e *host.Engine, path string, stop <-chan struct{}, record func(took time.Duration, res host.Result)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				res := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "192.0.2.7", Path: path}, Hits: 1})
				record(time.Since(start), res)
			}
		}()
	}
	return &wg
}

func TestRedisKilledUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 150 * time.Millisecond
	e := newEngine(t, srv, policyRules, timeout)
	var mu sync.Mutex
	var slowest time.Duration
	byPolicy := map[string]int{}
	var lastNormal atomic.Int64
	stop := make(chan struct{})
	wg := load(e, "/closed", stop, func(took time.Duration, res host.Result) {
		mu.Lock()
		defer mu.Unlock()
		slowest = max(slowest, took)
		if len(res.Results) != 3 {
			t.Errorf("results %+v", res.Results)
			return
		}
		degraded := ""
		for _, r := range res.Results {
			degraded += string(r.Degraded) + ","
			want := map[string]host.Degraded{"open": host.DegradedAllow, "local": host.DegradedLocal, "closed": host.DegradedDeny}[r.Rule]
			if r.Degraded != "" && r.Degraded != want {
				t.Errorf("rule %s degraded as %q, want %q", r.Rule, r.Degraded, want)
			}
		}
		byPolicy[degraded]++
		if degraded == ",,," {
			lastNormal.Store(time.Now().UnixNano())
		}
	})
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	killed := time.Now()
	time.Sleep(time.Second)
	srv.Restart()
	restarted := time.Now()
	deadline := restarted.Add(time.Second)
	for time.Now().Before(deadline) && lastNormal.Load() < restarted.UnixNano() {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if lastNormal.Load() < restarted.UnixNano() {
		t.Fatalf("no normal decision within 1s of the restart; outcomes %v", byPolicy)
	}
	t.Logf("outcomes %v; slowest decision %v; normal again %v after restart", byPolicy, slowest,
		time.Duration(lastNormal.Load()-restarted.UnixNano()))
	// A check waits at most its decision time-out (two calls' time-outs),
	// not one per rule; allow scheduling slack on a loaded machine.
	if budget := e.DecisionTimeout() + 300*time.Millisecond; slowest > budget {
		t.Fatalf("slowest decision %v, budget %v", slowest, budget)
	}
	if byPolicy["allow,local,deny,"] == 0 {
		t.Fatalf("no degraded decisions while Redis was down (killed at %v): %v", killed, byPolicy)
	}
}

func TestRedisPausedOpensTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 150 * time.Millisecond
	e := newEngine(t, srv, policyRules, timeout)
	var slowest atomic.Int64
	stop := make(chan struct{})
	wg := load(e, "/", stop, func(took time.Duration, res host.Result) {
		if int64(took) > slowest.Load() {
			slowest.Store(int64(took))
		}
		if !res.Allowed {
			t.Errorf("denied: %+v", res)
		}
	})
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	srv.Pause()
	waitFor(t, 2*time.Second, "the breaker to open", func() bool { return !e.Inspect().Available() })
	time.Sleep(300 * time.Millisecond)
	srv.Resume()
	resumed := time.Now()
	waitFor(t, time.Second, "the breaker to close within 1s of SIGCONT", e.Inspect().Available)
	t.Logf("closed %v after SIGCONT; slowest decision %v", time.Since(resumed), time.Duration(slowest.Load()))
	if budget := 2*timeout + 300*time.Millisecond; time.Duration(slowest.Load()) > budget {
		t.Fatalf("slowest decision %v, budget %v", time.Duration(slowest.Load()), budget)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLocalFallbackSharesTheLimitAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	rules := `rules:
  - name: shared
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 30, window: 1h}
    on_error: local
`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var engines []*host.Engine
	for i := 0; i < 3; i++ {
		e := newEngine(t, srv, rules, 100*time.Millisecond)
		go e.Run(ctx, fmt.Sprintf("instance-%d", i), 50*time.Millisecond)
		engines = append(engines, e)
	}
	waitFor(t, 3*time.Second, "every instance to see three live instances", func() bool {
		for _, e := range engines {
			if e.Inspect().ClusterSize() != 3 {
				return false
			}
		}
		return true
	})
	srv.Kill()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for _, e := range engines {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 25; i++ {
					res := check(e, "198.51.100.77")
					if res.Results[0].Degraded != host.DegradedLocal {
						t.Errorf("not decided locally: %+v", res.Results[0])
						return
					}
					if res.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if allowed.Load() != 30 {
		t.Fatalf("three instances admitted %d while Redis was down, want the rule's 30 (10 each)", allowed.Load())
	}
}

// evalCalls returns how many scripts Redis has run.
func evalCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	n, err := redisinfo.ScriptCalls(context.Background(), srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDenyCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	rules := `rules:
  - name: cached
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 1h}
  - name: uncached
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
    deny_cache: false
`
	engines := []*host.Engine{newEngine(t, srv, rules, time.Second), newEngine(t, srv, rules, time.Second)}
	for _, e := range engines {
		if err := e.Preload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	before := evalCalls(t, srv)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if check(e, "203.0.113.99").Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	calls := evalCalls(t, srv) - before
	// 2 admitted requests cost 2 calls each (both rules); each instance then
	// learns the denial with at most one call of the first rule, plus any
	// denials already in flight when the other instance cached its own.
	if allowed.Load() != 2 || calls > 4+2 {
		t.Fatalf("allowed %d with %d script calls for 200 requests; want 2 allowed and at most 6 calls", allowed.Load(), calls)
	}
	hits := engines[0].Inspect().DenyCacheHits() + engines[1].Inspect().DenyCacheHits()
	if hits < 190 {
		t.Fatalf("deny cache answered %d of 198 denials", hits)
	}
	t.Logf("%d script calls, %d deny-cache hits for 200 requests", calls, hits)
}

// TestDecisionTimeoutBoundsTheCheck: with Redis stopped, a check of three
// rules answers within its DecisionTimeout, not three call time-outs: the
// first rule waits for its call's time-out, the second for what is left,
// the third follows its on_error at once with ErrDecisionTimeout.
func TestDecisionTimeoutBoundsTheCheck(t *testing.T) {
	srv := redistest.Start(t)
	const call, decision = 100 * time.Millisecond, 150 * time.Millisecond
	e := newEngineOpts(t, srv, policyRules, capability.Options{Timeout: call}, func(o *host.Options) { o.DecisionTimeout = decision })
	if e.DecisionTimeout() != decision {
		t.Fatalf("DecisionTimeout %v, want %v", e.DecisionTimeout(), decision)
	}
	req := &host.CheckRequest{Request: host.Request{IP: "192.0.2.8", Path: "/closed"}, Hits: 1}
	if res := e.Check(context.Background(), req); !res.Allowed || len(res.Results) != 3 || res.Results[2].Degraded != "" {
		t.Fatalf("before the pause: %+v", res)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	res := e.Check(context.Background(), req)
	took := time.Since(start)
	t.Logf("three rules on a stopped Redis: answered in %v", took)
	if took < decision-10*time.Millisecond || took > decision+100*time.Millisecond {
		t.Fatalf("answered in %v, want the decision time-out %v (not 3 × %v)", took, decision, call)
	}
	if len(res.Results) != 3 || res.Allowed {
		t.Fatalf("results %+v, want three, denied by the on_error: deny rule", res.Results)
	}
	for i, want := range []host.Degraded{host.DegradedAllow, host.DegradedLocal, host.DegradedDeny} {
		if r := res.Results[i]; r.Degraded != want || r.Err == nil {
			t.Errorf("rule %s: degraded %q (%v), want %q", r.Rule, r.Degraded, r.Err, want)
		}
	}
	if err := res.Results[0].Err; capability.ClassOf(err) != capability.ClassTimeout {
		t.Errorf("first rule: %v, want its call's time-out", err)
	}
	if err := res.Results[2].Err; !errors.Is(err, host.ErrDecisionTimeout) {
		t.Errorf("third rule: %v, want ErrDecisionTimeout", err)
	}
}
