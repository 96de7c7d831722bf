package rolling_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func newModel(c sdk.Config) sdk.LocalLimiter { return rolling.NewModel(c.(rolling.Config)) }

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	cases := []struct {
		name string
		raw  map[string]any
		opts plugintest.StepOptions
	}{
		{"single-hits", map[string]any{"limit": 5, "window": "1s", "buckets": 4},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond}},
		{"odd-window-multi-hits-peeks", map[string]any{"limit": 13, "window": "999999us", "buckets": 3},
			plugintest.StepOptions{Subjects: 3, MaxAdvance: 200 * time.Millisecond, MinHits: 0, MaxHits: 4}},
		{"dedup-best-effort-refunds", map[string]any{"limit": 7, "window": "500ms", "buckets": 5},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -3, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
		{"hits-over-limit", map[string]any{"limit": 8, "window": "2.1s", "buckets": 7},
			plugintest.StepOptions{Subjects: 1, MaxAdvance: 250 * time.Millisecond, MinHits: -1, MaxHits: 11, BestEffort: 0.2}},
		{"one-bucket", map[string]any{"limit": 3, "window": "200ms", "buckets": 1},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 60 * time.Millisecond, MinHits: -1, MaxHits: 2, Dedup: 0.3}},
		{"refunds-across-buckets", map[string]any{"limit": 20, "window": "1s", "buckets": 10},
			plugintest.StepOptions{Subjects: 1, MaxAdvance: 120 * time.Millisecond, MinHits: -4, MaxHits: 6}},
		{"dedup-refunds", map[string]any{"limit": 12, "window": "2s", "buckets": 4},
			plugintest.StepOptions{Subjects: 1, MaxAdvance: 100 * time.Millisecond, MinHits: -5, MaxHits: 3, Dedup: 0.8}},
		{"many-buckets-long-gaps", map[string]any{"limit": 30, "window": "1s", "buckets": 200},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 500 * time.Millisecond, MinHits: -3, MaxHits: 6, Dedup: 0.2, BestEffort: 0.2}},
		{"default-buckets-long-window", map[string]any{"limit": 40, "window": "1m"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 2 * time.Second, MinHits: -2, MaxHits: 6, Dedup: 0.2, BestEffort: 0.2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			env.Conform(t, rolling.New(), tc.raw, newModel, plugintest.RandomSteps(rng, 600, tc.opts))
		})
	}
}

// TestClockSkewConformsToModel lets Redis time go back now and then, as
// after a failover to a replica whose clock lags: no state may be counted
// twice or lost, and script and model must still agree. (Not with dedup
// ids: which stale records Redis still holds when time goes back depends on
// TTLs and generation wipes that the model does not mirror.)
func TestClockSkewConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(13, 17))
	steps := plugintest.RandomSteps(rng, 600, plugintest.StepOptions{Subjects: 1, MaxAdvance: 300 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.2})
	back := 0
	for i := range steps {
		if rng.IntN(8) == 0 { // up to 1.2s back: before the oldest tracked bucket too
			steps[i].Advance = -4 * steps[i].Advance
			back++
		}
	}
	if back < 30 {
		t.Fatalf("only %d steps go back", back)
	}
	env.Conform(t, rolling.New(), map[string]any{"limit": 9, "window": "1s", "buckets": 5}, newModel, steps)
}

func TestConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, tc := range []struct {
		name string
		raw  map[string]any
		req  sdk.Request
		want int64
	}{
		{"single", map[string]any{"limit": 150, "window": "1h", "buckets": 60}, sdk.Request{Subject: "shared", Hits: 1}, 150},
		// 33 requests of 3 fill 99, then one best-effort grant of the last 1.
		{"best-effort", map[string]any{"limit": 100, "window": "1m", "buckets": 6}, sdk.Request{Subject: "shared-be", Hits: 3, BestEffort: true}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := env.Hammer(t, rolling.New(), tc.raw, 3, 8, 20, tc.req)
			cfg := plugintest.Configure(t, rolling.New(), tc.raw)
			want := plugintest.Replay(rolling.NewModel(cfg.(rolling.Config)), env.Clock.Now(), 3*8*20, tc.req)
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
	return &harness{Rule: env.Rule(t, rolling.New(), raw), t: t, env: env}
}

// alignTo moves the clock forward to the next multiple of d and returns it.
func (h *harness) alignTo(d time.Duration) int64 {
	now, p := h.env.Clock.Now(), d.Microseconds()
	next := now - now%p + p
	h.env.Clock.Advance(time.Duration(next-now) * time.Microsecond)
	return next
}

// at moves the clock to base + off.
func (h *harness) at(base int64, off time.Duration) {
	h.t.Helper()
	target := base + off.Microseconds()
	if target < h.env.Clock.Now() {
		h.t.Fatalf("clock cannot go back to +%s", off)
	}
	h.env.Clock.Advance(time.Duration(target-h.env.Clock.Now()) * time.Microsecond)
}

func TestBucketsExpireOneByOne(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 10, "window": "10s", "buckets": 10})
	base := h.alignTo(10 * time.Second)
	h.at(base, 0)
	h.Hit(2)
	h.at(base, 1*time.Second+300*time.Millisecond)
	h.Hit(3)
	h.at(base, 4*time.Second+999*time.Millisecond)
	if d := h.Hit(5); !d.Allowed || d.Remaining != 0 || d.Reset != 10*time.Second-999*time.Millisecond {
		t.Fatalf("filling the window: %+v, want allowed, remaining 0, reset 9.001s (bucket 4 leaves at 14s)", d)
	}
	for _, step := range []struct {
		at        time.Duration
		remaining int64
	}{
		{10*time.Second - time.Microsecond, 0},
		{10 * time.Second, 2}, // bucket 0 (2 hits) leaves
		{11*time.Second - time.Microsecond, 2},
		{11 * time.Second, 5}, // bucket 1 (3 hits) leaves
		{14*time.Second - time.Microsecond, 5},
		{14 * time.Second, 10}, // bucket 4 (5 hits) leaves
	} {
		h.at(base, step.at)
		d := h.Hit(0)
		if d.Remaining != step.remaining || d.Granted != 0 || d.Allowed != (step.remaining > 0) {
			t.Fatalf("peek at +%s: %+v, want remaining %d", step.at, d, step.remaining)
		}
	}
	if d := h.Hit(0); d.Reset != 0 {
		t.Fatalf("empty window: reset %s, want 0", d.Reset)
	}
}

func TestNoDoubleBurstAtTheBoundary(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 10, "window": "10s", "buckets": 10})
	base := h.alignTo(10 * time.Second)
	h.at(base, 9*time.Second+500*time.Millisecond)
	if d := h.Hit(10); !d.Allowed {
		t.Fatalf("burst just before a window edge: %+v", d)
	}
	h.at(base, 10*time.Second) // a fixed window would start afresh here
	d := h.Hit(1)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 9*time.Second {
		t.Fatalf("at the edge: %+v, want denied until the burst's bucket leaves (9s)", d)
	}

	// Property: no span of window - bucket holds more than limit grants.
	h2 := newHarness(t, map[string]any{"limit": 10, "window": "1s", "buckets": 5})
	rng := rand.New(rand.NewPCG(3, 4))
	var grants []int64
	for range 400 {
		h2.env.Clock.Advance(time.Duration(rng.IntN(40_000)) * time.Microsecond)
		if d := h2.Decide(sdk.Request{Subject: "p", Hits: 1}); d.Allowed {
			grants = append(grants, h2.env.Clock.Now())
		}
	}
	span := int64(800_000) // window 1s - bucket 200ms
	for i := range grants {
		n := 0
		for j := i; j < len(grants) && grants[j]-grants[i] < span; j++ {
			n++
		}
		if n > 10 {
			t.Fatalf("%d grants within %dµs from t=%d", n, span, grants[i])
		}
	}
	if len(grants) < 50 {
		t.Fatalf("only %d grants in 400 requests over ~8s: the limit is not refilling", len(grants))
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 6, "window": "3s", "buckets": 3})
	base := h.alignTo(3 * time.Second)
	h.at(base, 123*time.Microsecond)
	h.Hit(2) // bucket 0, leaves at 3s
	h.at(base, 1*time.Second+7*time.Microsecond)
	h.Hit(3) // bucket 1, leaves at 4s
	h.at(base, 2*time.Second+777_777*time.Microsecond)
	h.Hit(1) // bucket 2, leaves at 5s
	for _, tc := range []struct {
		hits  int64
		retry time.Duration
	}{
		{2, 3*time.Second - (2*time.Second + 777_777*time.Microsecond)}, // bucket 0 frees 2
		{4, 4*time.Second - (2*time.Second + 777_777*time.Microsecond)}, // buckets 0 and 1 free 5
		{7, 5*time.Second - (2*time.Second + 777_777*time.Microsecond)}, // more than the limit: reset
	} {
		d := h.Hit(tc.hits)
		if d.Allowed || d.RetryAfter != tc.retry || d.Reset != 5*time.Second-(2*time.Second+777_777*time.Microsecond) {
			t.Fatalf("hits %d: %+v, want denied with retry after %s", tc.hits, d, tc.retry)
		}
	}
	// A request made 1µs before its retry_after is denied; at it, allowed.
	d := h.Hit(4)
	now := h.env.Clock.Now()
	h.env.Clock.Advance(d.RetryAfter - time.Microsecond)
	if d2 := h.Hit(4); d2.Allowed {
		t.Fatalf("1µs early: %+v", d2)
	}
	h.env.Clock.Advance(time.Microsecond)
	if d2 := h.Hit(4); !d2.Allowed || h.env.Clock.Now() != now+d.RetryAfter.Microseconds() {
		t.Fatalf("at retry_after: %+v", d2)
	}
}

func TestDedupIsIdempotentWithinTheWindow(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 5, "window": "4s", "buckets": 4})
	base := h.alignTo(4 * time.Second)
	h.at(base, 500*time.Millisecond)
	req := sdk.Request{Hits: 3, DedupID: "req-1"}
	for i, off := range []time.Duration{500 * time.Millisecond, 600 * time.Millisecond, 2 * time.Second, 4*time.Second - time.Microsecond} {
		h.at(base, off)
		if d := h.Decide(req); !d.Allowed || d.Granted != 3 || d.Remaining != 2 {
			t.Fatalf("try %d at +%s: %+v, want granted 3 once (remaining 2)", i, off, d)
		}
	}
	if d := h.Decide(sdk.Request{Hits: 3, DedupID: "req-2"}); d.Allowed {
		t.Fatalf("another id over the limit: %+v, want denied", d)
	}
	// The bucket it was counted in leaves the window at 4s: the id is new again.
	h.at(base, 4*time.Second)
	if d := h.Decide(req); !d.Allowed || d.Granted != 3 || d.Remaining != 2 {
		t.Fatalf("after the window: %+v, want a fresh grant of 3", d)
	}
	h.Hit(1) // same bucket, no id
	// Refund by id: only what it was granted, and only once.
	if d := h.Decide(sdk.Request{Hits: -10, DedupID: "req-1"}); d.Granted != -3 || d.Remaining != 4 {
		t.Fatalf("refund: %+v, want -3, remaining 4", d)
	}
	if d := h.Decide(sdk.Request{Hits: -10, DedupID: "req-1"}); d.Granted != 0 || d.Remaining != 4 {
		t.Fatalf("second refund: %+v, want nothing refunded", d)
	}
}

func TestDedupRecordsStayBounded(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 1000, "window": "1s", "buckets": 10})
	client := h.env.Redis.Client()
	ctx := context.Background()
	maxLen := int64(0)
	for i := range 60 { // 6 windows, a new id every 100ms
		h.env.Clock.Advance(100 * time.Millisecond)
		if d := h.Decide(sdk.Request{Hits: 1, DedupID: fmt.Sprintf("id-%d", i)}); !d.Allowed {
			t.Fatalf("request %d: %+v", i, d)
		}
		n0, err0 := client.HLen(ctx, "ruled:rolling:r:{s}:d0").Result()
		n1, err1 := client.HLen(ctx, "ruled:rolling:r:{s}:d1").Result()
		if err0 != nil || err1 != nil {
			t.Fatal(err0, err1)
		}
		maxLen = max(maxLen, n0+n1)
	}
	// At most two generations of 10 ids each, plus a marker per hash.
	if maxLen > 22 || maxLen < 11 {
		t.Fatalf("dedup hashes held up to %d fields, want between 11 and 22", maxLen)
	}
}

func TestBestEffortGrantsWhatIsLeft(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 5, "window": "1m", "buckets": 6})
	base := h.alignTo(time.Minute)
	h.at(base, time.Second)
	h.Hit(3)
	h.at(base, 25*time.Second)
	d := h.Decide(sdk.Request{Hits: 4, BestEffort: true})
	if !d.Allowed || d.Granted != 2 || d.Remaining != 0 {
		t.Fatalf("best effort: %+v, want granted 2 of 4", d)
	}
	// Nothing left: denied until the oldest bucket (3 hits) leaves at 60s.
	if d = h.Decide(sdk.Request{Hits: 9, BestEffort: true}); d.Allowed || d.Granted != 0 || d.RetryAfter != 35*time.Second {
		t.Fatalf("nothing left: %+v, want denied, retry after 35s", d)
	}
	h.at(base, time.Minute)
	if d = h.Decide(sdk.Request{Hits: 9, BestEffort: true}); !d.Allowed || d.Granted != 3 {
		t.Fatalf("after the first bucket left: %+v, want granted 3", d)
	}
}

func TestRefundsComeOffTheNewestBuckets(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 10, "window": "10s", "buckets": 10})
	base := h.alignTo(10 * time.Second)
	h.at(base, 0)
	h.Hit(3)
	h.at(base, 5*time.Second)
	h.Hit(3)
	if d := h.Hit(-4); !d.Allowed || d.Granted != -4 || d.Remaining != 8 || d.Reset != 5*time.Second {
		t.Fatalf("refund: %+v, want -4, remaining 8, reset 5s (only bucket 0 still holds hits: 2)", d)
	}
	if d := h.Hit(-100); d.Granted != -2 || d.Remaining != 10 || d.Reset != 0 {
		t.Fatalf("refund beyond the count: %+v, want -2 and an empty window", d)
	}
}

func TestReloadWithAnotherLayoutKeepsCounts(t *testing.T) {
	for _, refund := range []bool{false, true} {
		h := newHarness(t, map[string]any{"limit": 10, "window": "10s", "buckets": 10})
		base := h.alignTo(10 * time.Second)
		h.at(base, 0)
		h.Hit(2) // bucket 0s
		h.at(base, 3500*time.Millisecond)
		h.Decide(sdk.Request{Hits: 3, DedupID: "m"}) // bucket 3s
		h.at(base, 7200*time.Millisecond)
		h.Hit(4) // bucket 7s
		// 2.5s buckets: each old bucket moves to the next new boundary, so
		// it leaves at 10s, 15s and 17.5s (never earlier than it would have).
		h.Reconfigure(map[string]any{"limit": 10, "window": "10s", "buckets": 4})
		h.at(base, 7500*time.Millisecond)
		if d := h.Decide(sdk.Request{Hits: 3, DedupID: "m"}); !d.Allowed || d.Granted != 3 || d.Remaining != 1 || d.Reset != 10*time.Second {
			t.Fatalf("dedup retry after the reload: %+v, want the first answer, nothing consumed, reset 10s", d)
		}
		type peek struct {
			at        time.Duration
			remaining int64
		}
		steps := []peek{
			{10*time.Second - time.Microsecond, 1},
			{10 * time.Second, 3},
			{15*time.Second - time.Microsecond, 3},
			{15 * time.Second, 6},
			{17500*time.Millisecond - time.Microsecond, 6},
			{17500 * time.Millisecond, 10},
		}
		if refund {
			// The id's 3 hits moved to the 5s bucket; a refund finds them there.
			if d := h.Decide(sdk.Request{Hits: -3, DedupID: "m"}); d.Granted != -3 || d.Remaining != 4 {
				t.Fatalf("refund by id after the reload: %+v, want -3", d)
			}
			steps = []peek{{10 * time.Second, 6}, {17500*time.Millisecond - time.Microsecond, 6}, {17500 * time.Millisecond, 10}}
		}
		for _, step := range steps {
			h.at(base, step.at)
			if d := h.Hit(0); d.Remaining != step.remaining {
				t.Fatalf("refund %v, peek at +%s: %+v, want remaining %d", refund, step.at, d, step.remaining)
			}
		}
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 2, "window": "1m"})
	h.Hit(1)
	for i := 0; i < 3; i++ {
		if d := h.Hit(0); !d.Allowed || d.Remaining != 1 || d.Granted != 0 {
			t.Fatalf("peek %d: %+v", i, d)
		}
	}
}

func TestKeysExpireAfterTheirWindow(t *testing.T) {
	h := newHarness(t, map[string]any{"limit": 2, "window": "2s", "buckets": 4})
	h.Decide(sdk.Request{Subject: "ttl", Hits: 1, DedupID: "x"})
	client := h.env.Redis.Client()
	keys, err := client.Keys(context.Background(), "ruled:rolling:r:{ttl}:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v, %v: want the counts and one dedup hash", keys, err)
	}
	for _, k := range keys {
		limit := 3 * time.Second // window + 1s slack
		if strings.HasSuffix(k, ":d0") || strings.HasSuffix(k, ":d1") {
			limit = 5 * time.Second // two generations + 1s slack
		}
		ttl, err := client.PTTL(context.Background(), k).Result()
		if err != nil || ttl <= time.Second || ttl > limit {
			t.Fatalf("%s: ttl %v (%v), want more than 1s and at most %s", k, ttl, err, limit)
		}
	}
}

func TestModelForgetsIdleSubjects(t *testing.T) {
	m := rolling.NewModel(rolling.Config{Limit: 10, Window: time.Second, Buckets: 10})
	now := plugintest.StartUS
	for i := range 3000 {
		if d := m.Decide(now, sdk.Request{Subject: fmt.Sprint(i), Hits: 1, DedupID: "x"}); !d.Allowed {
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
		t.Fatalf("%d subjects after their window passed, want 0", n)
	}
}

func TestDeclaredCommandsSuffice(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := rolling.New()
	p := env.RegisterIsolated(t, alg)
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": 20, "window": "1s", "buckets": 100})
	model := rolling.NewModel(cfg.(rolling.Config))
	rng := rand.New(rand.NewPCG(21, 22))
	// Gaps up to 700ms (more than 64 buckets), refunds, dedup, best effort.
	steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 700 * time.Millisecond, MinHits: -4, MaxHits: 7, Dedup: 0.3, BestEffort: 0.3})
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		d, err := alg.Decide(context.Background(), p.Host("acl", s.Req.Subject), cfg, s.Req)
		if err != nil {
			t.Fatalf("step %d (%v): %v", i, s, err)
		}
		if want := model.Decide(env.Clock.Now(), s.Req); d != want {
			t.Fatalf("step %d (%v): got %+v, want %+v", i, s, d, want)
		}
	}
	// Time going back before the oldest tracked bucket, then a grant.
	h := p.Host("acl", "subject-0")
	for _, adv := range []time.Duration{0, -2 * time.Second} {
		env.Clock.Advance(adv)
		if d, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Hits: 2}); err != nil || !d.Allowed {
			t.Fatalf("after going back %s: %+v, %v", -adv, d, err)
		}
	}
	// A reload with another bucket size moves the buckets.
	if _, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Hits: 1}); err != nil {
		t.Fatal(err)
	}
	cfg = plugintest.Configure(t, alg, map[string]any{"limit": 20, "window": "1s", "buckets": 8})
	if d, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Hits: 0}); err != nil || d.Remaining > 15 {
		t.Fatalf("after the reload: %+v, %v: want the 5 hits still counted", d, err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want []string
	}{
		{map[string]any{}, []string{"limit: required", "window: required"}},
		{map[string]any{"limit": -1, "window": "1s"}, []string{"limit: must be between 0 (0 blocks the subject) and"}},
		{map[string]any{"limit": 1, "window": "10"}, []string{"window: want a duration"}},
		{map[string]any{"limit": 1, "window": "500us"}, []string{"window: must be between 1ms and"}},
		{map[string]any{"limit": 1, "window": "1s", "buckets": 0}, []string{"buckets: must be between 1 and 1000"}},
		{map[string]any{"limit": 1, "window": "1s", "buckets": 5000}, []string{"buckets: must be between 1 and 1000"}},
		{map[string]any{"limit": 1, "window": "1s", "buckets": 7}, []string{"buckets: window 1s does not split into 7 buckets"}},
		{map[string]any{"limit": 1, "window": "1s", "bucket": 5}, []string{"bucket: unknown field"}},
		{map[string]any{"limit": "many", "window": "1s"}, []string{"limit: want a whole number"}},
	} {
		_, err := rolling.New().Configure(tc.raw)
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
	c, err := rolling.New().Configure(map[string]any{"limit": 3, "window": "1m"})
	if err != nil || c.(rolling.Config) != (rolling.Config{Limit: 3, Window: time.Minute, Buckets: rolling.DefaultBuckets}) {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
}

// BenchmarkDecide measures one decision against real Redis with Redis's own
// clock, from many goroutines: with few live buckets (a 1m window of 60, a
// run lasting seconds) and with all 60 live (a 60ms window of 1ms buckets),
// since every decision reads each live bucket.
func BenchmarkDecide(b *testing.B) {
	env := plugintest.NewEnv(b)
	for _, bc := range []struct {
		name   string
		window string
	}{{"few-live-buckets", "1m"}, {"60-live-buckets", "60ms"}} {
		b.Run(bc.name, func(b *testing.B) {
			env.BenchDecide(b, rolling.New(), map[string]any{"limit": 1_000_000_000, "window": bc.window, "buckets": 60}, 1, true)
		})
	}
}
