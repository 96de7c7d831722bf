package sortedset_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// The tests of this file check the block form, a rate of limit 0: hits and
// peeks are denied without calling Redis (a peek as in a full window), a
// refund forgets entries logged before the block, Limit and Remaining are 0,
// and reset and retry_after are the longest window among the rates of
// limit 0.

// TestBlockReportedValues: the exact answers to a block, with the primary
// rate or rates in also at 0, and with min_gap and count_denied, which a
// block leaves unused.
func TestBlockReportedValues(t *testing.T) {
	env := plugintest.NewEnv(t)
	const m, h = time.Minute, time.Hour
	for _, tc := range []struct {
		raw    map[string]any
		window time.Duration
	}{
		{map[string]any{"limit": 0, "window": "1m"}, m},
		{map[string]any{"limit": 0, "window": "1m", "min_gap": "1s", "count_denied": true, "also": also(5, "1h")}, m},
		{map[string]any{"limit": 5, "window": "1m", "also": also(0, "10s", 3, "1h", 0, "1h", 0, "5m")}, h},
	} {
		x := newDecider(t, env, tc.raw)
		w := tc.window
		for _, c := range []struct {
			what string
			req  sdk.Request
			want sdk.Decision
		}{
			{"peek", hit(0), sdk.Decision{Window: w, Reset: w, RetryAfter: w}},
			{"1 hit", hit(1), sdk.Decision{Window: w, Reset: w, RetryAfter: w}},
			{"5 hits", hit(5), sdk.Decision{Window: w, Reset: w, RetryAfter: w}},
			{"best effort", sdk.Request{Hits: 3, BestEffort: true}, sdk.Decision{Window: w, Reset: w, RetryAfter: w}},
			{"refund, nothing logged", hit(-2), sdk.Decision{Allowed: true, Window: w, Reset: w}},
		} {
			if d := x.do(c.req); d != c.want {
				t.Errorf("%v, %s: %+v, want %+v", tc.raw, c.what, d, c.want)
			}
		}
		n, err := env.Redis.Client().Exists(context.Background(), "ruled:sortedset:r:{s}:log", "ruled:sortedset:r:{s}:meta").Result()
		if err != nil || n != 0 {
			t.Errorf("%v: the block left %d keys (%v), want none, even with count_denied", tc.raw, n, err)
		}
	}
}

// noRedis is a host whose every script call fails.
type noRedis struct{ calls int }

func (h *noRedis) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	h.calls++
	return sdk.Reply{}, errors.New("no Redis here")
}

func (*noRedis) Log(sdk.Level, string) {}

// TestBlockNeedsNoRedis: hits >= 0 under a block are answered without a
// script call; a refund still runs the script.
func TestBlockNeedsNoRedis(t *testing.T) {
	alg := sortedset.New()
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": 10, "window": "1m", "also": also(0, "1s"), "count_denied": true})
	h := &noRedis{}
	for _, req := range []sdk.Request{hit(0), hit(1), {Hits: 7, BestEffort: true}} {
		want := sdk.Decision{Window: time.Second, Reset: time.Second, RetryAfter: time.Second}
		if d, err := alg.Decide(context.Background(), h, cfg, req); err != nil || d != want {
			t.Fatalf("%+v: %+v, %v; want %+v", req, d, err, want)
		}
	}
	if h.calls != 0 {
		t.Fatalf("%d script calls for a block", h.calls)
	}
	if _, err := alg.Decide(context.Background(), h, cfg, hit(-1)); err == nil || h.calls != 1 {
		t.Fatalf("refund under a block: %v after %d calls, want the script's error", err, h.calls)
	}
}

// TestScriptAgreesOnBlocks: the script, which Decide does not call for a
// block and hits >= 0, answers such requests as Decide does and writes
// nothing, even with count_denied.
func TestScriptAgreesOnBlocks(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := sortedset.New()
	plug := plugintest.Register(t, env.Capability(), alg)
	shape := sdk.ShapesOf(alg.Info())("decide")
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": 2, "window": "1m", "min_gap": "5ms", "count_denied": true,
		"also": also(0, "1s", 0, "10s")})
	for _, req := range []sdk.Request{hit(0), hit(1), hit(3), {Hits: 2, BestEffort: true}} {
		best := 0
		if req.BestEffort {
			best = 1
		}
		// nrates, (limit, window_us) per rate, min_gap_us, count_denied, hits, best_effort
		reply, err := plug.Host("r", "s").Eval(context.Background(), "decide", []string{"log", "meta"},
			3, 2, 60_000_000, 0, 1_000_000, 0, 10_000_000, 5000, 1, req.Hits, best)
		if err != nil {
			t.Fatal(err)
		}
		got, err := shape.Decision(reply, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want, err := alg.Decide(context.Background(), &noRedis{}, cfg, req)
		if err != nil || got != want {
			t.Fatalf("%+v: script %+v, Decide %+v (%v)", req, got, want, err)
		}
	}
	if n, err := env.Redis.Client().Exists(context.Background(), "ruled:sortedset:r:{s}:log", "ruled:sortedset:r:{s}:meta").Result(); err != nil || n != 0 {
		t.Fatalf("the script wrote %d keys (%v) for a block", n, err)
	}
}

// TestBlockConformsToModel: plugin and model agree on blocks, refunds and
// best effort included.
func TestBlockConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for i, raw := range []map[string]any{
		{"limit": 0, "window": "1s"},
		{"limit": 3, "window": "1s", "min_gap": "50ms", "count_denied": true, "also": also(0, "300ms", 0, "2s")},
	} {
		rng := rand.New(rand.NewPCG(5, uint64(i)))
		steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 400 * time.Millisecond,
			MinHits: -2, MaxHits: 3, BestEffort: 0.3})
		env.Conform(t, sortedset.New(), raw, newModel, steps)
	}
}

// TestBlockSwitchedOnAndOff switches a subject between two rates and the
// same with the shorter one at 0, at random, as a dynamic limit does, and
// checks every answer against the model of the block's meaning: under the
// block, hits >= 0 are decided without the log (the block model's answer)
// and a refund forgets entries as the open config would, reporting limit 0,
// remaining 0 and the block's window as reset.
func TestBlockSwitchedOnAndOff(t *testing.T) {
	env := plugintest.NewEnv(t)
	open := map[string]any{"limit": 4, "window": "1s", "min_gap": "20ms", "count_denied": true, "also": also(2, "300ms")}
	shut := map[string]any{"limit": 4, "window": "1s", "min_gap": "20ms", "count_denied": true, "also": also(0, "300ms")}
	alg := sortedset.New()
	openCfg, shutCfg := plugintest.Configure(t, alg, open), plugintest.Configure(t, alg, shut)
	x := newDecider(t, env, open)
	openModel, shutModel := sortedset.NewModel(openCfg.(sortedset.Config)), sortedset.NewModel(shutCfg.(sortedset.Config))
	rng := rand.New(rand.NewPCG(9, 41))
	steps := sameMicrosecond(rng, plugintest.RandomSteps(rng, 600, plugintest.StepOptions{Subjects: 1, MaxAdvance: 150 * time.Millisecond,
		MinHits: -2, MaxHits: 3, BestEffort: 0.3}), 0.2)
	plugintest.CheckBlockSwitch(t, env, rng, steps, openModel, shutModel, func(block bool, r sdk.Request) sdk.Decision {
		x.cfg = openCfg
		if block {
			x.cfg = shutCfg
		}
		return x.do(r)
	})
}

// TestBlockStaysABlockLocally: on_error: local with a share of the quota
// does not raise limit 0 to sdk.ScaleLimit's floor of 1, in also either.
func TestBlockStaysABlockLocally(t *testing.T) {
	for _, raw := range []map[string]any{
		{"limit": 0, "window": "1m"},
		{"limit": 30, "window": "1m", "also": also(0, "1h")},
	} {
		cfg := plugintest.Configure(t, sortedset.New(), raw)
		l, err := sortedset.Plugin{}.NewLocal(cfg, 1.0/3)
		if err != nil {
			t.Fatal(err)
		}
		for _, hits := range []int64{1, 0} {
			if d := l.Decide(plugintest.StartUS, sdk.Request{Subject: "s", Hits: hits}); d.Allowed || d.Limit != 0 || d.RetryAfter <= 0 || d.RetryAfter != d.Reset {
				t.Fatalf("%v, local, hits %d: %+v, want denied with limit 0 and retry_after = reset", raw, hits, d)
			}
		}
	}
}
