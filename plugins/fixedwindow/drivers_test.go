package fixedwindow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// TestCalendarThroughDrivers builds the plugin as a Wasm module (./wasm)
// and as a process plugin (bench/fwprocess), and checks calendar periods
// through each: the host resumes such a plugin's step from the step's
// script and state alone, and a Wasm guest has no zone files (the database
// is compiled in).
func TestCalendarThroughDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	ctx := context.Background()
	dir := t.TempDir()
	wasmOut, procOut := filepath.Join(dir, "fixedwindow.wasm"), filepath.Join(dir, "fwprocess")
	if err := wasm.Build(ctx, "wasm", wasmOut); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", procOut, "../../bench/fwprocess").CombinedOutput(); err != nil {
		t.Fatalf("go build ../../bench/fwprocess: %v\n%s", err, out)
	}
	w, err := wasm.Load(ctx, wasmOut, wasm.Options{PoolSize: 1, Prewarm: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(ctx) })
	p, err := process.Load(ctx, procOut, process.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })

	env := plugintest.NewEnv(t)
	native := fixedwindow.New()
	raw := map[string]any{"limit": 6, "calendar": "day", "tz": "America/New_York"}
	for _, alg := range []sdk.Algorithm{w, p} {
		subject := map[sdk.Algorithm]string{w: "wasm", p: "process"}[alg]
		t.Run(subject, func(t *testing.T) {
			if got, want := fmt.Sprint(alg.Info()), fmt.Sprint(native.Info()); got != want {
				t.Fatalf("Info differs:\n%s\nnative %s", got, want)
			}
			// The first decision misses (Redis time is far from the
			// plugin's clock) and is resumed; then one call each.
			setClock(env, time.Date(2033, 3, 12, 20, 0, 0, 0, time.UTC))
			cfg := plugintest.Configure(t, alg, raw)
			model := fixedwindow.NewModel(plugintest.Configure(t, native, raw).(fixedwindow.Config))
			h := &countingHost{Host: plugintest.Register(t, env.Capability(), alg).Host("r", subject)}
			for i, want := range []int64{2, 1, 1} {
				before := h.calls.Load()
				d, err := alg.Decide(ctx, h, cfg, hit(subject, 1))
				if err != nil {
					t.Fatal(err)
				}
				if m := model.Decide(env.Clock.Now(), hit(subject, 1)); d != m {
					t.Fatalf("decision %d: %+v, model %+v", i, d, m)
				}
				if n := h.calls.Load() - before; n != want {
					t.Fatalf("decision %d: %d script calls, want %d", i, n, want)
				}
			}

			// Across New York's spring change, on 13 March 2033 (about
			// 100 hours of steps from the 11th).
			setClock(env, time.Date(2033, 3, 11, 12, 0, 0, 0, time.UTC))
			rng := rand.New(rand.NewPCG(7, 11))
			steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 40 * time.Minute,
				MinHits: -1, MaxHits: 3, Dedup: 0.3, BestEffort: 0.3})
			env.Conform(t, alg, raw, func(sdk.Config) sdk.LocalLimiter {
				return fixedwindow.NewModel(plugintest.Configure(t, native, raw).(fixedwindow.Config))
			}, steps)
		})
	}
}
