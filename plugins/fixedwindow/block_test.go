package fixedwindow_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// The tests of this file check the block form, limit 0: hits and peeks are
// denied until the end of the window (a peek as in an exhausted window), a
// refund gives back what was counted before the block, and Limit and
// Remaining are 0.

// TestBlockReportedValues: the exact answers to a block, 7s before the end
// of a 10s window.
func TestBlockReportedValues(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 0, "window": "10s"}
	setClock(env, time.Date(2026, 10, 2, 12, 0, 3, 0, time.UTC))
	const s7, s10 = 7 * time.Second, 10 * time.Second
	for _, tc := range []struct {
		what string
		req  sdk.Request
		want sdk.Decision
	}{
		{"peek", hit("s", 0), sdk.Decision{Window: s10, Reset: s7, RetryAfter: s7}},
		{"1 hit", hit("s", 1), sdk.Decision{Window: s10, Reset: s7, RetryAfter: s7}},
		{"5 hits", hit("s", 5), sdk.Decision{Window: s10, Reset: s7, RetryAfter: s7}},
		{"best effort", sdk.Request{Subject: "s", Hits: 3, BestEffort: true}, sdk.Decision{Window: s10, Reset: s7, RetryAfter: s7}},
		{"dedup id", sdk.Request{Subject: "s", Hits: 1, DedupID: "a"}, sdk.Decision{Window: s10, Reset: s7, RetryAfter: s7}},
		{"refund, nothing counted", hit("s", -2), sdk.Decision{Allowed: true, Window: s10, Reset: s7}},
	} {
		if d := decide(t, env, raw, tc.req); d != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.what, d, tc.want)
		}
	}
	// With an offset the window, and so retry_after, ends at the offset.
	if d := decide(t, env, map[string]any{"limit": 0, "window": "10s", "offset": "4s"}, hit("s", 1)); d.RetryAfter != time.Second || d.Reset != time.Second {
		t.Errorf("offset 4s: %+v, want retry_after and reset 1s", d)
	}
	// 1µs before the end of the window: never 0.
	env.Clock.Advance(s7 - time.Microsecond)
	if d := decide(t, env, raw, hit("s", 1)); d.RetryAfter != time.Microsecond || d.Reset != time.Microsecond {
		t.Errorf("1µs before the end: %+v, want retry_after and reset 1µs", d)
	}
	env.Clock.Advance(time.Microsecond)
	if d := decide(t, env, raw, hit("s", 1)); d.Allowed || d.RetryAfter != s10 {
		t.Errorf("at the edge: %+v, want denied for the whole next window", d)
	}
}

// TestBlockConformsToModel: script and model agree on a block, refunds,
// dedup ids and best effort included.
func TestBlockConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(5, 23))
	steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 400 * time.Millisecond,
		MinHits: -2, MaxHits: 3, Dedup: 0.3, BestEffort: 0.3})
	env.Conform(t, fixedwindow.New(), map[string]any{"limit": 0, "window": "1s", "offset": "300ms"}, newModel, steps)
}

// TestBlockSwitchedOnAndOff switches a subject between limit 4 and the block
// at random, as a dynamic limit does, and checks every answer against the
// model of the block's meaning: under the block, hits >= 0 are decided
// without the counts (the block model's answer) and a refund acts on the
// counts as limit 4 would, reporting limit 0, remaining 0 and the block's
// reset.
func TestBlockSwitchedOnAndOff(t *testing.T) {
	env := plugintest.NewEnv(t)
	open := map[string]any{"limit": 4, "window": "1s"}
	shut := map[string]any{"limit": 0, "window": "1s"}
	rule := env.Rule(t, fixedwindow.New(), open)
	openModel := fixedwindow.NewModel(plugintest.Configure(t, fixedwindow.New(), open).(fixedwindow.Config))
	shutModel := fixedwindow.NewModel(plugintest.Configure(t, fixedwindow.New(), shut).(fixedwindow.Config))
	rng := rand.New(rand.NewPCG(9, 31))
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
// subject's keys, ignores the window's dedup records, and leaves the count
// for when the block is lifted.
func TestBlockKeepsTheCount(t *testing.T) {
	env := plugintest.NewEnv(t)
	setClock(env, time.Date(2026, 10, 2, 12, 0, 30, 0, time.UTC))
	open := map[string]any{"limit": 5, "window": "1m"}
	shut := map[string]any{"limit": 0, "window": "1m"}
	decide(t, env, open, sdk.Request{Subject: "s", Hits: 3, DedupID: "a"})
	before := env.KeyspaceReads(t)
	for _, req := range []sdk.Request{hit("s", 0), hit("s", 1), {Subject: "s", Hits: 3, DedupID: "a"}, hit("fresh", 1)} {
		if d := decide(t, env, shut, req); d.Allowed || d.Granted != 0 || d.Limit != 0 || d.Remaining != 0 || d.Reset != 30*time.Second || d.RetryAfter != 30*time.Second {
			t.Fatalf("block, %+v: %+v", req, d)
		}
	}
	if after := env.KeyspaceReads(t); after != before {
		t.Fatalf("the block read keys: keyspace hits+misses %d, then %d", before, after)
	}
	if n, err := env.Redis.Client().Exists(context.Background(), "ruled:fixedwindow:r:{fresh}:c").Result(); err != nil || n != 0 {
		t.Fatalf("a denied subject got a counter (%d, %v)", n, err)
	}
	if d := decide(t, env, shut, hit("s", -1)); !d.Allowed || d.Granted != -1 || d.Limit != 0 || d.Remaining != 0 || d.Reset != 30*time.Second {
		t.Fatalf("refund under the block: %+v, want granted -1 with limit and remaining 0", d)
	}
	if env.KeyspaceReads(t) == before {
		t.Fatal("the refund read no keys either: KeyspaceReads does not count lookups")
	}
	if d := decide(t, env, open, hit("s", 0)); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("block lifted: %+v, want remaining 3 (3 counted, 1 refunded)", d)
	}
	if d := decide(t, env, open, sdk.Request{Subject: "s", Hits: 3, DedupID: "a"}); !d.Allowed || d.Granted != 3 {
		t.Fatalf("dedup retry after the block: %+v, want the recorded grant", d)
	}
}

// TestBlockStaysABlockLocally: on_error: local with a share of the quota
// does not raise limit 0 to sdk.ScaleLimit's floor of 1.
func TestBlockStaysABlockLocally(t *testing.T) {
	cfg := plugintest.Configure(t, fixedwindow.New(), map[string]any{"limit": 0, "window": "1m"})
	l, err := fixedwindow.Plugin{}.NewLocal(cfg, 1.0/3)
	if err != nil {
		t.Fatal(err)
	}
	for _, hits := range []int64{1, 0} {
		if d := l.Decide(plugintest.StartUS, hit("s", hits)); d.Allowed || d.Limit != 0 || d.RetryAfter <= 0 || d.RetryAfter != d.Reset {
			t.Fatalf("local block, hits %d: %+v, want denied with limit 0 and retry_after = reset", hits, d)
		}
	}
}
