package fixedwindow_test

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/redisinfo"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// The tests of this file check what docs/plugins.md, "fixedwindow", promises,
// with the env's clock (Redis time for the script) set to wall-clock instants.

// setClock moves the env's clock to t, forward or back.
func setClock(env *plugintest.Env, t time.Time) {
	env.Clock.Advance(time.Duration(t.UnixMicro()-env.Clock.Now()) * time.Microsecond)
}

func hit(subject string, hits int64) sdk.Request { return sdk.Request{Subject: subject, Hits: hits} }

// TestOffsetPlacesBoundariesOnTheUTCClock: windows start at the Unix epoch
// plus offset plus whole windows, so a 24h window turns over at midnight UTC,
// or at 05:00 UTC with offset 5h.
func TestOffsetPlacesBoundariesOnTheUTCClock(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, tc := range []struct {
		subject string
		raw     map[string]any
		edge    time.Time // a window boundary
	}{
		{"day", map[string]any{"limit": 1, "window": "24h"}, time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC)},
		{"day+5h", map[string]any{"limit": 1, "window": "24h", "offset": "5h"}, time.Date(2026, 10, 2, 5, 0, 0, 0, time.UTC)},
		{"hour+15m", map[string]any{"limit": 1, "window": "1h", "offset": "15m"}, time.Date(2026, 10, 2, 10, 15, 0, 0, time.UTC)},
	} {
		setClock(env, tc.edge.Add(-time.Microsecond))
		d := decide(t, env, tc.raw, hit(tc.subject, 1))
		if !d.Allowed || d.Reset != time.Microsecond {
			t.Fatalf("%s, 1µs before %s: %+v, want allowed with reset 1µs", tc.subject, tc.edge, d)
		}
		if d = decide(t, env, tc.raw, hit(tc.subject, 1)); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Fatalf("%s, 1µs before %s, again: %+v, want denied, retry after 1µs", tc.subject, tc.edge, d)
		}
		setClock(env, tc.edge)
		if d = decide(t, env, tc.raw, hit(tc.subject, 1)); !d.Allowed || d.Reset != d.Window || d.Remaining != 0 {
			t.Fatalf("%s, at %s: %+v, want allowed in a fresh window", tc.subject, tc.edge, d)
		}
	}
	// The same 24h window without offset turned over 5 hours earlier.
	setClock(env, time.Date(2026, 10, 2, 4, 0, 0, 0, time.UTC))
	if d := decide(t, env, map[string]any{"limit": 1, "window": "24h"}, hit("day", 0)); d.Reset != 20*time.Hour {
		t.Fatalf("04:00 UTC, no offset: %+v, want reset 20h (next midnight)", d)
	}
}

// TestTwiceTheLimitAcrossAnEdge: limit at the end of one window and limit at
// the start of the next, 1µs apart.
func TestTwiceTheLimitAcrossAnEdge(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 3, "window": "1m"}
	edge := time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)
	setClock(env, edge.Add(-time.Microsecond))
	granted := int64(0)
	for i := 0; i < 4; i++ {
		granted += decide(t, env, raw, hit("s", 1)).Granted
	}
	setClock(env, edge)
	for i := 0; i < 4; i++ {
		granted += decide(t, env, raw, hit("s", 1)).Granted
	}
	if granted != 6 {
		t.Fatalf("granted %d within 1µs across the edge, want 6 (2 × limit)", granted)
	}
}

// TestReportedValues: limit, remaining, reset, retry_after, granted and
// window for peeks, grants, denials and best_effort.
func TestReportedValues(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 4, "window": "10s"}
	setClock(env, time.Date(2026, 10, 2, 12, 0, 3, 0, time.UTC)) // 7s before the window ends
	type want struct {
		allowed              bool
		granted, remaining   int64
		reset, retry, window time.Duration
	}
	check := func(what string, d sdk.Decision, w want) {
		t.Helper()
		got := want{d.Allowed, d.Granted, d.Remaining, d.Reset, d.RetryAfter, d.Window}
		if got != w || d.Limit != 4 || d.Delay != 0 {
			t.Fatalf("%s: %+v, want %+v with limit 4", what, d, w)
		}
	}
	const s7, s10 = 7 * time.Second, 10 * time.Second
	// Nothing counted: reset is still the end of the window.
	check("peek, fresh", decide(t, env, raw, hit("s", 0)), want{true, 0, 4, s7, 0, s10})
	check("grant 3", decide(t, env, raw, hit("s", 3)), want{true, 3, 1, s7, 0, s10})
	check("2 of 1 left", decide(t, env, raw, hit("s", 2)), want{false, 0, 1, s7, s7, s10})
	check("best effort 2 of 1 left", decide(t, env, raw, sdk.Request{Subject: "s", Hits: 2, BestEffort: true}), want{true, 1, 0, s7, 0, s10})
	check("peek, used up", decide(t, env, raw, hit("s", 0)), want{false, 0, 0, s7, s7, s10})
	check("best effort, used up", decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1, BestEffort: true}), want{false, 0, 0, s7, s7, s10})
	// More than limit never fits: retry_after is the end of the window, a
	// hint only, since the next window denies it too.
	check("5 of 4", decide(t, env, raw, hit("big", 5)), want{false, 0, 4, s7, s7, s10})
	env.Clock.Advance(s7)
	check("5 of 4, next window", decide(t, env, raw, hit("big", 5)), want{false, 0, 4, s10, s10, s10})
	check("s, next window", decide(t, env, raw, hit("s", 1)), want{true, 1, 3, s10, 0, s10})
}

// TestRefunds: negative hits take back at most what the current window
// counted; with dedup_id only what that id was granted, once.
func TestRefunds(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 5, "window": "1m"}
	setClock(env, time.Date(2026, 10, 2, 12, 0, 10, 0, time.UTC))
	decide(t, env, raw, hit("plain", 3))
	if d := decide(t, env, raw, hit("plain", -5)); !d.Allowed || d.Granted != -3 || d.Remaining != 5 {
		t.Fatalf("refund 5 of 3 counted: %+v, want granted -3, remaining 5", d)
	}

	decide(t, env, raw, sdk.Request{Subject: "id", Hits: 2, DedupID: "a"})
	decide(t, env, raw, hit("id", 2))
	if d := decide(t, env, raw, sdk.Request{Subject: "id", Hits: -5, DedupID: "a"}); d.Granted != -2 || d.Remaining != 3 {
		t.Fatalf("refund of id a: %+v, want granted -2, remaining 3", d)
	}
	if d := decide(t, env, raw, sdk.Request{Subject: "id", Hits: -5, DedupID: "a"}); d.Granted != 0 || d.Remaining != 3 {
		t.Fatalf("second refund of id a: %+v, want nothing refunded", d)
	}
	if d := decide(t, env, raw, sdk.Request{Subject: "id", Hits: -1, DedupID: "unknown"}); d.Granted != 0 || d.Remaining != 3 {
		t.Fatalf("refund of an unknown id: %+v, want nothing refunded", d)
	}

	// A grant of the previous window cannot be refunded.
	decide(t, env, raw, sdk.Request{Subject: "old", Hits: 2, DedupID: "b"})
	env.Clock.Advance(time.Minute)
	decide(t, env, raw, hit("old", 1))
	if d := decide(t, env, raw, hit("old", -2)); d.Granted != -1 || d.Remaining != 5 {
		t.Fatalf("refund 2 after the window turned: %+v, want only this window's 1 refunded", d)
	}
	if d := decide(t, env, raw, sdk.Request{Subject: "old", Hits: -2, DedupID: "b"}); d.Granted != 0 {
		t.Fatalf("refund of an id of the previous window: %+v, want nothing refunded", d)
	}
}

// TestDedupRetryAfterTheWindowCountsAgain: a dedup record lasts only for
// the window it was granted in, and denials and peeks are not recorded.
func TestDedupRetryAfterTheWindowCountsAgain(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 2, "window": "1m"}
	setClock(env, time.Date(2026, 10, 2, 12, 0, 10, 0, time.UTC))
	decide(t, env, raw, sdk.Request{Subject: "s", Hits: 2, DedupID: "x"})
	if d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1, DedupID: "y"}); d.Allowed {
		t.Fatalf("over the limit: %+v, want denied", d)
	}
	env.Clock.Advance(time.Minute)
	// A peek ignores dedup_id: it reports no grant and records nothing.
	if d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 0, DedupID: "y"}); !d.Allowed || d.Granted != 0 || d.Remaining != 2 {
		t.Fatalf("peek with an id: %+v, want allowed, nothing granted", d)
	}
	if d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1, DedupID: "y"}); !d.Allowed || d.Granted != 1 || d.Remaining != 1 {
		t.Fatalf("denied id retried in the next window: %+v, want granted", d)
	}
	if d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 2, DedupID: "x"}); d.Allowed {
		t.Fatalf("id of the previous window retried: %+v, want counted again (and denied)", d)
	}
}

// TestReloadKeepsTheCountOfTheSameWindowStart: the count belongs to the
// window's start instant, whatever the config that made it.
func TestReloadKeepsTheCountOfTheSameWindowStart(t *testing.T) {
	env := plugintest.NewEnv(t)
	setClock(env, time.Date(2026, 10, 2, 12, 0, 30, 0, time.UTC))
	decide(t, env, map[string]any{"limit": 3, "window": "1m"}, hit("s", 3))
	if d := decide(t, env, map[string]any{"limit": 5, "window": "1m"}, hit("s", 0)); d.Remaining != 2 {
		t.Fatalf("limit raised to 5: %+v, want remaining 2 (the count kept)", d)
	}
	// 12:00 is also the start of a 2m window: the same count.
	if d := decide(t, env, map[string]any{"limit": 5, "window": "2m"}, hit("s", 0)); d.Remaining != 2 {
		t.Fatalf("window 2m starting at the same instant: %+v, want remaining 2", d)
	}
	if d := decide(t, env, map[string]any{"limit": 2, "window": "1m"}, hit("s", 1)); d.Allowed || d.Remaining != 0 {
		t.Fatalf("limit lowered below the count: %+v, want denied with remaining 0", d)
	}
	if d := decide(t, env, map[string]any{"limit": 1, "window": "1m"}, hit("s", -1)); d.Granted != -1 || d.Remaining != 0 {
		t.Fatalf("refund with the limit below the count: %+v, want granted -1, remaining 0 (never negative)", d)
	}
	// With offset 10s the current window began at 12:00:10: a new count.
	if d := decide(t, env, map[string]any{"limit": 3, "window": "1m", "offset": "10s"}, hit("s", 1)); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("offset 10s: %+v, want a fresh count", d)
	}
}

// TestClockGoingBack: within a window a step back changes only reset; across
// a boundary both windows start again from 0.
func TestClockGoingBack(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 2, "window": "1m"}
	edge := time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)
	setClock(env, edge.Add(20*time.Second))
	decide(t, env, raw, hit("s", 2))
	setClock(env, edge.Add(10*time.Second))
	if d := decide(t, env, raw, hit("s", 1)); d.Allowed || d.Reset != 50*time.Second {
		t.Fatalf("10s back in the same window: %+v, want denied, reset 50s", d)
	}
	setClock(env, edge.Add(-time.Microsecond))
	if d := decide(t, env, raw, hit("s", 2)); !d.Allowed {
		t.Fatalf("back in the previous window: %+v, want a fresh count", d)
	}
	setClock(env, edge.Add(30*time.Second))
	if d := decide(t, env, raw, hit("s", 2)); !d.Allowed {
		t.Fatalf("forward again: %+v, want a fresh count (the first one was lost)", d)
	}
}

// TestConfigErrorsOfWindowAndOffset: the messages docs/plugins.md quotes.
func TestConfigErrorsOfWindowAndOffset(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want string
	}{
		{map[string]any{"limit": 1, "window": "500us"}, "window: must be at least 1ms, got 500µs"},
		{map[string]any{"limit": -1, "window": "1m"}, "limit: must be at least 0 (0 blocks the subject), got -1"},
		{map[string]any{"limit": 1 << 53, "window": "1m"}, "limit: must be below 2^53, got 9007199254740992"},
		{map[string]any{"limit": 1, "window": "1ms500ns"}, "window: must be a whole number of microseconds"},
		{map[string]any{"limit": 1, "window": "1m", "offset": "-1s"}, "offset: must be at least 0 and less than window (1m0s), got -1s"},
		{map[string]any{"limit": 1, "window": "1m", "offset": "1m"}, "offset: must be at least 0 and less than window (1m0s), got 1m0s"},
		{map[string]any{"limit": 1, "window": "1m", "offset": 5}, `offset: want a duration such as "500ms", "10s" or "1m", got 5`},
	} {
		_, err := fixedwindow.New().Configure(tc.raw)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.raw, err, tc.want)
		}
	}
	for _, raw := range []map[string]any{
		{"limit": 1, "window": "1ms"},
		{"limit": 0, "window": "1m"}, // a block
		{"limit": 1<<53 - 1, "window": "1h"},
		{"limit": 1, "window": "1m", "offset": "59.999999s"},
		{"limit": 1, "window": "24h", "offset": 0},
	} {
		if _, err := fixedwindow.New().Configure(raw); err != nil {
			t.Errorf("%v: %v, want accepted", raw, err)
		}
	}
}

// counterKey returns the counter hash of rule r's subject, the one key of
// the subject with the field naming its window's count.
func counterKey(t *testing.T, env *plugintest.Env, subject string) string {
	t.Helper()
	ctx := context.Background()
	keys, err := env.Redis.Client().Keys(ctx, "ruled:fixedwindow:r:{"+subject+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ok, _ := env.Redis.Client().HExists(ctx, k, "w").Result(); ok {
			return k
		}
	}
	t.Fatalf("no counter hash among %v", keys)
	return ""
}

// TestLongerWindowOfTheSameStartKeepsTheCountAlive: writes within a window
// only add to the count, but a rule's new window that starts where the old
// one did and ends later moves the count to its own field and the
// counter's expiry to its own end, so the count outlives the old window's
// end; the hash holds one count field and its name.
func TestLongerWindowOfTheSameStartKeepsTheCountAlive(t *testing.T) {
	env := plugintest.NewEnv(t)
	ctx := context.Background()
	setClock(env, time.Date(2026, 10, 2, 12, 0, 30, 0, time.UTC))
	decide(t, env, map[string]any{"limit": 5, "window": "1m"}, hit("s", 1))
	decide(t, env, map[string]any{"limit": 5, "window": "1m"}, hit("s", 1))
	k := counterKey(t, env, "s")
	ttl1m := env.Redis.Client().PTTL(ctx, k).Val()
	if d := decide(t, env, map[string]any{"limit": 5, "window": "2m"}, hit("s", 1)); d.Remaining != 2 {
		t.Fatalf("window 2m starting at the same instant: %+v, want remaining 2", d)
	}
	// 30 s of the 1m window were left, 90 s of the 2m one.
	if ttl := env.Redis.Client().PTTL(ctx, k).Val(); ttl < ttl1m+50*time.Second || ttl > 92*time.Second {
		t.Fatalf("counter expires in %v after the 2m window's write (%v under 1m), want about 91s", ttl, ttl1m)
	}
	if d := decide(t, env, map[string]any{"limit": 5, "window": "1m"}, hit("s", 0)); d.Remaining != 2 {
		t.Fatalf("back to 1m, a peek: %+v, want remaining 2 (the count read where the 2m window left it)", d)
	}
	if h := env.Redis.Client().HGetAll(ctx, k).Val(); len(h) != 2 || h[h["w"]] != "3" {
		t.Fatalf("counter %v, want the 2m window's field holding 3 and w naming it", h)
	}
}

// TestCountOfFixedwindow1IsCarried: a counter of fixedwindow 1's layout
// (fields s, n and, from 1.2, e; 1.1 wrote no end) keeps its count when the
// first decision of its window finds it, moved into the window's field with
// the window's expiry; one of an earlier window is dropped with the dedup
// records.
func TestCountOfFixedwindow1IsCarried(t *testing.T) {
	at := time.Date(2026, 10, 2, 12, 0, 30, 0, time.UTC)
	start := at.Truncate(time.Minute).UnixMicro()
	end := start + time.Minute.Microseconds()
	field := strconv.FormatInt(start, 10) + ":" + strconv.FormatInt(end, 10)
	for _, tc := range []struct {
		name   string
		fields []any
		want   string // the window's count after one hit
	}{
		{"1.2", []any{"s", start, "n", 3, "e", end}, "4"},
		{"1.1", []any{"s", start, "n", 3}, "4"},
		{"an earlier window", []any{"s", start - time.Minute.Microseconds(), "n", 3, "e", start}, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := plugintest.NewEnv(t)
			setClock(env, at)
			ctx := context.Background()
			k, d := "ruled:fixedwindow:r:{s}:c", "ruled:fixedwindow:r:{s}:d"
			if err := env.Redis.Client().HSet(ctx, k, tc.fields...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := env.Redis.Client().HSet(ctx, d, "x", strconv.FormatInt(start, 10)+":1").Err(); err != nil {
				t.Fatal(err)
			}
			peek := decide(t, env, map[string]any{"limit": 5, "window": "1m"}, hit("s", 0))
			if got := strconv.Itoa(5 - int(peek.Remaining) + 1); got != tc.want {
				t.Fatalf("a peek: %+v, want the count before the hit (%s - 1)", peek, tc.want)
			}
			decide(t, env, map[string]any{"limit": 5, "window": "1m"}, hit("s", 1))
			h := env.Redis.Client().HGetAll(ctx, k).Val()
			if len(h) != 2 || h["w"] != field || h[field] != tc.want {
				t.Fatalf("counter %v, want only %s = %s and w naming it", h, field, tc.want)
			}
			if ttl := env.Redis.Client().PTTL(ctx, k).Val(); ttl <= 0 || ttl > 32*time.Second {
				t.Fatalf("counter expires in %v, want the window's end plus a second (31s)", ttl)
			}
			dropped := env.Redis.Client().Exists(ctx, d).Val() == 0
			if want := tc.want == "1"; dropped != want {
				t.Fatalf("dedup hash dropped: %v, want %v (only by a new window)", dropped, want)
			}
		})
	}
}

// TestCommandsPerDecision: the Redis commands docs/plugins.md lists for
// each kind of decision, counted by Redis (commands a script runs count in
// INFO commandstats; TIME is the prelude's, and the connections' own are
// left out).
func TestCommandsPerDecision(t *testing.T) {
	env := plugintest.NewEnv(t)
	ctx := context.Background()
	client := env.Redis.Client()
	raw := map[string]any{"limit": 3, "window": "1m"}
	setClock(env, time.Date(2026, 10, 2, 12, 0, 30, 0, time.UTC))
	for _, step := range []struct {
		name string
		req  sdk.Request
		want map[string]int64
	}{
		// a new subject: no w, and no fields of fixedwindow 1 either
		{"the window's first grant", hit("s", 1), map[string]int64{"hincrby": 1, "hget": 1, "hmget": 1, "hset": 1, "pexpire": 1}},
		{"a later grant", hit("s", 1), map[string]int64{"hincrby": 1}},
		{"a peek", hit("s", 0), map[string]int64{"hmget": 1}},
		{"a denial", hit("s", 2), map[string]int64{"hincrby": 2}},
		{"a refund", hit("s", -1), map[string]int64{"hmget": 1, "hincrby": 1}},
		{"a grant with a dedup id", sdk.Request{Subject: "s", Hits: 1, DedupID: "x"}, map[string]int64{"hget": 1, "hincrby": 1, "hset": 1, "pexpire": 1}},
		{"a later window's first grant", hit("s", 1), map[string]int64{"hincrby": 1, "hget": 1, "hdel": 1, "del": 1, "hset": 1, "pexpire": 1}},
		{"a block", hit("s", 1), nil},
	} {
		switch step.name {
		case "a later window's first grant":
			env.Clock.Advance(time.Minute)
		case "a block":
			raw = map[string]any{"limit": 0, "window": "1m"}
		}
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		decide(t, env, raw, step.req)
		cmds, err := redisinfo.Commands(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, cmd := range fixedwindow.New().Info().Scripts[0].Commands {
			if n := cmds[strings.ToLower(cmd)].Calls; n > 0 {
				got[strings.ToLower(cmd)] = n
			}
		}
		if !maps.Equal(got, step.want) && !(len(got) == 0 && len(step.want) == 0) {
			t.Errorf("%s: Redis ran %v, want %v", step.name, got, step.want)
		}
	}
}
