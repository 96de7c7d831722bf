package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/concurrency"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// The plugin executable and the Wasm module are built once per test binary.
var (
	buildOnce, wasmOnce sync.Once
	binPath, wasmPath   string
	buildErr, wasmErr   error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ruled-concurrency-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath, wasmPath = filepath.Join(dir, "concurrency"), filepath.Join(dir, "concurrency.wasm")
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// start builds the example process plugin, which serves this package
// (once), and starts it as ruled does.
func start(tb testing.TB) *process.Plugin {
	tb.Helper()
	buildOnce.Do(func() {
		if out, err := exec.Command("go", "build", "-o", binPath, "../../examples/plugins/concurrency").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	p, err := process.Load(context.Background(), binPath, process.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// startWasm builds ./wasm (once) and loads it with the Wasm driver.
func startWasm(tb testing.TB) *wasm.Plugin {
	tb.Helper()
	wasmOnce.Do(func() { wasmErr = wasm.Build(context.Background(), "./wasm", wasmPath) })
	if wasmErr != nil {
		tb.Fatal(wasmErr)
	}
	w, err := wasm.Load(context.Background(), wasmPath, wasm.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// TestConformsAsAProcess runs the example process plugin, which serves
// this package, started as ruled starts it, through the conformance kit
// against the reference model, and step by step against the native
// algorithm. (host/wasm and host/process run every built-in through their
// drivers too.)
func TestConformsAsAProcess(t *testing.T) { conform(t, start(t)) }

func conform(t *testing.T, p sdk.Algorithm) {
	env := plugintest.NewEnv(t)
	raw := map[string]any{"limit": 3, "ttl": "300ms"}
	native := concurrency.New()
	model := func(c sdk.Config) sdk.LocalLimiter {
		return concurrency.NewModel(plugintest.Configure(t, native, raw).(concurrency.Config))
	}
	steps := randomSteps(3, 500)
	env.Conform(t, p, raw, model, steps)

	nc, pc := plugintest.Configure(t, native, raw), plugintest.Configure(t, p, raw)
	c := env.Capability()
	nr, pr := plugintest.Register(t, c, native), plugintest.Register(t, c, p)
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		dn, errN := native.Decide(context.Background(), nr.Host("native", s.Req.Subject), nc, s.Req)
		dp, errP := p.Decide(context.Background(), pr.Host("process", s.Req.Subject), pc, s.Req)
		if dn != dp || (errN == nil) != (errP == nil) || sdk.IsBadRequest(errN) != sdk.IsBadRequest(errP) {
			t.Fatalf("step %d (%v):\nnative %+v %v\nplugin %+v %v", i, s, dn, errN, dp, errP)
		}
	}
	// What crosses the boundary besides decisions: the declared traits, and
	// a refusal of the request as bad input (400 to the client, not on_error).
	if got, want := p.Info().Traits, native.Info().Traits; got != want {
		t.Fatalf("traits %+v, want %+v", got, want)
	}
	_, err := p.Decide(context.Background(), pr.Host("process", "s"), pc, sdk.Request{Subject: "s", Hits: 1})
	var bad *sdk.BadRequestError
	if !errors.As(err, &bad) || !strings.Contains(bad.Message, "must name the slot") {
		t.Fatalf("acquire without a lease id: %v, want a BadRequestError", err)
	}
}

// BenchmarkDecide measures one acquire-and-release pair (two decisions)
// natively, through the Wasm driver and through the process driver, from
// parallel goroutines against a real redis-server.
func BenchmarkDecide(b *testing.B) {
	env := plugintest.NewEnv(b)
	c := env.Capability()
	raw := map[string]any{"limit": 1_000_000, "ttl": "1m"}
	for _, a := range []struct {
		name string
		alg  sdk.Algorithm
	}{{"native", concurrency.New()}, {"wasm", startWasm(b)}, {"process", start(b)}} {
		cfg := plugintest.Configure(b, a.alg, raw)
		reg := plugintest.Register(b, c, a.alg)
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				h := reg.Host("bench", "subject")
				id := fmt.Sprint(rand.Int64())
				for pb.Next() {
					for _, hits := range []int64{1, -1} {
						if _, err := a.alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "subject", Hits: hits, DedupID: id}); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
		})
	}
}
