package fixedwindow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// The tests of this file check calendar periods (calendar, tz) against a
// real redis-server whose time is the env's clock, set to instants around
// daylight-saving changes and period boundaries.

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// countingHost is a real host that counts the script calls made through it.
type countingHost struct {
	sdk.Host
	calls  atomic.Int64
	before func() // run before each call, when set
}

func (h *countingHost) Eval(ctx context.Context, script string, keys []string, args ...any) (sdk.Reply, error) {
	h.calls.Add(1)
	if h.before != nil {
		h.before()
	}
	return h.Host.Eval(ctx, script, keys, args...)
}

// TestCalendarConformsToModel runs random steps across period boundaries
// and daylight-saving changes through the script and the model. Each case
// must reach past its instant of interest.
func TestCalendarConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	ny, berlin, shanghai, santiago := zone(t, "America/New_York"), zone(t, "Europe/Berlin"), zone(t, "Asia/Shanghai"), zone(t, "America/Santiago")
	mixed := func(max time.Duration) plugintest.StepOptions {
		return plugintest.StepOptions{Subjects: 2, MaxAdvance: max, MinHits: -1, MaxHits: 3, Dedup: 0.3, BestEffort: 0.3}
	}
	for _, tc := range []struct {
		name        string
		raw         map[string]any
		from, reach time.Time
		opts        plugintest.StepOptions
	}{
		{"hour-new-york-spring", map[string]any{"limit": 4, "calendar": "hour", "tz": "America/New_York"},
			time.Date(2026, 3, 7, 22, 0, 0, 0, ny), time.Date(2026, 3, 8, 6, 0, 0, 0, ny), mixed(20 * time.Minute)},
		{"hour-new-york-fall", map[string]any{"limit": 4, "calendar": "hour", "tz": "America/New_York"},
			time.Date(2026, 10, 31, 22, 0, 0, 0, ny), time.Date(2026, 11, 1, 6, 0, 0, 0, ny), mixed(20 * time.Minute)},
		{"day-berlin-23h", map[string]any{"limit": 6, "calendar": "day", "tz": "Europe/Berlin"},
			time.Date(2026, 3, 27, 8, 0, 0, 0, berlin), time.Date(2026, 3, 31, 0, 0, 0, 0, berlin), mixed(40 * time.Minute)},
		{"day-berlin-25h", map[string]any{"limit": 6, "calendar": "day", "tz": "Europe/Berlin"},
			time.Date(2026, 10, 23, 8, 0, 0, 0, berlin), time.Date(2026, 10, 27, 0, 0, 0, 0, berlin), mixed(40 * time.Minute)},
		{"day-new-york-23h", map[string]any{"limit": 6, "calendar": "day", "tz": "America/New_York"},
			time.Date(2026, 3, 6, 8, 0, 0, 0, ny), time.Date(2026, 3, 10, 0, 0, 0, 0, ny), mixed(40 * time.Minute)},
		{"day-santiago-skipped-midnight", map[string]any{"limit": 5, "calendar": "day", "tz": "America/Santiago"},
			time.Date(2026, 9, 4, 8, 0, 0, 0, santiago), time.Date(2026, 9, 7, 0, 0, 0, 0, santiago), mixed(30 * time.Minute)},
		{"week-berlin", map[string]any{"limit": 8, "calendar": "week", "tz": "Europe/Berlin"},
			time.Date(2026, 3, 18, 8, 0, 0, 0, berlin), time.Date(2026, 4, 20, 0, 0, 0, 0, berlin), mixed(5 * time.Hour)},
		{"month-shanghai", map[string]any{"limit": 8, "calendar": "month", "tz": "Asia/Shanghai"},
			time.Date(2026, 1, 29, 8, 0, 0, 0, shanghai), time.Date(2026, 4, 2, 0, 0, 0, 0, shanghai), mixed(12 * time.Hour)},
		{"month-new-york-fall", map[string]any{"limit": 8, "calendar": "month", "tz": "America/New_York"},
			time.Date(2026, 10, 20, 8, 0, 0, 0, ny), time.Date(2026, 12, 2, 0, 0, 0, 0, ny), mixed(8 * time.Hour)},
		{"day-utc-block", map[string]any{"limit": 0, "calendar": "day"},
			time.Date(2026, 10, 1, 20, 0, 0, 0, time.UTC), time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC), mixed(30 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(len(tc.name))))
			steps := plugintest.RandomSteps(rng, 400, tc.opts)
			var total time.Duration
			for _, s := range steps {
				total += s.Advance
			}
			if end := tc.from.Add(total); end.Before(tc.reach) {
				t.Fatalf("the steps end at %s, before %s", end, tc.reach)
			}
			setClock(env, tc.from)
			env.Conform(t, fixedwindow.New(), tc.raw, newModel, steps)
		})
	}
}

// TestCalendarDaysFollowTheLocalClock: a daily period runs from local
// midnight to local midnight, 23 or 25 hours on the days clocks change.
func TestCalendarDaysFollowTheLocalClock(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, tc := range []struct {
		tz     string
		y      int
		m      time.Month
		d      int
		length time.Duration
	}{
		{"America/New_York", 2026, 3, 8, 23 * time.Hour},
		{"America/New_York", 2026, 3, 9, 24 * time.Hour},
		{"America/New_York", 2026, 11, 1, 25 * time.Hour},
		{"Europe/Berlin", 2026, 3, 29, 23 * time.Hour},
		{"Europe/Berlin", 2026, 10, 25, 25 * time.Hour},
		{"Asia/Shanghai", 2026, 10, 25, 24 * time.Hour},
	} {
		loc := zone(t, tc.tz)
		raw := map[string]any{"limit": 2, "calendar": "day", "tz": tc.tz}
		subject := fmt.Sprintf("%s-%d-%d", tc.tz, tc.m, tc.d)
		start, end := time.Date(tc.y, tc.m, tc.d, 0, 0, 0, 0, loc), time.Date(tc.y, tc.m, tc.d+1, 0, 0, 0, 0, loc)
		if end.Sub(start) != tc.length {
			t.Fatalf("%s %s: the test's own day is %s long", tc.tz, start, end.Sub(start))
		}
		setClock(env, start.Add(-time.Microsecond))
		if d := decide(t, env, raw, hit(subject, 2)); !d.Allowed || d.Reset != time.Microsecond {
			t.Fatalf("%s, 1µs before %s: %+v, want allowed with reset 1µs", tc.tz, start, d)
		}
		setClock(env, start)
		if d := decide(t, env, raw, hit(subject, 2)); !d.Allowed || d.Window != tc.length || d.Reset != tc.length {
			t.Fatalf("%s, at %s: %+v, want a fresh period of %s", tc.tz, start, d, tc.length)
		}
		setClock(env, end.Add(-time.Microsecond))
		if d := decide(t, env, raw, hit(subject, 1)); d.Allowed || d.RetryAfter != time.Microsecond || d.Window != tc.length {
			t.Fatalf("%s, 1µs before %s: %+v, want denied for 1µs more, window %s", tc.tz, end, d, tc.length)
		}
		setClock(env, end)
		if d := decide(t, env, raw, hit(subject, 1)); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("%s, at %s: %+v, want allowed in the next day", tc.tz, end, d)
		}
	}
}

// TestCalendarShanghaiResetsAtLocalMidnight: a daily quota in Asia/Shanghai
// turns over at 16:00 UTC; the same quota on the UTC clock does not.
func TestCalendarShanghaiResetsAtLocalMidnight(t *testing.T) {
	env := plugintest.NewEnv(t)
	shanghai := map[string]any{"limit": 1000, "calendar": "day", "tz": "Asia/Shanghai"}
	utc := map[string]any{"limit": 1000, "calendar": "day"}
	edge := time.Date(2026, 10, 2, 16, 0, 0, 0, time.UTC)
	setClock(env, edge.Add(-time.Microsecond))
	for subject, raw := range map[string]map[string]any{"sh": shanghai, "utc": utc} {
		if d := decide(t, env, raw, hit(subject, 1000)); !d.Allowed || d.Remaining != 0 || d.Window != 24*time.Hour {
			t.Fatalf("%v: %+v, want 1000 granted in a 24h period", raw, d)
		}
	}
	if d := decide(t, env, shanghai, hit("sh", 1)); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("Shanghai, 23:59:59.999999 local: %+v, want denied for 1µs", d)
	}
	setClock(env, edge)
	if d := decide(t, env, shanghai, hit("sh", 1)); !d.Allowed || d.Remaining != 999 || d.Reset != 24*time.Hour {
		t.Fatalf("Shanghai, local midnight: %+v, want a fresh day", d)
	}
	if d := decide(t, env, utc, hit("utc", 1)); d.Allowed || d.RetryAfter != 8*time.Hour {
		t.Fatalf("UTC at 16:00 UTC: %+v, want denied until UTC midnight (8h)", d)
	}
}

// TestCalendarMonthAndWeekBoundaries: a month ends at local midnight of the
// 1st (31 days, then 28), a week at Monday 00:00 local (ISO weeks).
func TestCalendarMonthAndWeekBoundaries(t *testing.T) {
	env := plugintest.NewEnv(t)
	const day = 24 * time.Hour
	berlin := zone(t, "Europe/Berlin")
	for _, tc := range []struct {
		what         string
		raw          map[string]any
		edge         time.Time
		before, from time.Duration // the period lengths either side
	}{
		{"Jan 31 to Feb, Berlin", map[string]any{"limit": 3, "calendar": "month", "tz": "Europe/Berlin"},
			time.Date(2026, 2, 1, 0, 0, 0, 0, berlin), 31 * day, 28 * day},
		{"Jan 31 to Feb, UTC", map[string]any{"limit": 3, "calendar": "month"},
			time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), 31 * day, 28 * day},
		{"Sunday to Monday, UTC", map[string]any{"limit": 3, "calendar": "week"},
			time.Date(2026, 10, 5, 0, 0, 0, 0, time.UTC), 7 * day, 7 * day},
		{"into the week of the spring change, Berlin", map[string]any{"limit": 3, "calendar": "week", "tz": "Europe/Berlin"},
			time.Date(2026, 3, 23, 0, 0, 0, 0, berlin), 7 * day, 7*day - time.Hour},
		{"out of the week of the fall change, Berlin", map[string]any{"limit": 3, "calendar": "week", "tz": "Europe/Berlin"},
			time.Date(2026, 10, 26, 0, 0, 0, 0, berlin), 7*day + time.Hour, 7 * day},
	} {
		if w := tc.raw["calendar"]; w == "week" && tc.edge.Weekday() != time.Monday {
			t.Fatalf("%s: %s is not a Monday", tc.what, tc.edge)
		}
		subject := tc.what
		setClock(env, tc.edge.Add(-time.Microsecond))
		if d := decide(t, env, tc.raw, hit(subject, 3)); !d.Allowed || d.Reset != time.Microsecond || d.Window != tc.before {
			t.Fatalf("%s, 1µs before: %+v, want allowed, reset 1µs, window %s", tc.what, d, tc.before)
		}
		if d := decide(t, env, tc.raw, hit(subject, 1)); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Fatalf("%s, 1µs before, again: %+v, want denied for 1µs", tc.what, d)
		}
		setClock(env, tc.edge)
		if d := decide(t, env, tc.raw, hit(subject, 1)); !d.Allowed || d.Remaining != 2 || d.Reset != tc.from || d.Window != tc.from {
			t.Fatalf("%s, at the edge: %+v, want a fresh period of %s", tc.what, d, tc.from)
		}
	}
	// Jan 31 23:30 UTC is February in Berlin, still January in UTC.
	setClock(env, time.Date(2026, 1, 31, 23, 30, 0, 0, time.UTC))
	if d := decide(t, env, map[string]any{"limit": 3, "calendar": "month", "tz": "Europe/Berlin"}, hit("late", 0)); d.Window != 28*day {
		t.Fatalf("Berlin at Jan 31 23:30 UTC: %+v, want February (28 days)", d)
	}
	if d := decide(t, env, map[string]any{"limit": 3, "calendar": "month"}, hit("late", 0)); d.Window != 31*day || d.Reset != 30*time.Minute {
		t.Fatalf("UTC at Jan 31 23:30 UTC: %+v, want January, 30 minutes left", d)
	}
}

// TestCalendarOddClockChanges: hours across New York's changes (the
// repeated hour belongs to one 2h period; the skipped one is empty), and a
// midnight the clock skips (America/Santiago, 6 September 2026: the day
// begins at the jump, 01:00 local).
func TestCalendarOddClockChanges(t *testing.T) {
	env := plugintest.NewEnv(t)
	ny := map[string]any{"limit": 1, "calendar": "hour", "tz": "America/New_York"}
	for _, tc := range []struct {
		what                  string
		raw                   map[string]any
		at                    time.Time
		window, reset, resetB time.Duration // resetB: 1µs before the period ends, at the end
	}{
		// 06:30 UTC is 01:30 EST; the clock jumps to 03:00 EDT at 07:00 UTC.
		{"spring, 01:30 EST", ny, time.Date(2026, 3, 8, 6, 30, 0, 0, time.UTC), time.Hour, 30 * time.Minute, time.Hour},
		// 05:30 UTC is 01:30 EDT; 01:00-01:59 EST follows until 07:00 UTC.
		{"fall, 01:30 EDT", ny, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), 2 * time.Hour, 90 * time.Minute, time.Hour},
		// 03:30 UTC is 23:30 on 5 September; 04:00 UTC is 01:00 on the 6th.
		{"Santiago, 23:30", map[string]any{"limit": 1, "calendar": "day", "tz": "America/Santiago"},
			time.Date(2026, 9, 6, 3, 30, 0, 0, time.UTC), 24 * time.Hour, 30 * time.Minute, 23 * time.Hour},
	} {
		setClock(env, tc.at)
		d := decide(t, env, tc.raw, hit(tc.what, 1))
		if !d.Allowed || d.Window != tc.window || d.Reset != tc.reset {
			t.Fatalf("%s: %+v, want allowed, window %s, reset %s", tc.what, d, tc.window, tc.reset)
		}
		env.Clock.Advance(tc.reset - time.Microsecond)
		if d = decide(t, env, tc.raw, hit(tc.what, 1)); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Fatalf("%s, 1µs before the end: %+v, want denied for 1µs", tc.what, d)
		}
		env.Clock.Advance(time.Microsecond)
		if d = decide(t, env, tc.raw, hit(tc.what, 1)); !d.Allowed || d.Window != tc.resetB || d.Reset != tc.resetB {
			t.Fatalf("%s, at the end: %+v, want a fresh period of %s", tc.what, d, tc.resetB)
		}
	}
}

// TestCalendarMissTakesASecondCall: a call whose Redis time lies outside
// the periods offered is answered by a second call around that time; the
// cache then keeps a steady state at one call, a rollover to the next
// period included. Every decision matches the model's.
func TestCalendarMissTakesASecondCall(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := fixedwindow.New()
	raw := map[string]any{"limit": 5, "calendar": "day", "tz": "Europe/Berlin"}
	cfg := plugintest.Configure(t, alg, raw)
	model := fixedwindow.NewModel(cfg.(fixedwindow.Config))
	p := plugintest.Register(t, env.Capability(), alg)
	h := &countingHost{Host: p.Host("r", "s")}
	setClock(env, time.Date(2031, 6, 15, 12, 0, 0, 0, time.UTC)) // far from the local clock
	for i, tc := range []struct {
		advance time.Duration
		calls   int64
	}{
		{0, 2},                   // a fresh config offers the local clock's day: a miss
		{time.Hour, 1},           // the same day
		{12 * time.Hour, 1},      // the next day, offered second
		{time.Hour, 1},           // the cache rolled forward
		{3 * 24 * time.Hour, 2},  // days ahead: a miss
		{-2 * 24 * time.Hour, 2}, // back across two boundaries: a miss
		{time.Minute, 1},
	} {
		env.Clock.Advance(tc.advance)
		before := h.calls.Load()
		req := sdk.Request{Subject: "s", Hits: 2}
		got, err := alg.Decide(context.Background(), h, cfg, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := model.Decide(env.Clock.Now(), req); got != want {
			t.Fatalf("decision %d: %+v, model %+v", i, got, want)
		}
		if n := h.calls.Load() - before; n != tc.calls {
			t.Fatalf("decision %d: %d script calls, want %d", i, n, tc.calls)
		}
	}

	// With Redis time near the local clock a fresh config needs one call.
	setClock(env, time.Now())
	fresh := plugintest.Configure(t, alg, map[string]any{"limit": 5, "calendar": "month", "tz": "Asia/Shanghai"})
	before := h.calls.Load()
	if _, err := alg.Decide(context.Background(), h, fresh, hit("s", 1)); err != nil || h.calls.Load()-before != 1 {
		t.Fatalf("fresh config at the local clock: %d calls (%v), want 1", h.calls.Load()-before, err)
	}
}

// TestCalendarScriptMiss: the calendar script's own answer when no period
// offered holds Redis time: window_us 0 and Redis time, nothing written.
func TestCalendarScriptMiss(t *testing.T) {
	env := plugintest.NewEnv(t)
	p := plugintest.Register(t, env.Capability(), fixedwindow.New())
	now := env.Clock.Now()
	h := p.Host("r", "miss")
	for _, b := range [][3]int64{{now + 1, now + 2, now + 3}, {now - 3, now - 2, now}} {
		r, err := h.Eval(context.Background(), "calendar", []string{"c", "d"}, 5, 0, 0, 1, "", 0, b[0], b[1], b[2])
		if err != nil {
			t.Fatal(err)
		}
		w, _ := r.Index(6).Int64()
		n, _ := r.Index(7).Int64()
		if r.Len() != 8 || w != 0 || n != now {
			t.Fatalf("boundaries %v at %d: reply %v, want a miss carrying now", b, now, r.Value())
		}
	}
	r, err := h.Eval(context.Background(), "calendar", []string{"c", "d"}, 5, 0, 0, 1, "", 0, now-10, now, now+7)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Equal(sdk.IntsReply(1, 1, 5, 4, 7, 0, 7, now)) {
		t.Fatalf("now at the second period's start: reply %v, want granted in the period [now, now+7)", r.Value())
	}
	if n, err := env.Redis.Client().Exists(context.Background(), "ruled:fixedwindow:r:{miss}:c").Result(); err != nil || n != 1 {
		t.Fatalf("counter exists %d (%v) after one grant", n, err)
	}
}

// TestCalendarMissesAreBounded: a Redis clock that moves by more than a
// period before every call fails the decision after three misses.
func TestCalendarMissesAreBounded(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := fixedwindow.New()
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": 5, "calendar": "day"})
	p := plugintest.Register(t, env.Capability(), alg)
	setClock(env, time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)) // far from the local clock
	h := &countingHost{Host: p.Host("r", "s"), before: func() { env.Clock.Advance(40 * 24 * time.Hour) }}
	_, err := alg.Decide(context.Background(), h, cfg, hit("s", 1))
	if err == nil || !strings.Contains(err.Error(), "lies outside the periods offered, 3 times running") || h.calls.Load() != 3 {
		t.Fatalf("%d calls, error %v: want a failure after 3 misses", h.calls.Load(), err)
	}
}

// TestCalendarCacheUnderConcurrentCalls shares one config among many
// goroutines while the clock moves (run with -race). With the clock
// standing still, every decision matches the model, the limit is granted
// exactly, and each goroutine misses at most once; with the clock moving,
// every decision reports a sane period.
func TestCalendarCacheUnderConcurrentCalls(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := fixedwindow.New()
	raw := map[string]any{"limit": 50, "calendar": "hour", "tz": "Asia/Kolkata"}
	cfg := plugintest.Configure(t, alg, raw)
	p := plugintest.Register(t, env.Capability(), alg)
	const goroutines, per = 16, 10
	base := time.Date(2030, 1, 10, 12, 10, 0, 0, time.UTC)
	for i, at := range []time.Time{base, base.Add(time.Hour), base.Add(3 * time.Hour), base.Add(-2 * time.Hour), base.Add(50 * 24 * time.Hour)} {
		setClock(env, at)
		subject := fmt.Sprintf("phase-%d", i)
		want := fixedwindow.NewModel(cfg.(fixedwindow.Config)).Decide(env.Clock.Now(), hit(subject, 0))
		h := &countingHost{Host: p.Host("r", subject)}
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range per {
					d, err := alg.Decide(context.Background(), h, cfg, hit(subject, 1))
					if err != nil {
						t.Error(err)
						return
					}
					if d.Window != want.Window || d.Reset != want.Reset {
						t.Errorf("phase %d: %+v, want window %s, reset %s", i, d, want.Window, want.Reset)
					}
					granted.Add(d.Granted)
				}
			})
		}
		wg.Wait()
		if granted.Load() != 50 {
			t.Fatalf("phase %d: granted %d, want the limit, 50", i, granted.Load())
		}
		if n := h.calls.Load(); n < goroutines*per || n > goroutines*per+goroutines {
			t.Fatalf("phase %d: %d script calls for %d decisions, want at most one miss per goroutine", i, n, goroutines*per)
		}
	}

	// The clock moves a minute at a time while 8 goroutines decide.
	h := p.Host("r", "moving")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				env.Clock.Advance(time.Minute)
				time.Sleep(100 * time.Microsecond)
			}
		}
	})
	var deciders sync.WaitGroup
	for range 8 {
		deciders.Go(func() {
			for range 50 {
				d, err := alg.Decide(context.Background(), h, cfg, hit("moving", 1))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Window != time.Hour || d.Reset <= 0 || d.Reset > time.Hour {
					t.Errorf("moving clock: %+v, want a 1h period", d)
				}
			}
		})
	}
	deciders.Wait()
	close(stop)
	wg.Wait()
}

// TestCalendarConcurrentInstancesAdmitExactlyTheModel: separate instances
// on separate connections, each missing on its first call, admit the limit.
func TestCalendarConcurrentInstancesAdmitExactlyTheModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	setClock(env, time.Date(2029, 7, 1, 3, 0, 0, 0, time.UTC))
	raw := map[string]any{"limit": 150, "calendar": "week", "tz": "America/New_York"}
	req := sdk.Request{Subject: "shared", Hits: 1}
	got := env.Hammer(t, fixedwindow.New(), raw, 3, 8, 20, req)
	want := plugintest.Replay(newModel(plugintest.Configure(t, fixedwindow.New(), raw)), env.Clock.Now(), 3*8*20, req)
	if got != want || want != 150 {
		t.Fatalf("granted %d, model %d, limit 150", got, want)
	}
}

// TestCalendarKeysExpireWithThePeriod: the counter and dedup keys live until
// the period ends, plus 1s.
func TestCalendarKeysExpireWithThePeriod(t *testing.T) {
	env := plugintest.NewEnv(t)
	setClock(env, time.Date(2026, 10, 2, 15, 0, 0, 0, time.UTC)) // 23:00 in Shanghai
	decide(t, env, map[string]any{"limit": 2, "calendar": "day", "tz": "Asia/Shanghai"}, sdk.Request{Subject: "ttl", Hits: 1, DedupID: "x"})
	keys, err := env.Redis.Client().Keys(context.Background(), "ruled:fixedwindow:r:{ttl}:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v, %v: want the counter and dedup keys", keys, err)
	}
	for _, k := range keys {
		ttl, err := env.Redis.Client().PTTL(context.Background(), k).Result()
		if err != nil || ttl <= time.Hour || ttl > time.Hour+time.Second {
			t.Fatalf("%s: ttl %v (%v), want the hour left + up to 1s", k, ttl, err)
		}
	}
}

// TestCalendarSharesTheCountOfTheSameStart: a period's count belongs to its
// start instant, so a reload from window: 24h to calendar: day (UTC) keeps
// it, and one to Shanghai's day does not.
func TestCalendarSharesTheCountOfTheSameStart(t *testing.T) {
	env := plugintest.NewEnv(t)
	setClock(env, time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC))
	decide(t, env, map[string]any{"limit": 5, "window": "24h"}, hit("s", 3))
	if d := decide(t, env, map[string]any{"limit": 5, "calendar": "day"}, hit("s", 0)); d.Remaining != 2 {
		t.Fatalf("calendar day in UTC: %+v, want the count of window 24h (remaining 2)", d)
	}
	if d := decide(t, env, map[string]any{"limit": 5, "calendar": "day", "tz": "Asia/Shanghai"}, hit("s", 0)); d.Remaining != 5 {
		t.Fatalf("calendar day in Shanghai: %+v, want a fresh count", d)
	}
}

// TestCalendarLocally: on_error: local counts in the same periods, with the
// limit scaled to the instance's share.
func TestCalendarLocally(t *testing.T) {
	cfg := plugintest.Configure(t, fixedwindow.New(), map[string]any{"limit": 30, "calendar": "day", "tz": "Asia/Shanghai"})
	l, err := fixedwindow.Plugin{}.NewLocal(cfg, 1.0/3)
	if err != nil {
		t.Fatal(err)
	}
	edge := time.Date(2026, 10, 2, 16, 0, 0, 0, time.UTC).UnixMicro()
	granted := int64(0)
	for range 20 {
		d := l.Decide(edge-1_000_000, hit("s", 1))
		granted += d.Granted
		if d.Window != 24*time.Hour || d.Reset != time.Second {
			t.Fatalf("1s before local midnight: %+v, want window 24h, reset 1s", d)
		}
	}
	if granted != 10 {
		t.Fatalf("granted %d of 30 at a third, want 10", granted)
	}
	if d := l.Decide(edge, hit("s", 1)); !d.Allowed || d.Remaining != 9 || d.Reset != 24*time.Hour {
		t.Fatalf("at local midnight: %+v, want a fresh day", d)
	}
}

// TestCalendarConfig: what is refused, each message naming its key, and
// what is accepted.
func TestCalendarConfig(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]any
		want string
	}{
		{map[string]any{"limit": 1, "calendar": "year"}, `calendar: want hour, day, week or month, got "year"`},
		{map[string]any{"limit": 1, "calendar": ""}, `calendar: want hour, day, week or month, got ""`},
		{map[string]any{"limit": 1, "calendar": 3}, `calendar: want a string, got 3`},
		{map[string]any{"limit": 1, "calendar": "day", "window": "24h"}, "window: not allowed with calendar: the calendar period is the window"},
		{map[string]any{"limit": 1, "calendar": "day", "offset": "5h"}, "offset: not allowed with calendar: periods begin on the clock of tz"},
		{map[string]any{"limit": 1, "window": "1h", "tz": "Europe/Berlin"}, "tz: only with calendar (a fixed window counts on the UTC clock: move it with offset)"},
		{map[string]any{"limit": 1, "calendar": "day", "tz": "Mars/Olympus_Mons"}, `tz: unknown time zone "Mars/Olympus_Mons"`},
		{map[string]any{"limit": 1, "calendar": "day", "tz": "Local"}, `tz: want an IANA zone name such as "Asia/Shanghai", got "Local"`},
		{map[string]any{"limit": 1, "calendar": "day", "tz": ""}, `tz: want an IANA zone name such as "Asia/Shanghai", got ""`},
		{map[string]any{"limit": 1, "calendar": "day", "tz": 8}, "tz: want a string, got 8"},
		{map[string]any{"calendar": "day"}, "limit: required"},
		{map[string]any{"limit": -1, "calendar": "day"}, "limit: must be at least 0 (0 blocks the subject), got -1"},
		{map[string]any{"limit": 1, "calendar": "day", "tzz": "UTC"}, "tzz: unknown field"},
		{map[string]any{"limit": 1, "calendar": "day", "window": "1h", "offset": "1m", "tz": "Nowhere"},
			"window: not allowed with calendar: the calendar period is the window\n" +
				"offset: not allowed with calendar: periods begin on the clock of tz\n" +
				`tz: unknown time zone "Nowhere"`},
	} {
		_, err := fixedwindow.New().Configure(tc.raw)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.raw, err, tc.want)
		}
	}
	for _, tc := range []struct {
		raw  map[string]any
		cal  string
		zone string
	}{
		{map[string]any{"limit": 1, "calendar": "day"}, "day", "UTC"},
		{map[string]any{"limit": 0, "calendar": "week", "tz": "Asia/Shanghai"}, "week", "Asia/Shanghai"},
		{map[string]any{"limit": 1, "calendar": "hour", "tz": "UTC"}, "hour", "UTC"},
		{map[string]any{"limit": 1, "calendar": "month", "tz": "America/Santiago"}, "month", "America/Santiago"},
	} {
		cfg, err := fixedwindow.New().Configure(tc.raw)
		if err != nil {
			t.Errorf("%v: %v, want accepted", tc.raw, err)
			continue
		}
		c := cfg.(fixedwindow.Config)
		if c.Calendar != tc.cal || c.Location == nil || c.Location.String() != tc.zone || c.Window != 0 || c.Offset != 0 {
			t.Errorf("%v: %+v, want calendar %s in %s", tc.raw, c, tc.cal, tc.zone)
		}
		if want := fmt.Sprintf("{Limit:%v Calendar:%s Location:%s}", tc.raw["limit"], tc.cal, tc.zone); fmt.Sprintf("%+v", c) != want {
			t.Errorf("%v shows as %+v, want %s", tc.raw, c, want)
		}
	}
	if got := fmt.Sprintf("%+v", plugintest.Configure(t, fixedwindow.New(), map[string]any{"limit": 5, "window": "10s"})); got != "{Limit:5 Window:10s Offset:0s}" {
		t.Errorf("a fixed window shows as %s", got)
	}
}

// BenchmarkDecideCalendar is BenchmarkDecide for a daily calendar period:
// the steady state, one script call a decision.
func BenchmarkDecideCalendar(b *testing.B) {
	plugintest.NewEnv(b).BenchDecide(b, fixedwindow.New(), map[string]any{"limit": 1_000_000_000, "calendar": "day", "tz": "Europe/Berlin"}, 1, true)
}
