package rolling_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// The tests of this file check the block form, limit 0: hits and peeks are
// denied (a peek as in an exhausted window), a refund gives back what was
// counted before the block, Limit and Remaining are 0, and reset and
// retry_after are the time until a hit counted now would leave the window:
// the current bucket's start plus window.

// setClockTo moves the env's clock to t, forward or back.
func setClockTo(env *plugintest.Env, t time.Time) {
	env.Clock.Advance(time.Duration(t.UnixMicro()-env.Clock.Now()) * time.Microsecond)
}

// TestBlockReportedValues: the exact answers to a block at 12:00:03 UTC,
// in the bucket that began at 12:00:02 and leaves the window at 12:00:12.
func TestBlockReportedValues(t *testing.T) {
	env := plugintest.NewEnv(t)
	rule := env.Rule(t, rolling.New(), map[string]any{"limit": 0, "window": "10s", "buckets": 5})
	setClockTo(env, time.Date(2026, 10, 2, 12, 0, 3, 0, time.UTC))
	const s9, s10 = 9 * time.Second, 10 * time.Second
	for _, tc := range []struct {
		what string
		req  sdk.Request
		want sdk.Decision
	}{
		{"peek", sdk.Request{Hits: 0}, sdk.Decision{Window: s10, Reset: s9, RetryAfter: s9}},
		{"1 hit", sdk.Request{Hits: 1}, sdk.Decision{Window: s10, Reset: s9, RetryAfter: s9}},
		{"5 hits", sdk.Request{Hits: 5}, sdk.Decision{Window: s10, Reset: s9, RetryAfter: s9}},
		{"best effort", sdk.Request{Hits: 3, BestEffort: true}, sdk.Decision{Window: s10, Reset: s9, RetryAfter: s9}},
		{"dedup id", sdk.Request{Hits: 1, DedupID: "a"}, sdk.Decision{Window: s10, Reset: s9, RetryAfter: s9}},
		{"refund, nothing counted", sdk.Request{Hits: -2}, sdk.Decision{Allowed: true, Window: s10, Reset: s9}},
	} {
		if d := rule.Decide(tc.req); d != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.what, d, tc.want)
		}
	}
	// The last microsecond of the bucket: window - bucket + 1µs, never less.
	env.Clock.Advance(time.Second - time.Microsecond)
	if d := rule.Hit(1); d.RetryAfter != 8*time.Second+time.Microsecond || d.Reset != d.RetryAfter {
		t.Errorf("last µs of the bucket: %+v, want retry_after and reset 8.000001s", d)
	}
	// One bucket: a fixed window aligned to the epoch.
	rule.Reconfigure(map[string]any{"limit": 0, "window": "10s", "buckets": 1})
	setClockTo(env, time.Date(2026, 10, 2, 12, 0, 10, 0, time.UTC).Add(-time.Microsecond))
	if d := rule.Hit(1); d.RetryAfter != time.Microsecond {
		t.Errorf("one bucket, 1µs before its end: %+v, want retry_after 1µs", d)
	}
}

// TestBlockConformsToModel: script and model agree on a block, refunds,
// dedup ids and best effort included.
func TestBlockConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(5, 29))
	steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 400 * time.Millisecond,
		MinHits: -2, MaxHits: 3, Dedup: 0.3, BestEffort: 0.3})
	env.Conform(t, rolling.New(), map[string]any{"limit": 0, "window": "1s", "buckets": 4}, newModel, steps)
}

// TestBlockSwitchedOnAndOff switches a subject between limit 4 and the block
// at random, as a dynamic limit does, and checks every answer against the
// model of the block's meaning: under the block, hits >= 0 are decided
// without the counts (the block model's answer) and a refund acts on the
// counts as limit 4 would, reporting limit 0, remaining 0 and the block's
// reset.
func TestBlockSwitchedOnAndOff(t *testing.T) {
	env := plugintest.NewEnv(t)
	open := map[string]any{"limit": 4, "window": "1s", "buckets": 5}
	shut := map[string]any{"limit": 0, "window": "1s", "buckets": 5}
	rule := env.Rule(t, rolling.New(), open)
	openModel := rolling.NewModel(plugintest.Configure(t, rolling.New(), open).(rolling.Config))
	shutModel := rolling.NewModel(plugintest.Configure(t, rolling.New(), shut).(rolling.Config))
	rng := rand.New(rand.NewPCG(9, 37))
	steps := plugintest.RandomSteps(rng, 600, plugintest.StepOptions{Subjects: 1, MaxAdvance: 150 * time.Millisecond,
		MinHits: -2, MaxHits: 3, Dedup: 0.3, BestEffort: 0.3})
	plugintest.CheckBlockSwitch(t, env, rng, steps, openModel, shutModel, func(block bool, r sdk.Request) sdk.Decision {
		cfg := open
		if block {
			cfg = shut
		}
		rule.Reconfigure(cfg)
		return rule.Decide(r)
	})
}

// TestBlockKeepsTheCount: a block decides without reading or writing the
// subject's keys, ignores dedup records, and leaves the counts for when the
// block is lifted.
func TestBlockKeepsTheCount(t *testing.T) {
	env := plugintest.NewEnv(t)
	open := map[string]any{"limit": 5, "window": "1m", "buckets": 6}
	shut := map[string]any{"limit": 0, "window": "1m", "buckets": 6}
	rule := env.Rule(t, rolling.New(), open)
	setClockTo(env, time.Date(2026, 10, 2, 12, 0, 30, 0, time.UTC))
	rule.Decide(sdk.Request{Hits: 3, DedupID: "a"})
	rule.Reconfigure(shut)
	before := env.KeyspaceReads(t)
	for _, req := range []sdk.Request{{Hits: 0}, {Hits: 1}, {Hits: 3, DedupID: "a"}, {Subject: "fresh", Hits: 1}} {
		if d := rule.Decide(req); d.Allowed || d.Granted != 0 || d.Limit != 0 || d.Remaining != 0 || d.Reset != time.Minute || d.RetryAfter != time.Minute {
			t.Fatalf("block, %+v: %+v", req, d)
		}
	}
	if after := env.KeyspaceReads(t); after != before {
		t.Fatalf("the block read keys: keyspace hits+misses %d, then %d", before, after)
	}
	if n, err := env.Redis.Client().Exists(context.Background(), "ruled:rolling:r:{fresh}:c").Result(); err != nil || n != 0 {
		t.Fatalf("a denied subject got a counter (%d, %v)", n, err)
	}
	if d := rule.Hit(-1); !d.Allowed || d.Granted != -1 || d.Limit != 0 || d.Remaining != 0 || d.Reset != time.Minute {
		t.Fatalf("refund under the block: %+v, want granted -1 with limit and remaining 0, reset 1m", d)
	}
	if env.KeyspaceReads(t) == before {
		t.Fatal("the refund read no keys either: KeyspaceReads does not count lookups")
	}
	rule.Reconfigure(open)
	if d := rule.Hit(0); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("block lifted: %+v, want remaining 3 (3 counted, 1 refunded)", d)
	}
	if d := rule.Decide(sdk.Request{Hits: 3, DedupID: "a"}); !d.Allowed || d.Granted != 3 {
		t.Fatalf("dedup retry after the block: %+v, want the recorded grant", d)
	}
}

// TestBlockStaysABlockLocally: on_error: local with a share of the quota
// does not raise limit 0 to sdk.ScaleLimit's floor of 1.
func TestBlockStaysABlockLocally(t *testing.T) {
	cfg := plugintest.Configure(t, rolling.New(), map[string]any{"limit": 0, "window": "1m"})
	l, err := rolling.Plugin{}.NewLocal(cfg, 1.0/3)
	if err != nil {
		t.Fatal(err)
	}
	for _, hits := range []int64{1, 0} {
		if d := l.Decide(plugintest.StartUS, sdk.Request{Subject: "s", Hits: hits}); d.Allowed || d.Limit != 0 || d.RetryAfter <= 0 || d.RetryAfter != d.Reset {
			t.Fatalf("local block, hits %d: %+v, want denied with limit 0 and retry_after = reset", hits, d)
		}
	}
}
