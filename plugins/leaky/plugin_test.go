package leaky_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func newModel(c sdk.Config) sdk.LocalLimiter { return leaky.NewModel(c.(leaky.Config)) }

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	cases := []struct {
		name string
		raw  map[string]any
		opts plugintest.StepOptions
	}{
		{"police-fractional-interval", map[string]any{"capacity": 5, "rate": 3},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 300 * time.Millisecond}},
		{"police-peeks-refunds-best-effort", map[string]any{"capacity": 7, "rate": 2, "per": "1500001us"},
			plugintest.StepOptions{Subjects: 3, MaxAdvance: 700 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}},
		{"police-capacity-one", map[string]any{"capacity": 1, "rate": 7, "per": "999999us", "mode": "police"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 200 * time.Millisecond, MinHits: 0, MaxHits: 2, BestEffort: 0.2}},
		{"shape-odd", map[string]any{"capacity": 6, "rate": 3, "per": "1000003us", "mode": "shape"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 500 * time.Millisecond, MinHits: -1, MaxHits: 3, BestEffort: 0.3}},
		{"shape-large-hits", map[string]any{"capacity": 100, "rate": 300, "per": "1s", "mode": "shape"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 40 * time.Millisecond, MinHits: 0, MaxHits: 30, BestEffort: 0.4}},
		{"shape-oversized-hits", map[string]any{"capacity": 3, "rate": 1, "per": "333ms", "mode": "shape"},
			plugintest.StepOptions{Subjects: 1, MaxAdvance: 300 * time.Millisecond, MinHits: -4, MaxHits: 5, BestEffort: 0.5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			steps := plugintest.RandomSteps(rng, 1000, tc.opts)
			env.Conform(t, leaky.New(), tc.raw, newModel, steps)
			n := outcomes(t, tc.raw, steps)
			t.Logf("%+v", n)
			shaping := tc.raw["mode"] == "shape"
			if n.allowed < 20 || n.denied < 20 || shaping != (n.delayed > 0) {
				t.Fatalf("sequence too easy: %+v; want admissions, denials, and delays exactly when shaping", n)
			}
		})
	}
}

type tally struct{ allowed, denied, delayed int }

// outcomes replays steps through the model and counts what happened, so
// that conformance cases are known to exercise both sides of the limit.
func outcomes(t *testing.T, raw map[string]any, steps []plugintest.Step) tally {
	m := leaky.NewModel(plugintest.Configure(t, leaky.New(), raw).(leaky.Config))
	now := plugintest.StartUS
	var n tally
	for _, s := range steps {
		now += s.Advance.Microseconds()
		d := m.Decide(now, s.Req)
		switch {
		case s.Req.Hits <= 0:
		case d.Allowed:
			n.allowed++
		default:
			n.denied++
		}
		if d.Delay > 0 {
			n.delayed++
		}
	}
	return n
}

func TestConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, mode := range []string{"police", "shape"} {
		t.Run(mode, func(t *testing.T) {
			raw := map[string]any{"capacity": 150, "rate": 1, "per": "1h", "mode": mode}
			req := sdk.Request{Subject: "shared", Hits: 1}
			got := env.Hammer(t, leaky.New(), raw, 3, 8, 20, req)
			cfg := plugintest.Configure(t, leaky.New(), raw)
			want := plugintest.Replay(leaky.NewModel(cfg.(leaky.Config)), env.Clock.Now(), 3*8*20, req)
			if got != want || want != 150 {
				t.Fatalf("granted %d, model %d, capacity 150", got, want)
			}
		})
	}
}

// TestConcurrentShapingHandsOutDistinctSlots checks that concurrent
// admissions in shape mode each get their own departure slot.
func TestConcurrentShapingHandsOutDistinctSlots(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := leaky.New()
	cfg := plugintest.Configure(t, alg, map[string]any{"capacity": 60, "rate": 4, "mode": "shape"})
	var mu sync.Mutex
	var delays []time.Duration
	var wg sync.WaitGroup
	for range 3 {
		p := plugintest.Register(t, env.Capability(), alg)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := p.Host("r", "s")
				for range 5 {
					d, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						delays = append(delays, d.Delay)
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	slices.Sort(delays)
	if len(delays) != 60 {
		t.Fatalf("admitted %d, want 60", len(delays))
	}
	for k, d := range delays {
		if d != time.Duration(k)*250*time.Millisecond {
			t.Fatalf("slot %d: delay %v, want %v", k, d, time.Duration(k)*250*time.Millisecond)
		}
	}
}

// decider runs requests against one rule at the env's clock.
type decider struct {
	t    *testing.T
	alg  sdk.Algorithm
	cfg  sdk.Config
	plug *capability.Plugin
}

func newDecider(t *testing.T, env *plugintest.Env, raw map[string]any) *decider {
	alg := leaky.New()
	return &decider{t: t, alg: alg, cfg: plugintest.Configure(t, alg, raw), plug: plugintest.Register(t, env.Capability(), alg)}
}

func (x *decider) do(req sdk.Request) sdk.Decision {
	x.t.Helper()
	d, err := x.alg.Decide(context.Background(), x.plug.Host("r", req.Subject), x.cfg, req)
	if err != nil {
		x.t.Fatal(err)
	}
	return d
}

func hit(n int64) sdk.Request { return sdk.Request{Subject: "s", Hits: n} }

func TestPoliceDeniesWhenFull(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 3, "rate": 2, "per": "1s"})
	for i := range 3 {
		d := x.do(hit(1))
		if !d.Allowed || d.Granted != 1 || d.Remaining != int64(2-i) || d.Delay != 0 {
			t.Fatalf("request %d: %+v, want admitted without delay, remaining %d", i, d, 2-i)
		}
	}
	d := x.do(hit(1))
	// Full: one unit leaves every 500ms.
	if d.Allowed || d.Granted != 0 || d.Remaining != 0 || d.RetryAfter != 500*time.Millisecond || d.Reset != 1500*time.Millisecond {
		t.Fatalf("full bucket: %+v, want denied, retry after 500ms, empty in 1.5s", d)
	}
	if d.Limit != 3 || d.Window != 1500*time.Millisecond {
		t.Fatalf("limit %d window %v, want 3 per 1.5s", d.Limit, d.Window)
	}
	env.Clock.Advance(d.RetryAfter - time.Microsecond)
	if d := x.do(hit(1)); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("1µs early: %+v, want denied, retry after 1µs", d)
	}
	env.Clock.Advance(time.Microsecond)
	if d := x.do(hit(1)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("at retry_after: %+v, want admitted", d)
	}
	// Two units need a full second more.
	if d := x.do(hit(2)); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("two units: %+v, want denied, retry after 1s", d)
	}
}

func TestShapeDelaysAreEvenlySpaced(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 5, "rate": 4, "mode": "shape"})
	const interval = 250 * time.Millisecond
	for k := range 5 {
		d := x.do(hit(1))
		if !d.Allowed || d.Delay != time.Duration(k)*interval {
			t.Fatalf("request %d: %+v, want admitted with delay %v", k, d, time.Duration(k)*interval)
		}
	}
	// A fractional interval (1s/3) rounds each slot up to the microsecond.
	y := newDecider(t, env, map[string]any{"capacity": 5, "rate": 3, "mode": "shape"})
	for k, want := range []time.Duration{0, 333334 * time.Microsecond, 666667 * time.Microsecond, time.Second} {
		if d := y.do(sdk.Request{Subject: "frac", Hits: 1}); !d.Allowed || d.Delay != want {
			t.Fatalf("fractional request %d: %+v, want delay %v", k, d, want)
		}
	}
	// Requests arriving later keep their slot in the same sequence.
	env.Clock.Advance(100 * time.Millisecond)
	if d := y.do(sdk.Request{Subject: "frac", Hits: 1}); !d.Allowed || d.Delay != 1233334*time.Microsecond {
		t.Fatalf("later request: %+v, want delay 4/3 s - 100ms", d)
	}
}

func TestShapeDeniesWhenQueueExceedsCapacity(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 4, "rate": 10, "per": "1s", "mode": "shape"})
	if d := x.do(hit(3)); !d.Allowed || d.Delay != 0 || d.Remaining != 1 {
		t.Fatalf("three units: %+v", d)
	}
	if d := x.do(hit(2)); d.Allowed || d.Delay != 0 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("queue would hold 5 of 4: %+v, want denied, retry after 100ms", d)
	}
	if d := x.do(hit(1)); !d.Allowed || d.Delay != 300*time.Millisecond || d.Remaining != 0 {
		t.Fatalf("fourth unit: %+v, want admitted after 300ms", d)
	}
	if d := x.do(hit(1)); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("full queue: %+v, want denied", d)
	}
	// Releasing a queued unit makes room at once.
	if d := x.do(hit(-1)); !d.Allowed || d.Granted != -1 || d.Remaining != 1 {
		t.Fatalf("release: %+v, want one unit released", d)
	}
	if d := x.do(hit(1)); !d.Allowed || d.Delay != 300*time.Millisecond {
		t.Fatalf("after release: %+v, want the freed slot", d)
	}
}

func TestDrainsOverTime(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 10, "rate": 5, "per": "1s"})
	if d := x.do(hit(10)); !d.Allowed || d.Remaining != 0 || d.Reset != 2*time.Second {
		t.Fatalf("fill: %+v, want full, empty in 2s", d)
	}
	for k := int64(1); k <= 10; k++ {
		env.Clock.Advance(200 * time.Millisecond)
		d := x.do(hit(0))
		if d.Remaining != k || d.Reset != time.Duration(10-k)*200*time.Millisecond {
			t.Fatalf("after %v: %+v, want remaining %d", time.Duration(k)*200*time.Millisecond, d, k)
		}
	}
	// Idle time does not bank more than the capacity.
	env.Clock.Advance(time.Hour)
	if d := x.do(hit(11)); d.Allowed {
		t.Fatalf("11 units after an idle hour: %+v, want denied", d)
	}
	if d := x.do(hit(10)); !d.Allowed {
		t.Fatalf("10 units after an idle hour: %+v, want admitted", d)
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 2, "rate": 1, "mode": "shape"})
	x.do(hit(1))
	for i := range 3 {
		d := x.do(hit(0))
		if !d.Allowed || d.Granted != 0 || d.Remaining != 1 || d.Delay != time.Second {
			t.Fatalf("peek %d: %+v, want remaining 1 and the next slot in 1s", i, d)
		}
	}
	x.do(hit(1))
	if d := x.do(hit(0)); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("peek when full: %+v, want denied, retry after 1s", d)
	}
}

func TestBestEffortGrantsWhatFits(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 5, "rate": 1, "mode": "shape"})
	x.do(hit(3))
	d := x.do(sdk.Request{Subject: "s", Hits: 4, BestEffort: true})
	if !d.Allowed || d.Granted != 2 || d.Remaining != 0 || d.Delay != 3*time.Second {
		t.Fatalf("best effort: %+v, want 2 of 4 after 3s", d)
	}
	if d = x.do(sdk.Request{Subject: "s", Hits: 1, BestEffort: true}); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("nothing left: %+v, want denied, retry after 1s", d)
	}
}

func TestOversizedRequestIsDenied(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 3, "rate": 1, "per": "2s"})
	d := x.do(hit(4))
	if d.Allowed || d.Remaining != 3 || d.RetryAfter != 6*time.Second {
		t.Fatalf("4 units into 3: %+v, want denied with the window (6s) as back-off", d)
	}
	if d = x.do(sdk.Request{Subject: "s", Hits: 4, BestEffort: true}); !d.Allowed || d.Granted != 3 {
		t.Fatalf("best effort: %+v, want the 3 that fit", d)
	}
}

func TestRefundIsBoundedByTheLevel(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 4, "rate": 1})
	x.do(hit(2))
	env.Clock.Advance(500 * time.Millisecond) // 1.5 units left: counts as 2
	if d := x.do(hit(-5)); !d.Allowed || d.Granted != -2 || d.Remaining != 4 || d.Reset != 0 {
		t.Fatalf("refund: %+v, want 2 released and an empty bucket", d)
	}
	if d := x.do(hit(-1)); d.Granted != 0 {
		t.Fatalf("refund from empty: %+v, want nothing released", d)
	}
	n, err := env.Redis.Client().Exists(context.Background(), "ruled:leaky:r:{s}:bucket").Result()
	if err != nil || n != 0 {
		t.Fatalf("empty bucket key exists=%d (%v), want deleted", n, err)
	}
}

func TestKeyExpiresWhenTheBucketEmpties(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"capacity": 10, "rate": 1, "per": "1s"})
	x.do(sdk.Request{Subject: "ttl", Hits: 3})
	ttl, err := env.Redis.Client().PTTL(context.Background(), "ruled:leaky:r:{ttl}:bucket").Result()
	if err != nil || ttl <= 3*time.Second || ttl > 4*time.Second {
		t.Fatalf("ttl %v (%v), want 3s to drain + 1s slack", ttl, err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want []string
	}{
		{map[string]any{}, []string{"capacity: required", "rate: required"}},
		{map[string]any{"capacity": 0, "rate": -1}, []string{"capacity: must be at least 1, got 0 (a leaky bucket cannot block; to block a subject, use a fixedwindow rule with limit: 0)", "rate: must be at least 1, got -1"}},
		{map[string]any{"capacity": 1, "rate": 0}, []string{"rate: must be at least 1, got 0 (a leaky bucket cannot block; to block"}},
		{map[string]any{"capacity": 1, "rate": 1, "per": "0s"}, []string{"per: must be a whole number of microseconds"}},
		{map[string]any{"capacity": 1, "rate": 1, "per": "1500ns"}, []string{"per: must be a whole number of microseconds"}},
		{map[string]any{"capacity": 1, "rate": 1, "mode": "drop"}, []string{`mode: must be "police" or "shape"`}},
		{map[string]any{"capacity": 1 << 40, "rate": 1, "per": "1h"}, []string{"capacity: capacity × per must be at most 2^52µs"}},
		{map[string]any{"capacity": 1, "rate": int64(1) << 53}, []string{"rate: must be at most 2^52"}},
		{map[string]any{"capacity": "lots", "rate": 1}, []string{"capacity: want a whole number"}},
		{map[string]any{"capacity": 1, "rate": 1, "burst": 3}, []string{"burst: unknown field"}},
	} {
		_, err := leaky.New().Configure(tc.raw)
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
	cfg, err := leaky.New().Configure(map[string]any{"capacity": 2, "rate": 1})
	if err != nil || cfg.(leaky.Config) != (leaky.Config{Capacity: 2, Rate: 1, Per: time.Second, Mode: leaky.Police}) {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
}

func TestModelPruneForgetsOnlyEmptyBuckets(t *testing.T) {
	m := leaky.NewModel(leaky.Config{Capacity: 2, Rate: 1, Per: time.Second, Mode: leaky.Police})
	now := plugintest.StartUS
	m.Decide(now, sdk.Request{Subject: "a", Hits: 2})
	m.Decide(now, sdk.Request{Subject: "b", Hits: 1})
	m.Prune(now + 1_000_000)
	if m.Len() != 1 {
		t.Fatalf("%d subjects held, want only the one still holding a unit", m.Len())
	}
	if d := m.Decide(now+1_000_000, sdk.Request{Subject: "a", Hits: 2}); d.Allowed {
		t.Fatalf("pruned a bucket that still held a unit: %+v", d)
	}
	m.Prune(now + 10_000_000)
	if m.Len() != 0 {
		t.Fatalf("%d subjects held after every bucket emptied, want 0", m.Len())
	}
	if d := m.Decide(now+10_000_000, sdk.Request{Subject: "a", Hits: 0}); d.Remaining != 2 {
		t.Fatalf("after pruning: %+v, want an empty bucket", d)
	}
}

// BenchmarkDecide measures decisions against a real redis-server with Redis
// time (no injected clock), from 32 goroutines per CPU over 1000 subjects.
func BenchmarkDecide(b *testing.B) {
	env := plugintest.NewEnv(b)
	for _, mode := range []string{"police", "shape"} {
		b.Run(mode, func(b *testing.B) {
			env.BenchDecide(b, leaky.New(), map[string]any{"capacity": 100, "rate": 50, "per": "1s", "mode": mode}, 1000, false)
		})
	}
}

// TestDeclaredCommandsSuffice runs a varied sequence as a Redis user allowed
// only the commands Info declares (plus what the host itself needs), as
// ruled's per-plugin ACL users are, and still matches the model.
func TestDeclaredCommandsSuffice(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(11, 12))
	steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 300 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3})
	// Conform runs the plugin as its own ACL user (RegisterIsolated).
	env.Conform(t, leaky.New(), map[string]any{"capacity": 4, "rate": 3, "mode": "shape"}, newModel, steps)
}
