package capability_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// BenchmarkEval is one capability round trip: a script that touches one key,
// through namespacing, EVALSHA and the breaker, from parallel goroutines.
func BenchmarkEval(b *testing.B) {
	srv := redistest.Start(b)
	b.Run("direct", func(b *testing.B) { benchEval(b, srv, nil) })
	b.Run("autopipelined", func(b *testing.B) { benchEval(b, srv, redis.DefaultBlockingAutoPipelineOptions()) })
}

func benchEval(b *testing.B, srv *redistest.Server, pipe *redis.AutoPipelineOptions) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	p, _ := capability.New(c, capability.Options{Pipeline: pipe}).Register("bench", []sdk.Script{{Name: "incr", Source: `return redis.call('INCR', KEYS[1])`}})
	h := p.Host("rule", "subject")
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.Eval(context.Background(), "incr", []string{"n"}, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEscapeSubject is the cost of making a subject safe in keys.
func BenchmarkEscapeSubject(b *testing.B) {
	for _, s := range []string{"203.0.113.7", "user {42} with spaces"} {
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = capability.EscapeSubject(s)
			}
		})
	}
}
