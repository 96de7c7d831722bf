package wasm_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/plugintest"
)

// BenchmarkDecide measures one fixed-window decision natively and through
// the Wasm driver, against a stub host (the driver's own overhead) and
// against a real redis-server. docs/abi.md records the numbers.
func BenchmarkDecide(b *testing.B) {
	raw := map[string]any{"limit": 1 << 40, "window": "1h"}
	w := shared(b, "bench-"+fixedwindow.Name, pluginPkg(fixedwindow.Name), wasm.Options{})
	// The same module with the sandbox's interruptibility off, to show what
	// it costs (wazero calls back into Go at every loop iteration).
	u := shared(b, "bench-uninterruptible-"+fixedwindow.Name, pluginPkg(fixedwindow.Name), wasm.Uninterruptible(wasm.Options{}))
	algs := []struct {
		name string
		alg  sdk.Algorithm
	}{{"native", fixedwindow.New()}, {"wasm", w}, {"wasm-uninterruptible", u}}
	stub := &stubHost{reply: sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3600e6, 0)}
	env := plugintest.NewEnv(b)
	c := env.Capability()
	req := sdk.Request{Subject: "bench-subject", Hits: 1}
	for _, a := range algs {
		cfg := plugintest.Configure(b, a.alg, raw)
		reg := plugintest.Register(b, c, a.alg)
		for _, h := range []struct {
			name string
			host sdk.Host
		}{{"stub", stub}, {"redis", reg.Host("bench", req.Subject)}} {
			b.Run(a.name+"/"+h.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					if _, err := a.alg.Decide(context.Background(), h.host, cfg, req); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu)
			})
			b.Run(a.name+"/"+h.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				cpu := cpuTime()
				defer reportCPU(b, cpu)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := a.alg.Decide(context.Background(), h.host, cfg, req); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// cpuTime is the CPU time the test process has used. On a shared machine
// wall time per operation includes waiting for a core; CPU time per
// operation is the cost a decision adds.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
}
