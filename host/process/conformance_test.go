package process_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugins/concurrency"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugins/tokenbucket"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// builtinCase is a built-in algorithm with its reference model and one
// sequence both drivers must agree on.
type builtinCase struct {
	model func(sdk.Config) sdk.LocalLimiter // takes the native config
	raw   map[string]any
	opts  plugintest.StepOptions
}

var builtinCases = map[string]builtinCase{
	fixedwindow.Name: {func(c sdk.Config) sdk.LocalLimiter { return fixedwindow.NewModel(c.(fixedwindow.Config)) },
		map[string]any{"limit": 7, "window": "500ms", "offset": "1us"},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
	rolling.Name: {func(c sdk.Config) sdk.LocalLimiter { return rolling.NewModel(c.(rolling.Config)) },
		map[string]any{"limit": 7, "window": "500ms", "buckets": 5},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -3, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
	tokenbucket.Name: {func(c sdk.Config) sdk.LocalLimiter { return tokenbucket.NewModel(c.(tokenbucket.Config)) },
		map[string]any{"rate": 3, "per": "1.3s", "burst": 5},
		plugintest.StepOptions{Subjects: 3, MaxAdvance: 500 * time.Millisecond, MinHits: -1, MaxHits: 4, BestEffort: 0.3}},
	leaky.Name: {func(c sdk.Config) sdk.LocalLimiter { return leaky.NewModel(c.(leaky.Config)) },
		map[string]any{"capacity": 6, "rate": 3, "per": "1000003us", "mode": "shape"},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 500 * time.Millisecond, MinHits: -1, MaxHits: 3, BestEffort: 0.3}},
	concurrency.Name: {func(c sdk.Config) sdk.LocalLimiter { return concurrency.NewModel(c.(concurrency.Config)) },
		map[string]any{"limit": 3, "ttl": "300ms"},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 120 * time.Millisecond, MinHits: -1, MaxHits: 1, Dedup: 1}},
	sortedset.Name: {func(c sdk.Config) sdk.LocalLimiter { return sortedset.NewModel(c.(sortedset.Config)) },
		map[string]any{"limit": 3, "window": "1500001us", "count_denied": true,
			"also": []any{map[string]any{"limit": 12, "window": "10s"}, map[string]any{"limit": 2, "window": "100ms"}}},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 900 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}},
}

// builtinProcess starts the built-in plugin name as a process plugin.
func builtinProcess(tb testing.TB, name string) *process.Plugin {
	tb.Helper()
	return load(tb, binary(tb, builtinPkg), process.Options{Env: []string{"RULED_TEST_PLUGIN=" + name}})
}

// TestBuiltinsConformAsProcesses runs every built-in as a process plugin
// through the conformance kit, and step by step against the native plugin
// on the same Redis and clock: every decision must be identical.
func TestBuiltinsConformAsProcesses(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, native := range builtin.All() {
		name := native.Info().Name
		t.Run(name, func(t *testing.T) {
			tc, ok := builtinCases[name]
			if !ok {
				t.Fatalf("built-in %s has no conformance case in this test", name)
			}
			p := builtinProcess(t, name)
			if got, want := p.Info(), native.Info(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Info differs:\nprocess %+v\nnative  %+v", got, want)
			}
			steps := plugintest.RandomSteps(rand.New(rand.NewPCG(11, uint64(len(name)))), 300, tc.opts)
			model := func(sdk.Config) sdk.LocalLimiter { return tc.model(plugintest.Configure(t, native, tc.raw)) }
			env.Conform(t, p, tc.raw, model, steps)
			sameDecisions(t, env, native, p, tc.raw, steps)
			// The built-ins decide in steps: ruled ran every script call,
			// and the process never called back.
			if !p.Steps() || p.HostEvals() != 0 {
				t.Fatalf("steps %v, %d Eval calls back to ruled", p.Steps(), p.HostEvals())
			}
		})
	}
}

// sameDecisions runs steps through both algorithms, each under its own
// rule (so its own keys), and fails at the first difference.
func sameDecisions(t *testing.T, env *plugintest.Env, native, other sdk.Algorithm, raw map[string]any, steps []plugintest.Step) {
	t.Helper()
	nc, oc := plugintest.Configure(t, native, raw), plugintest.Configure(t, other, raw)
	c := env.Capability()
	np, op := plugintest.Register(t, c, native), plugintest.Register(t, c, other)
	rule := fmt.Sprintf("same-%d", rand.Int64())
	ctx := context.Background()
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		dn, errN := native.Decide(ctx, np.Host(rule+"-n", s.Req.Subject), nc, s.Req)
		do, errO := other.Decide(ctx, op.Host(rule+"-p", s.Req.Subject), oc, s.Req)
		if dn != do || (errN == nil) != (errO == nil) {
			t.Fatalf("step %d (%v):\nnative  %+v %v\nprocess %+v %v", i, s, dn, errN, do, errO)
		}
	}
}

// TestConfigErrorsMatchNative checks that a process plugin reports the same
// problems, one error each, as the native one.
func TestConfigErrorsMatchNative(t *testing.T) {
	p := builtinProcess(t, sortedset.Name)
	for _, raw := range []map[string]any{
		{},
		{"limit": 0, "window": "1s", "min_gap": "x"},
		{"limit": 1, "window": "1s", "also": []any{map[string]any{"limit": -1}}, "typo": 1},
	} {
		_, errN := sortedset.New().Configure(raw)
		_, errP := p.Configure(raw)
		if errN == nil || errP == nil || errN.Error() != errP.Error() {
			t.Errorf("%v:\nnative  %v\nprocess %v", raw, errN, errP)
		}
		if j, ok := errP.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) < 1 {
			t.Errorf("%v: process error is not a list of problems: %#v", raw, errP)
		}
	}
}

// Many decisions at once share the process's one steps socket: each gets
// its own answer. Each goroutine has its own subject, so its remaining
// counts down exactly.
func TestConcurrentStepsGetTheirOwnAnswers(t *testing.T) {
	env := plugintest.NewEnv(t)
	p := builtinProcess(t, fixedwindow.Name)
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 1000, "window": "1h"})
	reg := plugintest.Register(t, env.Capability(), p)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			subject := fmt.Sprint("subject-", g)
			h := reg.Host("concurrent", subject)
			for i := range 50 {
				d, err := p.Decide(context.Background(), h, cfg, sdk.Request{Subject: subject, Hits: int64(g%3 + 1)})
				if want := int64(1000 - (i+1)*(g%3+1)); err != nil || !d.Allowed || d.Remaining != want {
					t.Errorf("%s decision %d: %+v %v, want remaining %d", subject, i, d, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if p.HostEvals() != 0 {
		t.Fatalf("%d calls back to ruled", p.HostEvals())
	}
}

// Callers that give up mid-step (cancelled, or out of time) while others
// wait on the same socket take nothing with them: whoever reads the socket
// passes that on before leaving, so every patient caller still gets its own
// answer, and the process is not judged hung.
func TestStepsOfCallersThatGiveUpLeaveTheOthersTheirAnswers(t *testing.T) {
	env := plugintest.NewEnv(t)
	p := builtinProcess(t, fixedwindow.Name)
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 1000, "window": "1h"})
	reg := plugintest.Register(t, env.Capability(), p)
	var wg sync.WaitGroup
	var gaveUp atomic.Int64
	for g := range 16 {
		subject := fmt.Sprint("subject-", g)
		h := reg.Host("giveup", subject)
		if g%2 == 1 { // impatient: mostly cancelled or timed out after 0-1.5 ms
			wg.Go(func() {
				for i := range 200 {
					timeout := time.Duration(i%8) * 250 * time.Microsecond
					if i%8 == 7 { // and one in eight with time enough (i is odd: not cancelled)
						timeout = 5 * time.Second
					}
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					if i%2 == 0 {
						go func() { time.Sleep(time.Duration(i%7) * 200 * time.Microsecond); cancel() }()
					}
					if _, err := p.Decide(ctx, h, cfg, sdk.Request{Subject: subject, Hits: 1}); err != nil {
						gaveUp.Add(1)
					}
					cancel()
				}
			})
			continue
		}
		wg.Go(func() {
			for i := range 100 {
				d, err := p.Decide(context.Background(), h, cfg, sdk.Request{Subject: subject, Hits: 1})
				if want := int64(1000 - (i + 1)); err != nil || !d.Allowed || d.Remaining != want {
					t.Errorf("%s decision %d: %+v %v, want remaining %d", subject, i, d, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := gaveUp.Load(); n == 0 || n == 1600 {
		t.Fatalf("%d of 1600 impatient calls gave up: the test did not test a mix", n)
	}
	if err := p.Status(); err != nil {
		t.Fatalf("status after callers gave up: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d, err := p.Decide(ctx, reg.Host("giveup", "last"), cfg, sdk.Request{Subject: "last", Hits: 1}); err != nil || !d.Allowed {
		t.Fatalf("a call after them: %+v %v", d, err)
	}
	t.Logf("%d of 1600 impatient calls gave up", gaveUp.Load())
}

// TestTemplatesStartDecisionsWithoutTheProcess checks that a decision under
// a config the process answered a template for sends it no step, and
// decides as the process's own steps and the native plugin do.
func TestTemplatesStartDecisionsWithoutTheProcess(t *testing.T) {
	env := plugintest.NewEnv(t)
	native := fixedwindow.New()
	templated := builtinProcess(t, fixedwindow.Name)
	stepped := load(t, binary(t, builtinPkg), process.Options{Env: []string{"RULED_TEST_PLUGIN=" + fixedwindow.Name}, NoTemplates: true})
	raw := map[string]any{"limit": 7, "window": "500ms", "offset": "1us"}
	steps := plugintest.RandomSteps(rand.New(rand.NewPCG(7, 7)), 200, plugintest.StepOptions{Subjects: 2,
		MaxAdvance: 90 * time.Millisecond, MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3})
	sameDecisions(t, env, native, templated, raw, steps)
	sameDecisions(t, env, native, stepped, raw, steps)
	n := uint64(len(steps))
	if sent := templated.StepsSent(); sent != 0 {
		t.Errorf("with templates: %d steps sent for %d decisions", sent, n)
	}
	if sent := stepped.StepsSent(); sent != n {
		t.Errorf("NoTemplates: %d steps sent for %d decisions", sent, n)
	}
}
