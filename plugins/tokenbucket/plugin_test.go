package tokenbucket_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/tokenbucket"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func newModel(c sdk.Config) sdk.LocalLimiter { return tokenbucket.NewModel(c.(tokenbucket.Config)) }

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	cases := []struct {
		name string
		raw  map[string]any
		opts plugintest.StepOptions
	}{
		{"single-hits", map[string]any{"rate": 5, "burst": 8},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 300 * time.Millisecond}},
		{"odd-period-multi-hits-peeks", map[string]any{"rate": 3, "per": "1.3s", "burst": 5},
			plugintest.StepOptions{Subjects: 3, MaxAdvance: 500 * time.Millisecond, MinHits: 0, MaxHits: 4}},
		{"refunds-best-effort-over-burst", map[string]any{"rate": 10, "burst": 4},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond, MinHits: -3, MaxHits: 6, BestEffort: 0.3, Dedup: 0.3}},
		{"thirds-of-a-permit", map[string]any{"rate": 2, "per": "333333us", "burst": 3},
			plugintest.StepOptions{Subjects: 1, MaxAdvance: 200 * time.Millisecond, MinHits: -1, MaxHits: 3}},
		{"a-permit-a-microsecond", map[string]any{"rate": 1_000_000, "burst": 50},
			plugintest.StepOptions{Subjects: 1, MaxAdvance: time.Millisecond, MinHits: -10, MaxHits: 60, BestEffort: 0.2}},
		{"default-burst-slow", map[string]any{"rate": 3, "per": "1m"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 15 * time.Second, MinHits: 0, MaxHits: 2, BestEffort: 0.2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
			env.Conform(t, tokenbucket.New(), tc.raw, newModel, plugintest.RandomSteps(rng, 600, tc.opts))
		})
	}
}

// TestReloadsConformToModel changes rate, per and burst between requests, as
// reloaded or dynamic rules do, and compares every decision with the model.
func TestReloadsConformToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := tokenbucket.New()
	var cfgs []tokenbucket.Config
	for _, raw := range []map[string]any{
		{"rate": 10, "burst": 10},
		{"rate": 25, "burst": 6},
		{"rate": 4, "burst": 20},
		{"rate": 10, "per": "2s", "burst": 10},
		{"rate": 7, "per": "700ms", "burst": 3},
	} {
		cfgs = append(cfgs, plugintest.Configure(t, alg, raw).(tokenbucket.Config))
	}
	model := tokenbucket.NewModel(cfgs[0])
	p := plugintest.Register(t, env.Capability(), alg)
	rng := rand.New(rand.NewPCG(5, 5))
	steps := plugintest.RandomSteps(rng, 800, plugintest.StepOptions{Subjects: 2, MaxAdvance: 250 * time.Millisecond, MinHits: -3, MaxHits: 8, BestEffort: 0.2})
	for i, s := range steps {
		c := cfgs[rng.IntN(len(cfgs))]
		env.Clock.Advance(s.Advance)
		got, err := alg.Decide(context.Background(), p.Host("reload", s.Req.Subject), c, s.Req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if want := model.DecideWith(c, env.Clock.Now(), s.Req); got != want {
			t.Fatalf("step %d (%v) under %+v:\n got %+v\nwant %+v", i, s, c, got, want)
		}
		if got.Remaining < 0 || got.Remaining > c.Burst || got.Reset > c.Window() {
			t.Fatalf("step %d under %+v: incoherent %+v", i, c, got)
		}
	}
}

// TestClockSkewConformsToModel lets Redis time go back now and then, as
// after a failover to a replica whose clock lags: no state may be counted
// twice or lost, and script and model must still agree.
func TestClockSkewConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(13, 17))
	steps := plugintest.RandomSteps(rng, 600, plugintest.StepOptions{Subjects: 1, MaxAdvance: 300 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.2})
	back := 0
	for i := range steps {
		if rng.IntN(8) == 0 {
			steps[i].Advance = -steps[i].Advance
			back++
		}
	}
	if back < 30 {
		t.Fatalf("only %d steps go back", back)
	}
	env.Conform(t, tokenbucket.New(), map[string]any{"rate": 10, "burst": 6}, newModel, steps)
}

func TestConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, tc := range []struct {
		name string
		raw  map[string]any
		req  sdk.Request
		want int64
	}{
		{"single", map[string]any{"rate": 150, "per": "1h"}, sdk.Request{Subject: "shared", Hits: 1}, 150},
		// 33 requests of 3 take 99, then one best-effort grant of the last 1.
		{"best-effort", map[string]any{"rate": 10, "burst": 100}, sdk.Request{Subject: "shared-be", Hits: 3, BestEffort: true}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := env.Hammer(t, tokenbucket.New(), tc.raw, 3, 8, 20, tc.req)
			cfg := plugintest.Configure(t, tokenbucket.New(), tc.raw)
			want := plugintest.Replay(tokenbucket.NewModel(cfg.(tokenbucket.Config)), env.Clock.Now(), 3*8*20, tc.req)
			if got != want || want != tc.want {
				t.Fatalf("granted %d, model %d, expected %d", got, want, tc.want)
			}
		})
	}
}

// harness is one rule on a fresh env (plugintest.Rule) with this
// package's clock helpers.
type harness struct {
	*plugintest.Rule
	t   *testing.T
	env *plugintest.Env
}

func newHarness(t *testing.T, raw map[string]any) *harness {
	env := plugintest.NewEnv(t)
	return &harness{Rule: env.Rule(t, tokenbucket.New(), raw), t: t, env: env}
}

func (h *harness) advance(d time.Duration) { h.env.Clock.Advance(d) }

func TestIdleBucketNeverExceedsBurst(t *testing.T) {
	h := newHarness(t, map[string]any{"rate": 10, "burst": 5})
	if d := h.Hit(5); !d.Allowed || d.Remaining != 0 || d.Limit != 5 {
		t.Fatalf("draining: %+v", d)
	}
	h.advance(3 * time.Hour)
	if d := h.Hit(0); !d.Allowed || d.Remaining != 5 || d.Reset != 0 {
		t.Fatalf("peek after 3h idle: %+v, want exactly the burst (5), reset 0", d)
	}
	if d := h.Hit(6); d.Allowed || d.Remaining != 5 {
		t.Fatalf("6 after idle: %+v, want denied: the bucket holds at most 5", d)
	}
	if d := h.Hit(5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("5 after idle: %+v", d)
	}
	if d := h.Hit(1); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("after the burst: %+v, want denied, retry after 100ms", d)
	}
}

func TestPeekIsExactAfterPartialRefill(t *testing.T) {
	// 3 permits a second: one every 333333⅓µs, which no float keeps exact.
	h := newHarness(t, map[string]any{"rate": 3, "burst": 3})
	h.Hit(3)
	t0 := h.env.Clock.Now()
	at := func(us int64) { h.advance(time.Duration(t0+us-h.env.Clock.Now()) * time.Microsecond) }
	at(333_333)
	if d := h.Hit(0); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Microsecond {
		t.Fatalf("at 333333µs: %+v, want 0 available, retry after 1µs (999999 of 1000000 units)", d)
	}
	at(333_334)
	if d := h.Hit(1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("at 333334µs: %+v, want 1 permit", d)
	}
	at(666_667) // level 2 + 3×333333 = 1000001 units
	for i := range 50 {
		if d := h.Hit(0); !d.Allowed || d.Remaining != 1 || d.Reset != 666_667*time.Microsecond {
			t.Fatalf("peek %d at 666667µs: %+v, want 1 available, full in 666667µs", i, d)
		}
	}
	h.Hit(1) // 1 unit left
	at(999_999)
	if d := h.Hit(0); d.Remaining != 0 || d.RetryAfter != time.Microsecond {
		t.Fatalf("at 999999µs: %+v, want 0 available (999997 units), retry after 1µs", d)
	}
	at(1_000_000)
	if d := h.Hit(0); d.Remaining != 1 || d.Reset != 666_667*time.Microsecond {
		t.Fatalf("at 1s: %+v, want exactly 1 available, full in 666667µs", d)
	}
}

func TestMultiPermitRequests(t *testing.T) {
	h := newHarness(t, map[string]any{"rate": 10, "burst": 10})
	if d := h.Hit(7); !d.Allowed || d.Granted != 7 || d.Remaining != 3 || d.Reset != 700*time.Millisecond {
		t.Fatalf("7 of 10: %+v", d)
	}
	if d := h.Hit(4); d.Allowed || d.Granted != 0 || d.Remaining != 3 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("4 with 3 left: %+v, want denied, retry after 100ms", d)
	}
	if d := h.Hit(3); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("3 with 3 left: %+v", d)
	}
	if d := h.Hit(10); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("10 with none left: %+v, want retry after 1s", d)
	}
	if d := h.Hit(11); d.Allowed || d.RetryAfter != time.Second || d.Reset != time.Second {
		t.Fatalf("more than the burst: %+v, want denied, retry after the reset (1s)", d)
	}
	if d := h.Decide(sdk.Request{Hits: 5, BestEffort: true}); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("best effort with none left: %+v, want retry after 100ms (1 permit)", d)
	}
	h.advance(250 * time.Millisecond)
	if d := h.Decide(sdk.Request{Hits: 5, BestEffort: true}); !d.Allowed || d.Granted != 2 || d.Remaining != 0 {
		t.Fatalf("best effort after 250ms: %+v, want granted 2", d)
	}
	if d := h.Hit(-4); !d.Allowed || d.Granted != -4 || d.Remaining != 4 {
		t.Fatalf("refund 4: %+v", d)
	}
	if d := h.Hit(-100); d.Granted != -6 || d.Remaining != 10 || d.Reset != 0 {
		t.Fatalf("refund beyond the burst: %+v, want -6 and a full bucket", d)
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	h := newHarness(t, map[string]any{"rate": 7, "per": "1s", "burst": 5})
	h.advance(123 * time.Microsecond)
	for _, hits := range []int64{1, 3, 5} {
		h.Hit(5) // drain
		d := h.Hit(hits)
		// hits permits are hits×1e6 units; 7 units a µs.
		want := time.Duration((hits*1_000_000+6)/7) * time.Microsecond
		if d.Allowed || d.RetryAfter != want {
			t.Fatalf("%d: %+v, want denied, retry after %s", hits, d, want)
		}
		h.advance(d.RetryAfter - time.Microsecond)
		if d2 := h.Hit(hits); d2.Allowed {
			t.Fatalf("%d, 1µs before retry_after: %+v", hits, d2)
		}
		h.advance(time.Microsecond)
		if d2 := h.Hit(hits); !d2.Allowed || d2.Granted != hits {
			t.Fatalf("%d at retry_after: %+v", hits, d2)
		}
		h.advance(time.Hour)
	}
}

func TestReloadKeepsStateCoherent(t *testing.T) {
	h := newHarness(t, map[string]any{"rate": 10, "burst": 20})
	h.Hit(5)
	h.Reconfigure(map[string]any{"rate": 10, "burst": 8})
	if d := h.Hit(0); d.Remaining != 8 || d.Limit != 8 || d.Reset != 0 {
		t.Fatalf("lower burst: %+v, want clamped to 8 (was 15)", d)
	}
	if d := h.Hit(8); !d.Allowed || d.Remaining != 0 || d.Reset != 800*time.Millisecond {
		t.Fatalf("take the 8: %+v", d)
	}
	if d := h.Hit(1); d.Allowed {
		t.Fatalf("after the clamped burst: %+v", d)
	}

	// Higher rate: the level carries over and refills faster from there.
	h.advance(time.Hour)
	h.Reconfigure(map[string]any{"rate": 10, "burst": 10})
	h.Hit(10)
	h.advance(200 * time.Millisecond)
	if d := h.Hit(1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("before the reload: %+v, want 1 left of 2", d)
	}
	h.Reconfigure(map[string]any{"rate": 20, "burst": 10})
	h.advance(100 * time.Millisecond)
	if d := h.Hit(0); d.Remaining != 3 || d.Reset != 350*time.Millisecond || d.Window != 500*time.Millisecond {
		t.Fatalf("100ms after doubling the rate: %+v, want 1 + 2 = 3, full in 350ms", d)
	}

	// A new per converts the level, keeping whole permits.
	h.advance(time.Hour)
	h.Reconfigure(map[string]any{"rate": 4, "per": "1s", "burst": 4})
	h.Hit(4)
	h.advance(625 * time.Millisecond) // 2.5 permits
	h.Hit(1)                          // stored: 1.5 permits
	h.Reconfigure(map[string]any{"rate": 8, "per": "2s", "burst": 4})
	if d := h.Hit(0); d.Remaining != 1 || d.Reset != 750*time.Millisecond {
		t.Fatalf("after a new per: %+v, want 1 whole permit kept, full in 750ms", d)
	}
}

func TestKeysExpireAndFullBucketsCostNothing(t *testing.T) {
	h := newHarness(t, map[string]any{"rate": 10, "burst": 10})
	client := h.env.Redis.Client()
	ctx := context.Background()
	key := "ruled:tokenbucket:r:{s}:b"
	h.Hit(3) // full in 300ms
	ttl, err := client.PTTL(ctx, key).Result()
	if err != nil || ttl <= time.Second || ttl > 1300*time.Millisecond {
		t.Fatalf("ttl %v (%v), want the 300ms refill plus 1s slack", ttl, err)
	}
	h.Hit(-3)
	if n, err := client.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("a full bucket left a key (%d, %v)", n, err)
	}
	h.Hit(0)
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("a peek wrote %d keys (%v)", n, err)
	}
}

func TestModelForgetsFullBuckets(t *testing.T) {
	m := tokenbucket.NewModel(tokenbucket.Config{Rate: 10, Per: time.Second, Burst: 10})
	now := plugintest.StartUS
	for i := range 3000 {
		if d := m.Decide(now, sdk.Request{Subject: fmt.Sprint(i), Hits: 1}); !d.Allowed {
			t.Fatalf("subject %d: %+v", i, d)
		}
	}
	if n := m.Subjects(); n != 3000 {
		t.Fatalf("%d subjects, want 3000", n)
	}
	now += time.Second.Microseconds()
	for range 3000 {
		m.Decide(now, sdk.Request{Subject: "other", Hits: 0})
	}
	if n := m.Subjects(); n != 0 {
		t.Fatalf("%d subjects after they all refilled, want 0", n)
	}
}

func TestDeclaredCommandsSuffice(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := tokenbucket.New()
	p := env.RegisterIsolated(t, alg)
	cfg := plugintest.Configure(t, alg, map[string]any{"rate": 10, "burst": 6})
	model := tokenbucket.NewModel(cfg.(tokenbucket.Config))
	rng := rand.New(rand.NewPCG(21, 22))
	steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 300 * time.Millisecond, MinHits: -4, MaxHits: 7, BestEffort: 0.3})
	deleted := false
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		d, err := alg.Decide(context.Background(), p.Host("acl", s.Req.Subject), cfg, s.Req)
		if err != nil {
			t.Fatalf("step %d (%v): %v", i, s, err)
		}
		if want := model.Decide(env.Clock.Now(), s.Req); d != want {
			t.Fatalf("step %d (%v): got %+v, want %+v", i, s, d, want)
		}
		deleted = deleted || (s.Req.Hits < 0 && d.Remaining == 6) // a refund that filled the bucket: DEL
	}
	if !deleted {
		t.Fatal("no refund filled the bucket: DEL went untested")
	}
	// A reload with another per converts the level.
	cfg = plugintest.Configure(t, alg, map[string]any{"rate": 10, "per": "2s", "burst": 6})
	if _, err := alg.Decide(context.Background(), p.Host("acl", "subject-0"), cfg, sdk.Request{Hits: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want []string
	}{
		{map[string]any{}, []string{"rate: required"}},
		{map[string]any{"rate": 0}, []string{"rate: must be between 1 and 2^53-1, got 0 (a token bucket cannot block; to block a subject, use a fixedwindow rule with limit: 0)"}},
		{map[string]any{"rate": 5, "burst": 0}, []string{"burst: must be at least 1, got 0 (a token bucket cannot block; to block a subject, use a fixedwindow rule with limit: 0)"}},
		{map[string]any{"rate": 5, "burst": -1}, []string{"burst: must be at least 1, got -1"}},
		{map[string]any{"rate": 5, "per": "0s"}, []string{"per: must be at least 1µs"}},
		{map[string]any{"rate": 5, "per": "1500ns"}, []string{"per: must be a whole number of microseconds"}},
		{map[string]any{"rate": 5, "per": "soon"}, []string{"per: want a duration"}},
		{map[string]any{"rate": 1, "per": "24h", "burst": 1_000_000_000}, []string{"burst: burst × per in µs + rate must stay below 2^53"}},
		{map[string]any{"rate": 5, "brust": 10}, []string{"brust: unknown field"}},
		{map[string]any{"rate": 2.5}, []string{"rate: want a whole number"}},
	} {
		_, err := tokenbucket.New().Configure(tc.raw)
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
	c, err := tokenbucket.New().Configure(map[string]any{"rate": 5})
	if err != nil || c.(tokenbucket.Config) != (tokenbucket.Config{Rate: 5, Per: time.Second, Burst: 5}) {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	// The largest accepted values stay exact: 2^53 - rate over per.
	if _, err := tokenbucket.New().Configure(map[string]any{"rate": 1, "per": "1s", "burst": (tokenbucket.MaxExact - 1) / 1_000_000}); err != nil {
		t.Fatalf("largest burst: %v", err)
	}
}

// BenchmarkDecide measures one decision against real Redis with Redis's own
// clock, from many goroutines.
func BenchmarkDecide(b *testing.B) {
	plugintest.NewEnv(b).BenchDecide(b, tokenbucket.New(), map[string]any{"rate": 1_000_000_000, "burst": 1_000_000_000}, 1, true)
}
