package wasm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
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

type conformCase struct {
	name string
	raw  map[string]any
	opts plugintest.StepOptions
}

// builtinPlugin is a built-in algorithm with its reference model and the
// sequences both drivers must agree on.
type builtinPlugin struct {
	native sdk.Algorithm
	model  func(sdk.Config) sdk.LocalLimiter // takes the native config
	cases  []conformCase
}

func also(pairs ...any) []any {
	var out []any
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, map[string]any{"limit": pairs[i], "window": pairs[i+1]})
	}
	return out
}

var builtins = map[string]builtinPlugin{
	fixedwindow.Name: {fixedwindow.New(),
		func(c sdk.Config) sdk.LocalLimiter { return fixedwindow.NewModel(c.(fixedwindow.Config)) },
		[]conformCase{
			{"offset-multi-hits", map[string]any{"limit": 10, "window": "2s", "offset": "700ms"},
				plugintest.StepOptions{Subjects: 3, MaxAdvance: 400 * time.Millisecond, MinHits: 0, MaxHits: 4}},
			{"dedup-best-effort-refunds", map[string]any{"limit": 7, "window": "500ms", "offset": "1us"},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
		}},
	rolling.Name: {rolling.New(),
		func(c sdk.Config) sdk.LocalLimiter { return rolling.NewModel(c.(rolling.Config)) },
		[]conformCase{
			{"odd-window-multi-hits-peeks", map[string]any{"limit": 13, "window": "999999us", "buckets": 3},
				plugintest.StepOptions{Subjects: 3, MaxAdvance: 200 * time.Millisecond, MinHits: 0, MaxHits: 4}},
			{"dedup-best-effort-refunds", map[string]any{"limit": 7, "window": "500ms", "buckets": 5},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -3, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
		}},
	tokenbucket.Name: {tokenbucket.New(),
		func(c sdk.Config) sdk.LocalLimiter { return tokenbucket.NewModel(c.(tokenbucket.Config)) },
		[]conformCase{
			{"odd-period-multi-hits-peeks", map[string]any{"rate": 3, "per": "1.3s", "burst": 5},
				plugintest.StepOptions{Subjects: 3, MaxAdvance: 500 * time.Millisecond, MinHits: 0, MaxHits: 4}},
			{"refunds-best-effort-over-burst", map[string]any{"rate": 10, "burst": 4},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond, MinHits: -3, MaxHits: 6, BestEffort: 0.3, Dedup: 0.3}},
		}},
	leaky.Name: {leaky.New(),
		func(c sdk.Config) sdk.LocalLimiter { return leaky.NewModel(c.(leaky.Config)) },
		[]conformCase{
			{"police-peeks-refunds-best-effort", map[string]any{"capacity": 7, "rate": 2, "per": "1500001us"},
				plugintest.StepOptions{Subjects: 3, MaxAdvance: 700 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}},
			{"shape-odd", map[string]any{"capacity": 6, "rate": 3, "per": "1000003us", "mode": "shape"},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 500 * time.Millisecond, MinHits: -1, MaxHits: 3, BestEffort: 0.3}},
		}},
	concurrency.Name: {concurrency.New(),
		func(c sdk.Config) sdk.LocalLimiter { return concurrency.NewModel(c.(concurrency.Config)) },
		[]conformCase{
			{"acquire-renew-release-peek", map[string]any{"limit": 3, "ttl": "300ms"},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 120 * time.Millisecond, MinHits: -1, MaxHits: 1, Dedup: 1}},
			{"one-slot-odd-ttl", map[string]any{"limit": 1, "ttl": "150001us"},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -1, MaxHits: 1, Dedup: 1}},
		}},
	sortedset.Name: {sortedset.New(),
		func(c sdk.Config) sdk.LocalLimiter { return sortedset.NewModel(c.(sortedset.Config)) },
		[]conformCase{
			{"two-rates-gap-best-effort", map[string]any{"limit": 10, "window": "1m", "min_gap": "250001us", "also": also(2, "3s")},
				plugintest.StepOptions{Subjects: 3, MaxAdvance: 2 * time.Second, MinHits: 0, MaxHits: 3, BestEffort: 0.3}},
			{"count-denied-refunds", map[string]any{"limit": 3, "window": "1500001us", "count_denied": true,
				"also": also(12, "10s", 2, "100ms")},
				plugintest.StepOptions{Subjects: 2, MaxAdvance: 900 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}},
		}},
}

// TestEveryBuiltinHasAWasmBuild keeps the table above and the wasm/ mains
// in step with the list of built-ins.
func TestEveryBuiltinHasAWasmBuild(t *testing.T) {
	for _, alg := range builtin.All() {
		name := alg.Info().Name
		if _, ok := builtins[name]; !ok {
			t.Errorf("built-in %s has no conformance cases in this test", name)
		}
	}
	for name := range builtins {
		if _, err := os.Stat(pluginPkg(name) + "/main.go"); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}

// TestBuiltinsConformAsWasm runs every built-in as a Wasm module through
// the conformance kit, and step by step against the native plugin on the
// same Redis and clock: every decision must be identical.
func TestBuiltinsConformAsWasm(t *testing.T) {
	var pkgs []string
	for name := range builtins {
		pkgs = append(pkgs, pluginPkg(name))
	}
	buildAll(pkgs...)
	env := plugintest.NewEnv(t)
	for name, b := range builtins {
		t.Run(name, func(t *testing.T) {
			w := shared(t, "builtin-"+name, pluginPkg(name), wasm.Options{})
			if got, want := w.Info(), b.native.Info(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Info differs:\nwasm   %+v\nnative %+v", got, want)
			}
			for _, tc := range b.cases {
				t.Run(tc.name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(5, uint64(len(tc.name))))
					steps := plugintest.RandomSteps(rng, 400, tc.opts)
					model := func(sdk.Config) sdk.LocalLimiter { return b.model(plugintest.Configure(t, b.native, tc.raw)) }
					env.Conform(t, w, tc.raw, model, steps)
					sameDecisions(t, env, b.native, w, tc.raw, steps)
				})
			}
		})
	}
}

// sameDecisions runs steps through both algorithms, each under its own
// rule (so its own keys), and fails at the first difference.
func sameDecisions(t *testing.T, env *plugintest.Env, native, w sdk.Algorithm, raw map[string]any, steps []plugintest.Step) {
	t.Helper()
	nc, wc := plugintest.Configure(t, native, raw), plugintest.Configure(t, w, raw)
	c := env.Capability()
	np, wp := plugintest.Register(t, c, native), plugintest.Register(t, c, w)
	rule := fmt.Sprintf("same-%d", rand.Int64())
	ctx := context.Background()
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		dn, errN := native.Decide(ctx, np.Host(rule+"-n", s.Req.Subject), nc, s.Req)
		dw, errW := w.Decide(ctx, wp.Host(rule+"-w", s.Req.Subject), wc, s.Req)
		if dn != dw || (errN == nil) != (errW == nil) {
			t.Fatalf("step %d (%v):\nnative %+v %v\nwasm   %+v %v", i, s, dn, errN, dw, errW)
		}
	}
}

// TestConfigErrorsMatchNative checks that a Wasm plugin reports the same
// problems, one error each, as the native one.
func TestConfigErrorsMatchNative(t *testing.T) {
	w := shared(t, "builtin-"+sortedset.Name, pluginPkg(sortedset.Name), wasm.Options{})
	for _, raw := range []map[string]any{
		{},
		{"limit": 0, "window": "1s", "min_gap": "x"},
		{"limit": 1, "window": "1s", "also": []any{map[string]any{"limit": -1}}, "typo": 1},
	} {
		_, errN := sortedset.New().Configure(raw)
		_, errW := w.Configure(raw)
		if errN == nil || errW == nil || errN.Error() != errW.Error() {
			t.Errorf("%v:\nnative %v\nwasm   %v", raw, errN, errW)
		}
		if j, ok := errW.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) < 1 {
			t.Errorf("%v: wasm error is not a list of problems: %#v", raw, errW)
		}
	}
}

// TestTemplatesStartDecisionsWithoutTheGuest checks that a decision under a
// config the guest answered a template for costs no ruled_step call, and
// decides as the guest's own steps and the native plugin do.
func TestTemplatesStartDecisionsWithoutTheGuest(t *testing.T) {
	env := plugintest.NewEnv(t)
	native := fixedwindow.New()
	templated := fresh(t, pluginPkg(fixedwindow.Name), wasm.Options{})
	stepped := fresh(t, pluginPkg(fixedwindow.Name), wasm.Options{NoTemplates: true})
	raw := map[string]any{"limit": 7, "window": "500ms", "offset": "1us"}
	rng := rand.New(rand.NewPCG(7, 7))
	steps := plugintest.RandomSteps(rng, 200, plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond,
		MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3})
	for _, w := range []*wasm.Plugin{templated, stepped} {
		sameDecisions(t, env, native, w, raw, steps)
	}
	n := uint64(len(steps))
	if s := templated.Stats(); s.GuestSteps != 0 {
		t.Errorf("with templates: %d guest steps for %d decisions", s.GuestSteps, n)
	}
	if s := stepped.Stats(); s.GuestSteps != n {
		t.Errorf("NoTemplates: %d guest steps for %d decisions", s.GuestSteps, n)
	}

	// A calendar window has no template: its steps run in the guest.
	cal := map[string]any{"limit": 3, "calendar": "hour"}
	sameDecisions(t, env, native, templated, cal, steps[:20])
	if s := templated.Stats(); s.GuestSteps < 20 {
		t.Errorf("calendar: %d guest steps for 20 decisions", s.GuestSteps)
	}
}
