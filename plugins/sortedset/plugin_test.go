package sortedset_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func newModel(c sdk.Config) sdk.LocalLimiter { return sortedset.NewModel(c.(sortedset.Config)) }

// sameMicrosecond makes a share p of the steps happen at the same
// microsecond as the step before.
func sameMicrosecond(rng *rand.Rand, steps []plugintest.Step, p float64) []plugintest.Step {
	for i := range steps {
		if rng.Float64() < p {
			steps[i].Advance = 0
		}
	}
	return steps
}

func also(pairs ...any) []any {
	var out []any
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, map[string]any{"limit": pairs[i], "window": pairs[i+1]})
	}
	return out
}

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	cases := []struct {
		name string
		raw  map[string]any
		opts plugintest.StepOptions
	}{
		{"single-rate-peeks", map[string]any{"limit": 5, "window": "1s"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond, MinHits: 0, MaxHits: 2}},
		{"two-rates-gap-best-effort", map[string]any{"limit": 10, "window": "1m", "min_gap": "250001us", "also": also(2, "3s")},
			plugintest.StepOptions{Subjects: 3, MaxAdvance: 2 * time.Second, MinHits: 0, MaxHits: 3, BestEffort: 0.3}},
		{"count-denied-refunds", map[string]any{"limit": 3, "window": "1500001us", "count_denied": true,
			"also": also(12, "10s", 2, "100ms")},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 900 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}},
		{"gap-only", map[string]any{"limit": 100, "window": "1s", "min_gap": "7777us"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 20 * time.Millisecond, MinHits: 1, MaxHits: 3}},
		{"count-denied-gap-oversized", map[string]any{"limit": 4, "window": "2s", "min_gap": "100ms", "count_denied": true,
			"also": also(6, "4s")},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 2 * time.Second, MinHits: -1, MaxHits: 6, BestEffort: 0.3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(len(tc.name))))
			steps := sameMicrosecond(rng, plugintest.RandomSteps(rng, 1000, tc.opts), 0.3)
			env.Conform(t, sortedset.New(), tc.raw, newModel, steps)
			n := outcomes(t, tc.raw, steps)
			t.Logf("%+v", n)
			if n.allowed < 20 || n.denied < 20 || n.sameUS < 5 {
				t.Fatalf("sequence too easy: %+v; want admissions, denials and admissions at one microsecond", n)
			}
		})
	}
}

type tally struct{ allowed, denied, sameUS int }

// outcomes replays steps through the model and counts what happened, so
// that conformance cases are known to exercise what they claim to.
func outcomes(t *testing.T, raw map[string]any, steps []plugintest.Step) tally {
	m := sortedset.NewModel(plugintest.Configure(t, sortedset.New(), raw).(sortedset.Config))
	now := plugintest.StartUS
	lastAdmit := map[string]int64{}
	var n tally
	for _, s := range steps {
		now += s.Advance.Microseconds()
		d := m.Decide(now, s.Req)
		switch {
		case s.Req.Hits <= 0:
		case d.Allowed:
			n.allowed++
			if lastAdmit[s.Req.Subject] == now || d.Granted > 1 {
				n.sameUS++
			}
			lastAdmit[s.Req.Subject] = now
		default:
			n.denied++
		}
	}
	return n
}

func TestConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, tc := range []struct {
		name string
		raw  map[string]any
		want int64
	}{
		{"one-rate", map[string]any{"limit": 150, "window": "1h"}, 150},
		{"two-rates-count-denied", map[string]any{"limit": 150, "window": "1h", "also": also(40, "1m"), "count_denied": true}, 40},
		{"min-gap", map[string]any{"limit": 150, "window": "1h", "min_gap": "1s"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := sdk.Request{Subject: "shared", Hits: 1}
			got := env.Hammer(t, sortedset.New(), tc.raw, 3, 8, 20, req)
			cfg := plugintest.Configure(t, sortedset.New(), tc.raw)
			want := plugintest.Replay(sortedset.NewModel(cfg.(sortedset.Config)), env.Clock.Now(), 3*8*20, req)
			if got != want || want != tc.want {
				t.Fatalf("granted %d, model %d, want %d", got, want, tc.want)
			}
		})
	}
}

// decider runs requests against one rule at the env's clock.
type decider struct {
	t       *testing.T
	alg     sdk.Algorithm
	cfg     sdk.Config
	plug    *capability.Plugin
	subject string // used when a request names none
}

func newDecider(t *testing.T, env *plugintest.Env, raw map[string]any) *decider {
	alg := sortedset.New()
	return &decider{t: t, alg: alg, cfg: plugintest.Configure(t, alg, raw), plug: plugintest.Register(t, env.Capability(), alg), subject: "s"}
}

func (x *decider) do(req sdk.Request) sdk.Decision {
	x.t.Helper()
	if req.Subject == "" {
		req.Subject = x.subject
	}
	d, err := x.alg.Decide(context.Background(), x.plug.Host("r", req.Subject), x.cfg, req)
	if err != nil {
		x.t.Fatal(err)
	}
	return d
}

func hit(n int64) sdk.Request { return sdk.Request{Hits: n} }

func TestMinGapBetweenAdmittedActions(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 100, "window": "1m", "min_gap": "500ms", "count_denied": true})
	if d := x.do(hit(1)); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	env.Clock.Advance(200 * time.Millisecond)
	if d := x.do(hit(1)); d.Allowed || d.RetryAfter != 300*time.Millisecond || d.Remaining != 98 {
		t.Fatalf("200ms later: %+v, want denied, retry after 300ms, the denial logged", d)
	}
	// Denied actions, even logged ones, do not restart the gap.
	env.Clock.Advance(300*time.Millisecond - time.Microsecond)
	if d := x.do(hit(1)); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("1µs before the gap: %+v, want denied, retry after 1µs", d)
	}
	env.Clock.Advance(time.Microsecond)
	if d := x.do(hit(1)); !d.Allowed {
		t.Fatalf("at the gap: %+v, want admitted", d)
	}
	if d := x.do(hit(0)); d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("peek right after: %+v, want denied, retry after 500ms", d)
	}
}

func TestAllRatesMustAllow(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 10, "window": "1m", "also": also(2, "3s")})
	admitted := 0
	for round := range 5 {
		// The rate with the least remaining is reported; in the last round
		// both have as little left and the minute, which resets later, wins.
		limit, window := int64(2), 3*time.Second
		if round == 4 {
			limit, window = 10, time.Minute
		}
		for k := range 2 {
			d := x.do(hit(1))
			if !d.Allowed || d.Limit != limit || d.Remaining != int64(1-k) || d.Window != window {
				t.Fatalf("round %d action %d: %+v, want admitted, reported as %d per %v", round, k, d, limit, window)
			}
			admitted++
		}
		// Denied by 2 per 3s; in the last round by 10 per minute as well,
		// and retry_after waits for both: 60s - 12s.
		retry := 3 * time.Second
		if round == 4 {
			retry = 48 * time.Second
		}
		d := x.do(hit(1))
		if d.Allowed || d.RetryAfter != retry {
			t.Fatalf("round %d third action: %+v, want denied, retry after %v", round, d, retry)
		}
		env.Clock.Advance(3 * time.Second)
	}
	// 10 admitted in 12s: now the minute is full although 2 per 3s allows.
	d := x.do(hit(1))
	if d.Allowed || d.Limit != 10 || d.Remaining != 0 || d.Window != time.Minute || d.RetryAfter != 45*time.Second {
		t.Fatalf("after %d admitted at t=15s: %+v, want denied by 10 per minute, retry after 45s", admitted, d)
	}
	env.Clock.Advance(45*time.Second - time.Microsecond)
	if d := x.do(hit(1)); d.Allowed {
		t.Fatalf("1µs early: %+v", d)
	}
	env.Clock.Advance(time.Microsecond)
	if d := x.do(hit(2)); !d.Allowed || d.Granted != 2 {
		t.Fatalf("a minute after the first: %+v, want two admitted", d)
	}
}

func TestSameMicrosecondActionsAreAllCounted(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 3, "window": "1s"})
	for k := range 3 {
		if d := x.do(hit(1)); !d.Allowed || d.Remaining != int64(2-k) {
			t.Fatalf("action %d at one microsecond: %+v, want remaining %d", k, d, 2-k)
		}
	}
	if d := x.do(hit(1)); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("fourth at the same microsecond: %+v, want denied for 1s", d)
	}
	n, err := env.Redis.Client().ZCard(context.Background(), "ruled:sortedset:r:{s}:log").Result()
	if err != nil || n != 3 {
		t.Fatalf("log holds %d entries (%v), want 3 distinct members", n, err)
	}
}

func TestCountDeniedKeepsHammerersOut(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 2, "window": "10s"}
	lenient := newDecider(t, env, raw)
	lenient.subject = "lenient"
	raw["count_denied"] = true
	strict := newDecider(t, env, raw)
	strict.subject = "strict"
	both := []*decider{lenient, strict}
	// t=0: the limit is used up.
	for _, x := range both {
		x.do(hit(1))
		x.do(hit(1))
	}
	// t=5s and t=6s: denied twice.
	for _, adv := range []time.Duration{5 * time.Second, time.Second} {
		env.Clock.Advance(adv)
		for _, x := range both {
			if d := x.do(hit(1)); d.Allowed {
				t.Fatalf("%s over the limit: %+v", x.subject, d)
			}
		}
	}
	// t=10s: the admitted actions have left the window.
	env.Clock.Advance(4 * time.Second)
	if d := lenient.do(hit(1)); !d.Allowed {
		t.Fatalf("count_denied false, the window has passed: %+v, want admitted", d)
	}
	// The log now holds the two newest entries, 6s and 10s (this denial),
	// so the next action may go at 16s.
	d := strict.do(hit(1))
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 6*time.Second {
		t.Fatalf("count_denied true: %+v, want denied (the denials at 5s and 6s count), retry after 6s", d)
	}
	// t=13s: hammering again moves that point to 20s.
	env.Clock.Advance(3 * time.Second)
	if d := strict.do(hit(1)); d.Allowed || d.RetryAfter != 7*time.Second {
		t.Fatalf("count_denied true at 13s: %+v, want denied, retry after 7s", d)
	}
	env.Clock.Advance(3 * time.Second)
	if d := strict.do(hit(1)); d.Allowed {
		t.Fatalf("count_denied true at 16s after hammering: %+v, want still denied", d)
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	env := plugintest.NewEnv(t)
	type act struct {
		advance time.Duration
		hits    int64
	}
	for _, tc := range []struct {
		name  string
		raw   map[string]any
		setup []act
		probe sdk.Request
		want  time.Duration
	}{
		{"limit", map[string]any{"limit": 3, "window": "1s"},
			[]act{{0, 1}, {123457 * time.Microsecond, 1}, {100 * time.Millisecond, 1}, {50 * time.Millisecond, 0}},
			sdk.Request{Hits: 1}, 1*time.Second - 273457*time.Microsecond},
		{"several-hits", map[string]any{"limit": 5, "window": "2s"},
			[]act{{0, 2}, {300 * time.Millisecond, 2}, {300 * time.Millisecond, 1}},
			sdk.Request{Hits: 3}, 1700 * time.Millisecond},
		{"gap", map[string]any{"limit": 5, "window": "2s", "min_gap": "333333us"},
			[]act{{0, 1}, {time.Microsecond, 0}},
			sdk.Request{Hits: 1}, 333332 * time.Microsecond},
		{"also", map[string]any{"limit": 50, "window": "1h", "also": also(1, "1500ms", 3, "10s")},
			[]act{{0, 1}, {1500 * time.Millisecond, 1}, {1500 * time.Millisecond, 1}, {1234567 * time.Microsecond, 0}},
			sdk.Request{Hits: 1}, 10*time.Second - 4234567*time.Microsecond},
		{"best-effort", map[string]any{"limit": 4, "window": "1s"},
			[]act{{0, 3}, {400 * time.Millisecond, 1}},
			sdk.Request{Hits: 3, BestEffort: true}, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newDecider(t, env, tc.raw)
			subject := "retry-" + tc.name
			for _, a := range tc.setup {
				env.Clock.Advance(a.advance)
				x.do(sdk.Request{Subject: subject, Hits: a.hits})
			}
			tc.probe.Subject = subject
			d := x.do(tc.probe)
			if d.Allowed || d.RetryAfter != tc.want {
				t.Fatalf("probe: %+v, want denied, retry after %v", d, tc.want)
			}
			env.Clock.Advance(d.RetryAfter - time.Microsecond)
			if d := x.do(tc.probe); d.Allowed {
				t.Fatalf("1µs before retry_after: %+v, want denied", d)
			}
			env.Clock.Advance(time.Microsecond)
			if d := x.do(tc.probe); !d.Allowed {
				t.Fatalf("at retry_after: %+v, want admitted", d)
			}
		})
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 2, "window": "1m", "count_denied": true})
	x.do(hit(1))
	for i := range 3 {
		if d := x.do(hit(0)); !d.Allowed || d.Remaining != 1 || d.Granted != 0 {
			t.Fatalf("peek %d: %+v, want allowed with 1 remaining", i, d)
		}
	}
	x.do(hit(1))
	for i := range 3 {
		if d := x.do(hit(0)); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Minute {
			t.Fatalf("peek %d when full: %+v, want denied, nothing logged", i, d)
		}
	}
}

func TestBestEffortGrantsWhatIsLeft(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 5, "window": "1m", "also": also(3, "1s")})
	x.do(hit(1))
	d := x.do(sdk.Request{Hits: 4, BestEffort: true})
	if !d.Allowed || d.Granted != 2 || d.Limit != 3 || d.Remaining != 0 {
		t.Fatalf("best effort: %+v, want 2 of 4 (the 3 per 1s rate)", d)
	}
}

func TestOversizedRequestIsDenied(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 10, "window": "1m", "also": also(3, "2s")})
	d := x.do(hit(4))
	if d.Allowed || d.Granted != 0 || d.Remaining != 3 || d.RetryAfter != 2*time.Second {
		t.Fatalf("4 actions against 3 per 2s: %+v, want denied, back-off of that window", d)
	}
	if d := x.do(hit(11)); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("11 actions: %+v, want denied, back-off of a minute", d)
	}
}

func TestRefundForgetsTheNewestEntries(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 3, "window": "10s"})
	x.do(hit(2))
	env.Clock.Advance(5 * time.Second)
	x.do(hit(1))
	if d := x.do(hit(-1)); !d.Allowed || d.Granted != -1 || d.Remaining != 1 || d.Reset != 5*time.Second {
		t.Fatalf("refund: %+v, want the 5s entry gone, full again in 5s", d)
	}
	if d := x.do(hit(-5)); d.Granted != -2 || d.Remaining != 3 || d.Reset != 0 {
		t.Fatalf("refund more than logged: %+v, want 2 refunded", d)
	}
}

func TestKeysHaveTTLs(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 2, "window": "2s", "min_gap": "3s"})
	x.do(hit(1))
	ctx := context.Background()
	keys, err := env.Redis.Client().Keys(ctx, "ruled:sortedset:r:{s}:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v (%v), want log and meta", keys, err)
	}
	for _, k := range keys {
		ttl, err := env.Redis.Client().PTTL(ctx, k).Result()
		if err != nil || ttl <= 3*time.Second || ttl > 4*time.Second {
			t.Fatalf("%s: ttl %v (%v), want max(window, min_gap) + 1s slack", k, ttl, err)
		}
	}
}

func TestLogIsBoundedByTheLargestLimit(t *testing.T) {
	env := plugintest.NewEnv(t)
	x := newDecider(t, env, map[string]any{"limit": 4, "window": "1m", "also": also(2, "1s"), "count_denied": true})
	for range 20 {
		x.do(hit(3))
		env.Clock.Advance(10 * time.Millisecond)
	}
	n, err := env.Redis.Client().ZCard(context.Background(), "ruled:sortedset:r:{s}:log").Result()
	if err != nil || n != 4 {
		t.Fatalf("log holds %d entries (%v), want the 4 newest", n, err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want []string
	}{
		{map[string]any{}, []string{"limit: required", "window: required"}},
		{map[string]any{"limit": -1, "window": "1s"}, []string{"limit: must be from 0 (0 blocks the subject) to 100000"}},
		{map[string]any{"limit": 1, "window": "10us"}, []string{"window: must be a whole number of microseconds from 1ms"}},
		{map[string]any{"limit": 1, "window": "1s", "min_gap": "-1s"}, []string{"min_gap: must be a whole number of microseconds from 0"}},
		{map[string]any{"limit": 1, "window": "1s", "count_denied": "yes"}, []string{"count_denied: want true or false"}},
		{map[string]any{"limit": 1, "window": "1s", "also": map[string]any{"limit": 1}}, []string{"also: want a list"}},
		{map[string]any{"limit": 1, "window": "1s", "also": []any{map[string]any{"limit": 2}, 7, map[string]any{"limit": 0, "window": "1s", "x": 1}}},
			[]string{"also[0]: window: required", "also[1]: want a mapping", "also[2]: x: unknown field"}},
		{map[string]any{"limit": 1, "window": "1s", "also": also(-1, "1s")}, []string{"also[0]: limit: must be from 0"}},
		{map[string]any{"limit": 1, "window": "1s", "gap": "1s"}, []string{"gap: unknown field"}},
	} {
		_, err := sortedset.New().Configure(tc.raw)
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
	cfg, err := sortedset.New().Configure(map[string]any{"limit": 3, "window": "1m", "also": also(1, "1s")})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.(sortedset.Config)
	if c.MinGap != 0 || c.CountDenied || len(c.Rates()) != 2 || c.Rates()[1] != (sortedset.Rate{Limit: 1, Window: time.Second}) {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestModelPruneForgetsOnlyIdleSubjects(t *testing.T) {
	m := sortedset.NewModel(sortedset.Config{Limit: 2, Window: time.Second, MinGap: 3 * time.Second})
	now := plugintest.StartUS
	m.Decide(now, sdk.Request{Subject: "a", Hits: 1})
	m.Prune(now + 2_000_000) // log empty, gap still running
	if m.Len() != 1 {
		t.Fatalf("%d subjects, want the one whose gap still runs", m.Len())
	}
	if d := m.Decide(now+2_000_000, sdk.Request{Subject: "a", Hits: 1}); d.Allowed {
		t.Fatalf("gap forgotten: %+v", d)
	}
	m.Prune(now + 3_000_000)
	if m.Len() != 0 {
		t.Fatalf("%d subjects after the gap, want 0", m.Len())
	}
}

// BenchmarkDecide measures decisions against a real redis-server with Redis
// time (no injected clock), from 32 goroutines per CPU over 1000 subjects.
func BenchmarkDecide(b *testing.B) {
	env := plugintest.NewEnv(b)
	for _, bc := range []struct {
		name string
		raw  map[string]any
	}{
		{"one-rate", map[string]any{"limit": 100, "window": "1m"}},
		{"two-rates-gap", map[string]any{"limit": 100, "window": "1m", "min_gap": "1ms", "also": also(10, "1s")}},
	} {
		b.Run(bc.name, func(b *testing.B) { env.BenchDecide(b, sortedset.New(), bc.raw, 1000, false) })
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
	env.Conform(t, sortedset.New(), map[string]any{"limit": 4, "window": "1s", "min_gap": "50ms", "count_denied": true, "also": also(2, "300ms")}, newModel, steps)
}
