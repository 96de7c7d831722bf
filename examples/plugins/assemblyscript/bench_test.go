package assemblyscript_test

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

// BenchmarkDecide measures one fixed-window decision three ways: the native Go plugin, the same
// Go plugin compiled to Wasm (sdk/guest), and the AssemblyScript module, the last two through
// ruled's Wasm driver; each against a stub host that returns a canned reply (the driver's and
// the guest's own cost) and against a real redis-server, from one goroutine and from GOMAXPROCS
// goroutines (/parallel). Like host/wasm's benchmark it reports cpu-µs/op, the process's CPU time
// per decision, besides wall time.
func BenchmarkDecide(b *testing.B) {
	raw := map[string]any{"limit": 1 << 40, "window": "1h"}
	algs := []struct {
		name string
		alg  sdk.Algorithm
	}{
		{"native", fixedwindow.New()},
		{"wasm-go", load(b, goModule(b), wasm.Options{})},
		{"wasm-as", load(b, asModule, wasm.Options{})},
	}
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

// cpuTime is the CPU time the test process has used: on a shared machine wall time per operation
// includes waiting for a core, CPU time per operation is the cost a decision adds.
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
