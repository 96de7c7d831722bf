package concurrency_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/plugins/concurrency"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func model(c sdk.Config) sdk.LocalLimiter { return concurrency.NewModel(c.(concurrency.Config)) }

// randomSteps draws acquires (half of them waiting in line), peeks and
// releases of a few lease ids.
func randomSteps(seed uint64, n int) []plugintest.Step {
	rng := rand.New(rand.NewPCG(seed, 7))
	return plugintest.RandomSteps(rng, n, plugintest.StepOptions{Subjects: 2, MaxAdvance: 120 * time.Millisecond,
		MinHits: -1, MaxHits: 1, Dedup: 1, Queue: 0.5})
}

func TestConfigure(t *testing.T) {
	alg := concurrency.New()
	c, err := alg.Configure(map[string]any{"limit": 5})
	if err != nil || c.(concurrency.Config) != (concurrency.Config{Limit: 5, TTL: 30 * time.Second}) {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for raw, want := range map[string]map[string]any{
		"limit: required":           {},
		"limit: must be 1 to":       {"limit": 0},
		"ttl: must be 1ms to 24h":   {"limit": 1, "ttl": "25h"},
		"ttl: must be a whole":      {"limit": 1, "ttl": "1500ns"},
		"typo: unknown field":       {"limit": 1, "typo": 1},
		`ttl: want a duration such`: {"limit": 1, "ttl": "soon"},
	} {
		if _, err := alg.Configure(want); err == nil || !strings.Contains(err.Error(), raw) {
			t.Errorf("%v: got %v, want %q", want, err, raw)
		}
	}
}

func TestConformsToModel(t *testing.T) {
	env := plugintest.NewEnv(t)
	for _, raw := range []map[string]any{
		{"limit": 3, "ttl": "300ms"},
		{"limit": 1, "ttl": "150001us"},
	} {
		t.Run(fmt.Sprint(raw), func(t *testing.T) {
			env.Conform(t, concurrency.New(), raw, model, randomSteps(uint64(len(fmt.Sprint(raw))), 600))
		})
	}
}

// TestLeases walks through the life of leases with the clock in hand.
func TestLeases(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := concurrency.New()
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": 2, "ttl": "10s"})
	h := plugintest.Register(t, env.Capability(), alg).Host("leases", "alice")
	do := func(hits int64, id string) sdk.Decision {
		t.Helper()
		d, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "alice", Hits: hits, DedupID: id})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := do(1, "a"); !d.Allowed || d.Granted != 1 || d.Remaining != 1 || d.Reset != 10*time.Second {
		t.Fatalf("first acquire %+v", d)
	}
	env.Clock.Advance(time.Second)
	if d := do(1, "b"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second acquire %+v", d)
	}
	if d := do(1, "c"); d.Allowed || d.RetryAfter != 9*time.Second || d.Reset != 10*time.Second {
		t.Fatalf("third acquire must wait for a's expiry: %+v", d)
	}
	if d := do(1, "a"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("renewing a held lease %+v", d)
	}
	if d := do(-1, "b"); d.Granted != -1 || d.Remaining != 1 {
		t.Fatalf("release %+v", d)
	}
	if d := do(-1, "b"); d.Granted != 0 || d.Remaining != 1 {
		t.Fatalf("double release freed something: %+v", d)
	}
	if d := do(1, "c"); !d.Allowed {
		t.Fatalf("acquire after release %+v", d)
	}
	env.Clock.Advance(10 * time.Second) // a (renewed at 1s) and c (at 1s) expire at 11s
	if d := do(0, ""); !d.Allowed || d.Remaining != 2 || d.Reset != 0 {
		t.Fatalf("leases did not expire: %+v", d)
	}
	if d := do(-1, "c"); d.Granted != 0 {
		t.Fatalf("releasing an expired lease freed something: %+v", d)
	}
	if _, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "alice", Hits: 1}); err == nil {
		t.Fatal("an acquire without a lease id was accepted")
	}
	if _, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "alice", Hits: 2, DedupID: "x"}); err == nil {
		t.Fatal("hits: 2 was accepted")
	}
}

// TestHammer acquires from many goroutines at one instant: exactly limit
// leases are granted.
func TestHammer(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := concurrency.New()
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": 7})
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 3 {
		reg := plugintest.Register(t, env.Capability(), alg)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := reg.Host("hammer", "s")
				for k := range 20 {
					d, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1, DedupID: fmt.Sprint(i, g, k)})
					if err != nil {
						t.Error(err)
						return
					}
					granted.Add(d.Granted)
				}
			}()
		}
	}
	wg.Wait()
	if granted.Load() != 7 {
		t.Fatalf("granted %d leases, want 7", granted.Load())
	}
}

// TestHoldersNeverExceedTheLimit: goroutines on two instances (each its
// own capability and connections) acquire, hold, and release, over and
// over: no more than limit of them ever hold a slot at once, every release
// frees exactly its own slot, slots are reused, and all are free at the
// end. On a standalone Redis and on a 3-master Cluster.
func TestHoldersNeverExceedTheLimit(t *testing.T) {
	for name, env := range map[string]*plugintest.Env{"standalone": plugintest.NewEnv(t), "cluster": plugintest.NewClusterEnv(t)} {
		t.Run(name, func(t *testing.T) { holdersNeverExceedTheLimit(t, env) })
	}
}

func holdersNeverExceedTheLimit(t *testing.T, env *plugintest.Env) {
	const limit = 4
	alg := concurrency.New()
	cfg := plugintest.Configure(t, alg, map[string]any{"limit": limit, "ttl": "1m"})
	var holding, most, grants atomic.Int64
	var wg sync.WaitGroup
	decide := func(h sdk.Host, hits int64, id string) sdk.Decision {
		d, err := alg.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: hits, DedupID: id})
		if err != nil {
			t.Error(err)
		}
		return d
	}
	for i := range 2 {
		reg := plugintest.Register(t, env.Capability(), alg)
		for g := range 12 {
			wg.Go(func() {
				h := reg.Host("holders", "s")
				for k := range 30 {
					id := fmt.Sprint(i, "-", g, "-", k)
					if d := decide(h, 1, id); d.Granted != 1 {
						continue
					}
					grants.Add(1)
					n := holding.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					holding.Add(-1)
					if d := decide(h, -1, id); d.Granted != -1 {
						t.Errorf("release of %s: %+v, want its slot freed", id, d)
					}
					if d := decide(h, -1, id); d.Granted != 0 {
						t.Errorf("second release of %s: %+v, want nothing freed", id, d)
					}
				}
			})
		}
	}
	wg.Wait()
	if most.Load() > limit || grants.Load() <= limit {
		t.Fatalf("at most %d held at once over %d grants, want at most %d, reused", most.Load(), grants.Load(), limit)
	}
	h := plugintest.Register(t, env.Capability(), alg).Host("holders", "s")
	if d := decide(h, 0, ""); !d.Allowed || d.Remaining != limit {
		t.Fatalf("after the load: %+v, want every slot free", d)
	}
	t.Logf("%d grants, at most %d held at once", grants.Load(), most.Load())
}

// BenchmarkRedisCost measures what an acquire and a release cost, in
// Redis's own time per script call (redis-µs/call) and wall time, beside a
// fixedwindow decision on the same Redis: 16 goroutines a core, 1000
// subjects, Redis TIME (docs/plugins.md, "concurrency").
func BenchmarkRedisCost(b *testing.B) {
	env := plugintest.NewEnv(b)
	b.Run("fixedwindow", func(b *testing.B) {
		env.BenchDecide(b, fixedwindow.New(), map[string]any{"limit": 1_000_000_000, "window": "1m"}, 1000, true)
	})
	alg := concurrency.New()
	client := redis.NewClient(&redis.Options{Addr: env.Redis.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = client.Close() })
	p := plugintest.Register(b, capability.New(client, capability.Options{Timeout: 5 * time.Second}), alg)
	cfg := plugintest.Configure(b, alg, map[string]any{"limit": 1_000_000, "ttl": "1m"})
	if err := p.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	// run decides hits for lease ids 0 to n-1 (subject i mod 1000) from
	// parallel goroutines, each once.
	run := func(b *testing.B, hits int64, n int, timed bool) {
		var next atomic.Int64
		decide := func(i int64) {
			s := fmt.Sprint("bench-", i%1000)
			d, err := alg.Decide(context.Background(), p.Host("bench", s), cfg, sdk.Request{Subject: s, Hits: hits, DedupID: fmt.Sprint(i)})
			if err != nil || d.Granted != hits {
				b.Errorf("hits %d, lease %d: %+v, %v", hits, i, d, err)
			}
		}
		if !timed {
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
						decide(i)
					}
				})
			}
			wg.Wait()
			return
		}
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				decide(next.Add(1) - 1)
			}
		})
	}
	b.Run("acquire", func(b *testing.B) {
		if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		if err := client.FlushDB(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		run(b, 1, b.N, true)
		b.StopTimer()
		plugintest.ReportRedisTime(b, client)
	})
	b.Run("release", func(b *testing.B) {
		b.StopTimer()
		if err := client.FlushDB(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		run(b, 1, b.N, false) // the leases to release
		if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		run(b, -1, b.N, true)
		b.StopTimer()
		plugintest.ReportRedisTime(b, client)
	})
}
