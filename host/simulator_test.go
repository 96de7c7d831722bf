package host_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// simulatedRules uses every built-in and every way a rule takes part in a check:
// when, shadow, stop, exempt, replaces, a dynamic config, on_error deny
// and local on a subject that fails to evaluate, and refunds after a later
// denial.
const simulatedRules = `
rules:
  - name: vip
    when: attrs.tier == "vip"
    exempt: true
  - name: per-user-window
    subject: request.user
    plugin: fixedwindow
    config: {limit: 8, window: 10s}
  - name: ann-window
    when: request.user startsWith "ann"
    subject: request.user
    plugin: fixedwindow
    replaces: [per-user-window]
    config: {limit: 5, window: 3s}
  - name: lenient-number
    when: attrs.m != ""
    subject: string(int(attrs.m)) + request.path
    plugin: tokenbucket
    on_error: local
    config: {rate: 1, per: 1s, burst: 1}
  - name: per-user-rolling
    subject: request.user
    plugin: rolling
    config: {limit: 6, window: 4s, buckets: 4}
  - name: per-path-bucket
    subject: request.path
    plugin: tokenbucket
    config: {rate: 3, per: 1s, burst: 4}
  - name: shadow-leaky
    subject: request.user
    plugin: leaky
    shadow: true
    config: {capacity: 2, rate: 1, per: 1s}
  - name: tiered
    when: attrs.tier != ""
    subject: request.user
    plugin: sortedset
    config: {limit: '=attrs.tier == "gold" ? 5 : 3', window: 3s, min_gap: 100ms}
  - name: strict-number
    when: attrs.n != ""
    subject: string(int(attrs.n)) + request.path
    plugin: fixedwindow
    on_error: deny
    config: {limit: 2, window: 5s}
  - name: per-user-shape
    when: request.method == "PUT"
    subject: request.user
    plugin: leaky
    stop: true
    config: {capacity: 3, rate: 2, per: 1s, mode: shape}
  - name: after-stop
    subject: request.user
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`

// engineOn returns an engine serving yaml on srv, with scripts and
// shortcuts on clock.
func engineOn(t *testing.T, srv *redistest.Server, yaml string, clock *atomic.Int64) *host.Engine {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	c := capability.New(client, capability.Options{Timeout: 5 * time.Second, Clock: clock.Load})
	e, err := host.NewEngine(host.Options{Capability: c, Plugins: builtin.All(), Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.UnixMicro(clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	return e
}

func loadSet(t *testing.T, yaml string) *rules.Set {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Load(path, builtin.NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestSimulatorDecidesAsTheEngine runs random checks through the simulator
// and through the engine on real Redis, on one clock, and compares every
// field of every decision.
func TestSimulatorDecidesAsTheEngine(t *testing.T) {
	srv := redistest.Start(t)
	for _, seed := range []uint64{1, 2, uint64(time.Now().UnixNano())} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(plugintest.StartUS)
			// Subjects carry the seed: the runs share one Redis.
			// The simulator answers as the plugins alone: the engine's deny
			// cache, whose cached denials repeat a remaining that may since
			// have grown (docs/rules.md, "Shortcuts"), is off.
			e := engineOn(t, srv, regexp.MustCompile(`(?m)^(    plugin: .*)$`).ReplaceAllString(simulatedRules, "$1\n    deny_cache: false"), &clock)
			sim, err := host.NewSimulator(loadSet(t, simulatedRules))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 5))
			// A user keeps its tier (or is exempt as a vip): the simulator
			// keeps a model per resolved config, where Redis would carry a
			// subject's state across a config change (see the package doc).
			users := []string{"ann", "bob", "cy"}
			tiers := []string{"", "gold", "silver"}
			methods := []string{"GET", "GET", "POST", "PUT"}
			denied := 0
			for i := range 600 {
				if rng.IntN(5) == 0 {
					clock.Add(rng.Int64N(700_000))
					continue
				}
				u := rng.IntN(len(users))
				attrs := map[string]string{"tier": tiers[u]}
				if rng.IntN(6) == 0 {
					attrs["tier"] = "vip"
				}
				if rng.IntN(8) == 0 {
					attrs["n"] = []string{"7", "x"}[rng.IntN(2)]
				}
				if rng.IntN(8) == 0 {
					attrs["m"] = []string{"3", "y"}[rng.IntN(2)]
				}
				req := &host.CheckRequest{
					Request: rules.Request{User: fmt.Sprintf("%s-%d", users[u], seed),
						Path: fmt.Sprintf("/p%d-%d", rng.IntN(2), seed), Method: methods[rng.IntN(len(methods))]},
					Attrs: attrs, Hits: rng.Int64N(3),
				}
				switch rng.IntN(12) {
				case 0:
					req.Hits = -rng.Int64N(3) - 1 // a refund
				case 1:
					req.Hits = 3 + rng.Int64N(6) // more than some limits
				}
				if rng.IntN(6) == 0 {
					req.DedupID = fmt.Sprint("d", rng.IntN(4))
				}
				req.BestEffort = rng.IntN(7) == 0
				want := e.Check(context.Background(), req)
				got := sim.Check(clock.Load(), req)
				if g, w := summary(got), summary(want); g != w {
					t.Fatalf("step %d, %+v at %d:\nsimulator %s\nengine    %s", i, req, clock.Load(), g, w)
				}
				if !want.Allowed {
					denied++
				}
			}
			if denied < 50 {
				t.Errorf("only %d denials in 600 steps: the rules are too loose to compare", denied)
			}
		})
	}
}

// summary prints what a check answers, every rule's decision included.
func summary(r host.Result) string {
	s := fmt.Sprintf("allowed=%v fail_closed=%v retry=%s", r.Allowed, r.FailClosed, r.RetryAfter)
	for _, rr := range r.Results {
		s += fmt.Sprintf("\n  %s[%s] exempt=%v degraded=%q err=%v %+v", rr.Rule, rr.Subject, rr.Exempt, rr.Degraded, rr.Err != nil, rr.Decision)
	}
	return s
}

func TestNewSimulatorRefusesPluginsWithoutModels(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	yaml := "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n" +
		"  - {name: b, subject: request.ip, plugin: custom, config: {}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cat := builtin.NewCatalog() // and a third-party algorithm named custom
	cat["custom"] = custom{}
	set, err := rules.Load(path, cat)
	if err != nil {
		t.Fatal(err)
	}
	_, err = host.NewSimulator(set)
	if !errors.Is(err, host.ErrNoModel) || !strings.Contains(err.Error(), "b (plugin custom)") {
		t.Errorf("NewSimulator = %v, want ErrNoModel naming rule b", err)
	}
}

type custom struct{ sdk.OneStep }

func (custom) Info() sdk.Info                               { return sdk.Info{Name: "custom"} }
func (custom) Configure(map[string]any) (sdk.Config, error) { return struct{}{}, nil }
func (custom) Decide(context.Context, sdk.Host, sdk.Config, sdk.Request) (sdk.Decision, error) {
	return sdk.Decision{Allowed: true}, nil
}

// TestSimulatorKeepsADynamicCalendarRulesState checks that a rule whose
// config is an expression keeps one model per resolved config: each check
// configures the calendar afresh (a new period cache), and the model must
// still be the one before, or every check would start a fresh day.
func TestSimulatorKeepsADynamicCalendarRulesState(t *testing.T) {
	sim, err := host.NewSimulator(loadSet(t, `rules:
  - name: daily
    subject: request.user
    plugin: fixedwindow
    config: {limit: '=attrs.tier == "gold" ? 3 : 2', calendar: day, tz: Europe/Paris}
`))
	if err != nil {
		t.Fatal(err)
	}
	req := &host.CheckRequest{Request: rules.Request{User: "ann"}, Attrs: map[string]string{"tier": "free"}, Hits: 1}
	var allowed []bool
	for range 3 {
		allowed = append(allowed, sim.Check(plugintest.StartUS, req).Allowed)
	}
	if fmt.Sprint(allowed) != "[true true false]" {
		t.Errorf("three checks of a limit of 2 a day: allowed %v, want [true true false]", allowed)
	}
}
