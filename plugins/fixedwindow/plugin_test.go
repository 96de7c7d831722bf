package fixedwindow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func newModel(c sdk.Config) sdk.LocalLimiter { return fixedwindow.NewModel(c.(fixedwindow.Config)) }

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	cases := []struct {
		name string
		raw  map[string]any
		opts plugintest.StepOptions
	}{
		{"single-hits", map[string]any{"limit": 5, "window": "1s"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond}},
		{"offset-multi-hits", map[string]any{"limit": 10, "window": "2s", "offset": "700ms"},
			plugintest.StepOptions{Subjects: 3, MaxAdvance: 400 * time.Millisecond, MinHits: 0, MaxHits: 4}},
		{"dedup-best-effort-refunds", map[string]any{"limit": 7, "window": "500ms", "offset": "1us"},
			plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			env.Conform(t, fixedwindow.New(), tc.raw, newModel, plugintest.RandomSteps(rng, 600, tc.opts))
		})
	}
}

func TestConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 150, "window": "1h"}
	req := sdk.Request{Subject: "shared", Hits: 1}
	got := env.Hammer(t, fixedwindow.New(), raw, 3, 8, 20, req)
	cfg := plugintest.Configure(t, fixedwindow.New(), raw)
	want := plugintest.Replay(fixedwindow.NewModel(cfg.(fixedwindow.Config)), env.Clock.Now(), 3*8*20, req)
	if got != want || want != 150 {
		t.Fatalf("granted %d, model %d, limit 150", got, want)
	}
}

// decide runs one request at the env's current clock.
func decide(t *testing.T, env *plugintest.Env, raw map[string]any, req sdk.Request) sdk.Decision {
	t.Helper()
	alg := fixedwindow.New()
	cfg := plugintest.Configure(t, alg, raw)
	p := plugintest.Register(t, env.Capability(), alg)
	d, err := alg.Decide(context.Background(), p.Host("r", req.Subject), cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestOffsetAlignsWindows(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 1, "window": "10s", "offset": "3s"}
	// Move the clock to exactly 1µs before a boundary at offset 3s.
	now := env.Clock.Now()
	boundary := now - (now-3_000_000)%10_000_000 + 10_000_000
	env.Clock.Advance(time.Duration(boundary-now-1) * time.Microsecond)
	d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1})
	if !d.Allowed || d.Reset != time.Microsecond {
		t.Fatalf("first: %+v, want allowed with reset 1µs", d)
	}
	if d = decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1}); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("second in the same window: %+v, want denied, retry after 1µs", d)
	}
	env.Clock.Advance(time.Microsecond)
	if d = decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1}); !d.Allowed || d.Reset != 10*time.Second {
		t.Fatalf("at the boundary: %+v, want allowed in a fresh 10s window", d)
	}
}

func TestDedupIsIdempotentWithinWindow(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 3, "window": "1m"}
	for i := 0; i < 5; i++ {
		d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 2, DedupID: "req-1"})
		if !d.Allowed || d.Granted != 2 || d.Remaining != 1 {
			t.Fatalf("retry %d: %+v, want the first answer (granted 2, remaining 1)", i, d)
		}
	}
	if d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 2, DedupID: "req-2"}); d.Allowed {
		t.Fatalf("another id over the limit: %+v, want denied", d)
	}
}

func TestBestEffortGrantsWhatIsLeft(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 5, "window": "1m"}
	decide(t, env, raw, sdk.Request{Subject: "s", Hits: 3})
	d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 4, BestEffort: true})
	if !d.Allowed || d.Granted != 2 || d.Remaining != 0 {
		t.Fatalf("best effort: %+v, want granted 2 of 4", d)
	}
	if d = decide(t, env, raw, sdk.Request{Subject: "s", Hits: 1, BestEffort: true}); d.Allowed || d.Granted != 0 {
		t.Fatalf("nothing left: %+v, want denied", d)
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 2, "window": "1m"}
	for i := 0; i < 3; i++ {
		if d := decide(t, env, raw, sdk.Request{Subject: "s", Hits: 0}); !d.Allowed || d.Remaining != 2 || d.Granted != 0 {
			t.Fatalf("peek %d: %+v", i, d)
		}
	}
}

func TestKeysExpireAfterTheirWindow(t *testing.T) {
	env := plugintest.NewEnv(t)
	decide(t, env, map[string]any{"limit": 2, "window": "2s"}, sdk.Request{Subject: "ttl", Hits: 1, DedupID: "x"})
	keys, err := env.Redis.Client().Keys(context.Background(), "ruled:fixedwindow:r:{ttl}:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v, %v: want the counter and dedup keys", keys, err)
	}
	for _, k := range keys {
		ttl, err := env.Redis.Client().PTTL(context.Background(), k).Result()
		if err != nil || ttl <= 0 || ttl > 3*time.Second {
			t.Fatalf("%s: ttl %v (%v), want within window + 1s slack", k, ttl, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want []string
	}{
		{map[string]any{}, []string{"limit: required", "window: required"}},
		{map[string]any{"limit": -1, "window": "1s"}, []string{"limit: must be at least 0"}},
		{map[string]any{"limit": 1, "window": "10"}, []string{"window: want a duration"}},
		{map[string]any{"limit": 1, "window": "1s", "offset": "2s"}, []string{"offset: must be at least 0 and less than window"}},
		{map[string]any{"limit": 1, "window": "1s", "limt": 3}, []string{"limt: unknown field"}},
		{map[string]any{"limit": "many", "window": "1s"}, []string{"limit: want a whole number"}},
	} {
		_, err := fixedwindow.New().Configure(tc.raw)
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
}

// BenchmarkDecide measures one decision against real Redis with Redis's own
// clock, from many goroutines.
func BenchmarkDecide(b *testing.B) {
	plugintest.NewEnv(b).BenchDecide(b, fixedwindow.New(), map[string]any{"limit": 1_000_000_000, "window": "1m"}, 1, true)
}

func TestDedupRecordsDoNotOutliveTheirWindow(t *testing.T) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 100, "window": "1s"}
	for w := 0; w < 3; w++ {
		for i := 0; i < 5; i++ {
			decide(t, env, raw, sdk.Request{Subject: "d", Hits: 1, DedupID: fmt.Sprintf("w%d-%d", w, i)})
		}
		env.Clock.Advance(time.Second)
	}
	n, err := env.Redis.Client().HLen(context.Background(), "ruled:fixedwindow:r:{d}:d").Result()
	if err != nil || n != 5 {
		t.Fatalf("dedup hash holds %d records (%v), want only the last window's 5", n, err)
	}
}
