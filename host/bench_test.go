package host_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// BenchmarkCheck is one decision through the whole engine (rules, plugin,
// capability) against a real redis-server, from parallel goroutines over
// many subjects.
func BenchmarkCheck(b *testing.B) {
	srv := redistest.Start(b)
	e := newEngineTB(b, srv, `rules:
  - name: bench
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000000, window: 1h}
`)
	ips := make([]string, 4096)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.0.%d.%d", i>>8, i&255)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			res := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: ips[i%len(ips)]}, Hits: 1})
			if !res.Allowed {
				b.Errorf("denied: %+v", res)
				return
			}
			i++
		}
	})
}

// BenchmarkCheckDenied is a decision the deny cache answers: every subject
// has used its one permit, so each check is a cached denial, without Redis.
func BenchmarkCheckDenied(b *testing.B) {
	srv := redistest.Start(b)
	e := newEngineTB(b, srv, `rules:
  - name: denied
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1h}
`)
	ips := make([]string, 64)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.2.0.%d", i)
		for range 2 { // the permit, then the denial the cache keeps
			e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: ips[i]}, Hits: 1})
		}
	}
	before := e.Inspect().DenyCacheHits()
	runChecks(b, e, ips, false)
	if hits := e.Inspect().DenyCacheHits() - before; hits < int64(b.N) {
		b.Fatalf("%d of %d denials from the cache", hits, b.N)
	}
}

// runChecks measures e.CheckInto, one hit for each of ips in turn, from
// parallel goroutines, and fails on an answer other than allowed.
func runChecks(b *testing.B, e *host.Engine, ips []string, allowed bool) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		var req host.CheckRequest
		var res host.Result
		for pb.Next() {
			req = host.CheckRequest{Request: host.Request{IP: ips[i%len(ips)]}, Hits: 1}
			if e.CheckInto(context.Background(), &req, &res); res.Allowed != allowed {
				b.Errorf("allowed %v, want %v: %+v", res.Allowed, allowed, res)
				return
			}
			i++
		}
	})
	b.StopTimer()
}
