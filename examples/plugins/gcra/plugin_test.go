package gcra_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/examples/plugins/gcra"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// tmpDir holds the Wasm build and its compilation cache for the whole test
// binary: the module is built and compiled once, whatever tests run.
var tmpDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ruled-gcra-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = dir
	code := m.Run()
	if wasmLoad.p != nil {
		_ = wasmLoad.p.Close(context.Background())
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var wasmLoad struct {
	once sync.Once
	p    *wasm.Plugin
	err  error
}

// wasmPlugin builds ./wasm with `ruled plugin build`'s function and loads
// it, once per test binary. Tests must not close it.
func wasmPlugin(t *testing.T) *wasm.Plugin {
	t.Helper()
	wasmLoad.once.Do(func() {
		ctx := context.Background()
		out := filepath.Join(tmpDir, "gcra.wasm")
		if wasmLoad.err = wasm.Build(ctx, "./wasm", out); wasmLoad.err != nil {
			return
		}
		wasmLoad.p, wasmLoad.err = wasm.Load(ctx, out, wasm.Options{CacheDir: filepath.Join(tmpDir, "cache"), Prewarm: 1})
	})
	if wasmLoad.err != nil {
		t.Fatalf("gcra as Wasm: %v", wasmLoad.err)
	}
	return wasmLoad.p
}

func newModel(c sdk.Config) sdk.LocalLimiter { return gcra.NewModel(c.(gcra.Config)) }

type conformCase struct {
	name string
	raw  map[string]any
	opts plugintest.StepOptions
}

// conformCases cover an emission interval that is not a whole number of
// microseconds (1s/3), a burst of 0, requests for more than the limit,
// peeks, refunds and best_effort.
var conformCases = []conformCase{
	{"thirds-of-a-second-multi-hits-peeks", map[string]any{"rate": 3, "per": "1s", "burst": 4},
		plugintest.StepOptions{Subjects: 3, MaxAdvance: 500 * time.Millisecond, MinHits: 0, MaxHits: 4}},
	{"no-burst", map[string]any{"rate": 10, "burst": 0},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond, MinHits: 0, MaxHits: 2}},
	{"odd-period-refunds-best-effort-over-limit", map[string]any{"rate": 7, "per": "1500001us", "burst": 3},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 400 * time.Millisecond, MinHits: -3, MaxHits: 6, BestEffort: 0.3, Dedup: 0.2}},
	{"high-rate", map[string]any{"rate": 1_000_003, "per": "1s", "burst": 1000},
		plugintest.StepOptions{Subjects: 1, MaxAdvance: 2 * time.Millisecond, MinHits: 0, MaxHits: 900, BestEffort: 0.2}},
}

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, tc := range conformCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
			env.Conform(t, gcra.New(), tc.raw, newModel, plugintest.RandomSteps(rng, 600, tc.opts))
		})
	}
}

// TestConformsAsWasm runs the same sequences through the Wasm driver: the
// module must make the model's decisions too.
func TestConformsAsWasm(t *testing.T) {
	w := wasmPlugin(t)
	if got, want := w.Info(), gcra.New().Info(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Info differs:\nwasm   %+v\nnative %+v", got, want)
	}
	env := plugintest.NewEnv(t)
	for _, tc := range conformCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(12, uint64(len(tc.name))))
			model := func(sdk.Config) sdk.LocalLimiter {
				return gcra.NewModel(plugintest.Configure(t, gcra.New(), tc.raw).(gcra.Config))
			}
			env.Conform(t, w, tc.raw, model, plugintest.RandomSteps(rng, 300, tc.opts))
		})
	}
}

func TestConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"rate": 5, "per": "1s", "burst": 149}
	for _, req := range []sdk.Request{{Subject: "one", Hits: 1}, {Subject: "three", Hits: 3}} {
		got := env.Hammer(t, gcra.New(), raw, 3, 8, 20, req)
		cfg := plugintest.Configure(t, gcra.New(), raw)
		want := plugintest.Replay(gcra.NewModel(cfg.(gcra.Config)), env.Clock.Now(), 3*8*20, req)
		if got != want || want != 150/req.Hits*req.Hits {
			t.Fatalf("hits %d: granted %d, model %d, limit 150", req.Hits, got, want)
		}
	}
}

// decider runs requests for one rule at the env's clock. Every decider has
// a rule of its own, so its own keys, unless it is given a rule name.
type decider struct {
	t   *testing.T
	alg sdk.Algorithm
	cfg sdk.Config
	h   func(subject string) sdk.Host
}

func newDecider(t *testing.T, env *plugintest.Env, alg sdk.Algorithm, raw map[string]any) *decider {
	t.Helper()
	return newRuleDecider(t, env, alg, raw, fmt.Sprintf("r%d", rand.Int64()))
}

func newRuleDecider(t *testing.T, env *plugintest.Env, alg sdk.Algorithm, raw map[string]any, rule string) *decider {
	t.Helper()
	p := env.RegisterIsolated(t, alg) // as ruled runs it: its own ACL user, its declared commands
	return &decider{t: t, alg: alg, cfg: plugintest.Configure(t, alg, raw),
		h: func(subject string) sdk.Host { return p.Host(rule, subject) }}
}

func (d *decider) decide(subject string, hits int64) sdk.Decision {
	d.t.Helper()
	dec, err := d.alg.Decide(context.Background(), d.h(subject), d.cfg, sdk.Request{Subject: subject, Hits: hits})
	if err != nil {
		d.t.Fatal(err)
	}
	return dec
}

// TestBurstThenSpacing is the documented behaviour: burst + 1 at once, then
// one per emission interval.
func TestBurstThenSpacing(t *testing.T) {
	env := plugintest.NewEnv(t)
	d := newDecider(t, env, gcra.New(), map[string]any{"rate": 10, "per": "1s", "burst": 4})
	for i := range 5 {
		got := d.decide("s", 1)
		if !got.Allowed || got.Limit != 5 || got.Remaining != int64(4-i) || got.Reset != time.Duration(i+1)*100*time.Millisecond {
			t.Fatalf("request %d: %+v, want allowed, limit 5, remaining %d, reset %dms", i, got, 4-i, (i+1)*100)
		}
		if got.Window != 500*time.Millisecond {
			t.Fatalf("window %v, want τ = 5 × 100ms", got.Window)
		}
	}
	if got := d.decide("s", 1); got.Allowed || got.RetryAfter != 100*time.Millisecond || got.Reset != 500*time.Millisecond {
		t.Fatalf("sixth: %+v, want denied, retry after 100ms, reset 500ms", got)
	}
	env.Clock.Advance(100 * time.Millisecond)
	if got := d.decide("s", 1); !got.Allowed || got.Remaining != 0 {
		t.Fatalf("one interval later: %+v, want one more allowed", got)
	}
	if got := d.decide("s", 0); got.Allowed || got.Granted != 0 || got.RetryAfter != 100*time.Millisecond {
		t.Fatalf("peek: %+v, want denied, retry after 100ms", got)
	}
	if got := d.decide("s", 6); got.Allowed || got.RetryAfter != got.Reset {
		t.Fatalf("more than the limit: %+v, want denied with retry_after = reset", got)
	}
}

// TestRetryAfterIsExact checks every denial of a random sequence: 1µs
// before its retry_after the same request is still denied, at retry_after
// it is allowed.
func TestRetryAfterIsExact(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, raw := range []map[string]any{
		{"rate": 3, "per": "1s", "burst": 2},
		{"rate": 1_000_003, "per": "1s", "burst": 7},
		{"rate": 2, "per": "1000001us", "burst": 0},
	} {
		d := newDecider(t, env, gcra.New(), raw)
		cfg := d.cfg.(gcra.Config)
		limit, gap := int(cfg.Limit()), int(max(cfg.Window().Microseconds()/2, 2))
		denials := 0
		for i := 0; denials < 40 && i < 2000; i++ {
			subject := fmt.Sprintf("s%d", i%3)
			hits := int64(1 + rng.IntN(limit))
			got := d.decide(subject, hits)
			if got.Allowed {
				env.Clock.Advance(time.Duration(rng.IntN(gap)) * time.Microsecond)
				continue
			}
			denials++
			if got.RetryAfter <= 0 {
				t.Fatalf("%v: denial with retry_after %v", raw, got.RetryAfter)
			}
			env.Clock.Advance(got.RetryAfter - time.Microsecond)
			if again := d.decide(subject, hits); again.Allowed {
				t.Fatalf("%v: %d hits allowed 1µs before retry_after %v", raw, hits, got.RetryAfter)
			}
			env.Clock.Advance(time.Microsecond)
			if again := d.decide(subject, hits); !again.Allowed {
				t.Fatalf("%v: %d hits denied at retry_after %v: %+v", raw, hits, got.RetryAfter, again)
			}
		}
		if denials < 40 {
			t.Fatalf("%v: only %d denials", raw, denials)
		}
	}
}

// TestStateLivesUnderItsNamespaceWithTTL checks the one key of a subject:
// under ruled:gcra:, holding TAT, expiring about reset + 1s after use.
func TestStateLivesUnderItsNamespaceWithTTL(t *testing.T) {
	env := plugintest.NewEnv(t)
	d := newRuleDecider(t, env, gcra.New(), map[string]any{"rate": 1, "per": "2s", "burst": 1}, "r")
	before := env.Clock.Now()
	d.decide("who", 2) // TAT = now + 4s
	ctx := context.Background()
	keys, err := env.Redis.Client().Keys(ctx, "*").Result()
	if err != nil || len(keys) != 1 || keys[0] != "ruled:gcra:r:{who}:tat" {
		t.Fatalf("keys %v (%v), want only ruled:gcra:r:{who}:tat", keys, err)
	}
	st, err := env.Redis.Client().HGetAll(ctx, keys[0]).Result()
	if err != nil || st["t"] != fmt.Sprint(before+4_000_000) || st["f"] != "0" {
		t.Fatalf("state %v (%v), want t = now + 4s, f = 0", st, err)
	}
	ttl, err := env.Redis.Client().PTTL(ctx, keys[0]).Result()
	if err != nil || ttl <= 4*time.Second || ttl > 5*time.Second {
		t.Fatalf("ttl %v (%v), want reset (4s) + up to 1s", ttl, err)
	}
	// A full refund empties the state.
	if got := d.decide("who", -2); !got.Allowed || got.Granted != -2 || got.Reset != 0 {
		t.Fatalf("refund: %+v", got)
	}
	if n, err := env.Redis.Client().Exists(ctx, keys[0]).Result(); err != nil || n != 0 {
		t.Fatalf("key still exists after a full refund (%v)", err)
	}
}

// TestLowerBurstOnReload reloads a rule with a lower burst while a subject's
// TAT lies beyond the new tolerance: TAT moves back to now + τ, and
// retry_after is still exact.
func TestLowerBurstOnReload(t *testing.T) {
	env := plugintest.NewEnv(t)
	before := newRuleDecider(t, env, gcra.New(), map[string]any{"rate": 10, "burst": 9}, "reloaded")
	if got := before.decide("s", 10); !got.Allowed || got.Reset != time.Second {
		t.Fatalf("before: %+v, want the whole burst, reset 1s", got)
	}
	after := newRuleDecider(t, env, gcra.New(), map[string]any{"rate": 10, "burst": 1}, "reloaded")
	got := after.decide("s", 1)
	if got.Allowed || got.Limit != 2 || got.Reset != 200*time.Millisecond || got.RetryAfter != 100*time.Millisecond {
		t.Fatalf("after: %+v, want denied, limit 2, reset 200ms (τ), retry after 100ms", got)
	}
	env.Clock.Advance(100*time.Millisecond - time.Microsecond)
	if got := after.decide("s", 1); got.Allowed {
		t.Fatalf("1µs before retry_after: %+v", got)
	}
	env.Clock.Advance(time.Microsecond)
	if got := after.decide("s", 1); !got.Allowed || got.Remaining != 0 {
		t.Fatalf("at retry_after: %+v, want allowed, none left", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want []string
	}{
		{map[string]any{}, []string{"rate: required", "burst: required"}},
		{map[string]any{"rate": 0, "burst": 1}, []string{"rate: must be between 1 and 2^53-1"}},
		{map[string]any{"rate": 1, "burst": -1}, []string{"burst: must be at least 0"}},
		{map[string]any{"rate": 1, "burst": 1, "per": "0s"}, []string{"per: must be at least 1µs"}},
		{map[string]any{"rate": 1, "burst": 1, "per": "1500ns"}, []string{"per: must be a whole number of microseconds"}},
		{map[string]any{"rate": 1, "burst": 1, "per": "10"}, []string{"per: want a duration"}},
		{map[string]any{"rate": "fast", "burst": 1}, []string{"rate: want a whole number"}},
		{map[string]any{"rate": 1, "burst": 1, "brust": 3}, []string{"brust: unknown field"}},
		{map[string]any{"rate": 1, "burst": 1 << 40, "per": "24h"}, []string{"burst: (burst + 1) × per in µs + rate must stay below 2^53"}},
	} {
		_, err := gcra.New().Configure(tc.raw)
		if err == nil {
			t.Errorf("%v: no error", tc.raw)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", tc.raw, err, w)
			}
		}
	}
	// The largest exact config is accepted, one more burst is not.
	per := int64(1_000_000)
	top := (gcra.MaxExact-1)/per - 1
	if _, err := gcra.New().Configure(map[string]any{"rate": 1, "burst": top}); err != nil {
		t.Errorf("burst %d: %v", top, err)
	}
	if _, err := gcra.New().Configure(map[string]any{"rate": 1, "burst": top + 1}); err == nil {
		t.Errorf("burst %d: no error", top+1)
	}
	// The Wasm module reports the same problems, one per line.
	_, err := wasmPlugin(t).Configure(map[string]any{"rate": 0, "burst": -1})
	if err == nil || !strings.Contains(err.Error(), "rate: must be") || !strings.Contains(err.Error(), "burst: must be") {
		t.Errorf("wasm: %v", err)
	}
}
