package host_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// shortcutCases are the built-ins' configs the property test runs, with the
// lease the shortcut rule asks for where the plugin declares leasable
// grants.
var shortcutCases = []struct{ plugin, config string }{
	{"fixedwindow", "{limit: 20, window: 10s}"},
	{"rolling", "{limit: 20, window: 10s, buckets: 5}"},
	{"tokenbucket", "{rate: 5, per: 1s, burst: 6}"},
	{"leaky", "{capacity: 5, rate: 5, per: 1s}"},
	{"leaky", "{capacity: 5, rate: 5, per: 1s, mode: shape}"},
	{"sortedset", "{limit: 5, window: 2s, min_gap: 100ms}"},
	{"sortedset", "{limit: 5, window: 2s, count_denied: true}"},
}

// op is one request of a random sequence, or a step of the clock.
type op struct {
	hits    int64
	dedup   string
	best    bool
	subject string
	advance time.Duration // > 0: move the clock instead
}

func (o op) String() string {
	if o.advance > 0 {
		return "advance " + o.advance.String()
	}
	s := fmt.Sprintf("%s hits=%d", o.subject, o.hits)
	if o.dedup != "" {
		s += " dedup=" + o.dedup
	}
	if o.best {
		s += " best_effort"
	}
	return s
}

// randomOps draws a sequence of acquires, retries (a dedup id drawn from a
// small pool, so that ids repeat), best-effort grants, peeks, refunds with
// and without an id, and steps of the clock. With mostlyAcquires, nine in
// ten operations are plain acquires (the traffic leases serve).
func randomOps(r *rand.Rand, n int, mostlyAcquires bool) []op {
	ops := make([]op, n)
	for i := range ops {
		o := op{subject: []string{"u1", "u2"}[r.IntN(2)]}
		p := r.IntN(100)
		if mostlyAcquires && p < 90 {
			p = 0
		}
		switch {
		case p < 45:
			o.hits = 1 + r.Int64N(3)
		case p < 58:
			o.hits, o.dedup = 1, fmt.Sprintf("id%d", r.IntN(4))
		case p < 63:
			o.hits, o.best = 2+r.Int64N(3), true
		case p < 71:
			o.hits = 0
		case p < 79:
			o.hits = -1 - r.Int64N(2)
		case p < 84:
			o.hits, o.dedup = -1, fmt.Sprintf("id%d", r.IntN(4))
		default:
			o.advance = time.Duration(1+r.Int64N(1500)) * time.Millisecond
		}
		ops[i] = o
	}
	return ops
}

// TestShortcutsKeepEveryPluginsMeaning runs random sequences of requests
// through two engines on one Redis and one clock: one with every shortcut
// its plugin declares (the deny cache on, a lease where grants are
// leasable), one that asks the plugin every time. Their answers must be the
// same: allowed, granted, remaining, retry-after and delay.
//
// Leased permits are taken at one instant; before the clock moves the test
// returns them (what MaxLeaseAge bounds in production: docs/rules.md,
// "Leases"), so that within each instant the lease must answer exactly.
func TestShortcutsKeepEveryPluginsMeaning(t *testing.T) {
	srv := redistest.Start(t)
	seeds := []uint64{1, 2, 3, uint64(time.Now().UnixNano())}
	for ci, c := range shortcutCases {
		alg := pluginByName(t, c.plugin)
		lease := ""
		if alg.Info().Traits.Leasable {
			lease = "\n    lease: 3"
		}
		for si, seed := range seeds {
			mostlyAcquires := si%2 == 1
			t.Run(fmt.Sprintf("%s-%d/seed-%d", c.plugin, ci, seed), func(t *testing.T) {
				var clock atomic.Int64
				clock.Store(plugintest.StartUS)
				var calls atomic.Int64 // scripts the fast engine ran
				capOpts := capability.Options{Timeout: 5 * time.Second, Clock: clock.Load}
				fastOpts := capOpts
				fastOpts.Observe = func(string, string, string, time.Duration, error) { calls.Add(1) }
				now := func(o *host.Options) { o.Now = func() time.Time { return time.UnixMicro(clock.Load()) } }
				rule := func(name, extra string) string {
					return fmt.Sprintf("rules:\n  - name: %s\n    subject: request.user\n    plugin: %s\n    config: %s%s\n",
						name, c.plugin, c.config, extra)
				}
				fast := newEngineOpts(t, srv, rule(fmt.Sprintf("fast%d_%d", ci, seed), lease), fastOpts, now)
				plain := newEngineOpts(t, srv, rule(fmt.Sprintf("plain%d_%d", ci, seed), "\n    deny_cache: false"), capOpts, now)
				ops := randomOps(rand.New(rand.NewPCG(seed, 17)), 400, mostlyAcquires)
				leased := 0 // grants made without a script: from a lease
				ctx := context.Background()
				var trace []string
				for i, o := range ops {
					if o.advance > 0 {
						host.ReturnRuleLeases(ctx, fast)
						clock.Add(o.advance.Microseconds())
						trace = append(trace, o.String())
						continue
					}
					req := func() *host.CheckRequest {
						return &host.CheckRequest{Request: host.Request{User: o.subject}, Hits: o.hits, DedupID: o.dedup, BestEffort: o.best}
					}
					cachedBefore, callsBefore := fast.Inspect().DenyCacheHits(), calls.Load()
					got, want := decisionOf(t, fast.Check(ctx, req())), decisionOf(t, plain.Check(ctx, req()))
					cached := fast.Inspect().DenyCacheHits() > cachedBefore
					if calls.Load() == callsBefore && got.Allowed && o.hits > 0 {
						leased++
					}
					trace = append(trace, fmt.Sprintf("%s -> %s", o, brief(want)))
					if !sameAnswer(got, want, cached) {
						t.Fatalf("op %d (%s): with shortcuts %s, the plugin alone %s\nlast ops:\n%s", i, o, brief(got), brief(want),
							strings.Join(trace[max(0, len(trace)-15):], "\n"))
					}
				}
				t.Logf("%d scripts run for %d operations, %d denials from the cache, %d grants from a lease",
					calls.Load(), len(ops), fast.Inspect().DenyCacheHits(), leased)
				traits := alg.Info().Traits
				if traits.FirmDenials && fast.Inspect().DenyCacheHits() == 0 {
					t.Errorf("the deny cache never answered: the sequence does not test it")
				}
				if !traits.FirmDenials && fast.Inspect().DenyCacheHits() != 0 {
					t.Errorf("the deny cache answered for a plugin without firm denials")
				}
				if traits.Leasable && mostlyAcquires && leased == 0 {
					t.Errorf("no grant came from a lease: the sequence does not test leases")
				}
				if !traits.Leasable && leased != 0 {
					t.Errorf("%d grants without a script for a plugin without leasable grants", leased)
				}
			})
		}
	}
}

func pluginByName(t *testing.T, name string) sdk.Algorithm {
	t.Helper()
	for _, a := range builtin.All() {
		if a.Info().Name == name {
			return a
		}
	}
	t.Fatalf("no built-in %q", name)
	return nil
}

func decisionOf(t *testing.T, res host.Result) sdk.Decision {
	t.Helper()
	if len(res.Results) != 1 || res.Results[0].Err != nil || res.Results[0].Degraded != "" {
		t.Fatalf("result %+v", res.Results)
	}
	return res.Results[0].Decision
}

// sameAnswer compares what a client reads of a decision a, made with
// shortcuts, with the plugin's own b. Reset is left out: a lease reports the
// reset of the Redis state it took its permits from. A denial from the
// deny cache (cached) repeats the remaining of the denial it holds, which
// may be less than the plugin would say after refilling in the meantime
// (still too few for the request: docs/rules.md, "Shortcuts").
func sameAnswer(a, b sdk.Decision, cached bool) bool {
	remainingOK := a.Remaining == b.Remaining || cached && a.Remaining < b.Remaining
	return a.Allowed == b.Allowed && a.Granted == b.Granted && remainingOK &&
		a.RetryAfter == b.RetryAfter && a.Delay == b.Delay && a.Limit == b.Limit
}

func brief(d sdk.Decision) string {
	return fmt.Sprintf("{allowed %v granted %d remaining %d retry %v delay %v}", d.Allowed, d.Granted, d.Remaining, d.RetryAfter, d.Delay)
}
