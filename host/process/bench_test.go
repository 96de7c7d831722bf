package process_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// BenchmarkDecide measures one fixed-window decision natively and through
// the process driver, against a stub host (the driver's own overhead: two
// gRPC round trips, Decide and the Eval back to ruled) and against a real
// redis-server. It has the shape of host/wasm's BenchmarkDecide, so that
// docs/plugins.md can compare the three; it records the numbers. Besides
// the time per decision it reports the CPU time ruled (the test process)
// and the plugin process spend per decision, which depend less on how busy
// the machine is.
func BenchmarkDecide(b *testing.B) {
	raw := map[string]any{"limit": 1 << 40, "window": "1h"}
	algs := []struct {
		name string
		alg  sdk.Algorithm
	}{{"native", fixedwindow.New()}, {"process", builtinProcess(b, fixedwindow.Name)}}
	stub := &stubHost{reply: sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3600e6, 0)}
	env := plugintest.NewEnv(b)
	c := env.Capability()
	req := sdk.Request{Subject: "bench-subject", Hits: 1}
	pid := algs[1].alg.(interface{ PID() int }).PID()
	for _, a := range algs {
		cfg := plugintest.Configure(b, a.alg, raw)
		reg := plugintest.Register(b, c, a.alg)
		for _, h := range []struct {
			name string
			host sdk.Host
		}{{"stub", stub}, {"redis", reg.Host("bench", req.Subject)}} {
			b.Run(a.name+"/"+h.name, func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b, pid)()
				for b.Loop() {
					if _, err := a.alg.Decide(context.Background(), h.host, cfg, req); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(a.name+"/"+h.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b, pid)()
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

// reportCPU measures the CPU time of this process and of the plugin
// process pid from now until the returned function runs, and reports both
// per operation.
func reportCPU(b *testing.B, pid int) func() {
	self0, plugin0 := selfCPU(), processCPU(pid)
	return func() {
		n := float64(b.N)
		b.ReportMetric(float64((selfCPU()-self0).Microseconds())/n, "host-cpu-µs/op")
		b.ReportMetric(float64((processCPU(pid)-plugin0).Microseconds())/n, "plugin-cpu-µs/op")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU reads a process's user and system time from /proc (in clock
// ticks of 10ms).
func processCPU(pid int) time.Duration {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
