// Package plugintest is the conformance kit for ruled plugins. It runs an
// sdk.Algorithm against a real redis-server (started on a free loopback port)
// with a clock injected through the host, and compares every decision with a
// reference model written in Go.
//
//	env := plugintest.NewEnv(t)
//	steps := plugintest.RandomSteps(rng, 500, plugintest.StepOptions{...})
//	env.Conform(t, myplugin.New(), rawConfig, func(c sdk.Config) sdk.LocalLimiter {
//		return myplugin.NewModel(c.(myplugin.Config))
//	}, steps)
//
// The kit is part of ruled's own module (github.com/ruled-dev/ruled), not
// of the SDK's, because it runs ruled's capability (host/capability) and
// therefore needs go-redis and the rest of the daemon. Import it from
// _test.go files only: a plugin's code then depends on the SDK module
// alone, and so does its Wasm module or executable, while its tests run
// against the same capability ruled uses (docs/plugins.md, "The SDK as a Go
// module").
package plugintest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// Clock is a settable clock in microseconds, shared by every capability of
// an Env. It starts at a realistic Unix time so that scripts see full-size
// timestamps.
type Clock struct{ us atomic.Int64 }

// StartUS is the clock's initial value: a Unix time in microseconds with
// non-zero low digits.
const StartUS int64 = 1_790_000_000_123_457

// Now returns the current time in microseconds.
func (c *Clock) Now() int64 { return c.us.Load() }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// Env is a real redis-server (or a Redis Cluster) and an injected clock.
type Env struct {
	tb    testing.TB
	Redis *redistest.Server
	// Cluster is the Redis Cluster of an env made by NewClusterEnv; Redis
	// is nil then.
	Cluster *redistest.Cluster
	Clock   *Clock
}

// NewEnv starts a redis-server for the test.
func NewEnv(tb testing.TB) *Env {
	tb.Helper()
	e := &Env{tb: tb, Redis: redistest.Start(tb), Clock: &Clock{}}
	e.Clock.us.Store(StartUS)
	return e
}

// NewClusterEnv starts a Redis Cluster of 3 masters (no replicas) for the
// test: Conform, Hammer and Capability then run against it, each capability
// over its own cluster client. Starting a cluster takes about 2 s; share one
// env among subtests.
func NewClusterEnv(tb testing.TB) *Env {
	tb.Helper()
	e := &Env{tb: tb, Cluster: redistest.StartCluster(tb, 3, 0), Clock: &Clock{}}
	e.Clock.us.Store(StartUS)
	return e
}

// Capability returns a new capability with its own Redis connection pool and
// the env's clock, as a separate ruled instance would have.
func (e *Env) Capability() *capability.Capability {
	var client redis.UniversalClient
	if e.Cluster != nil {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.Cluster.Addrs(), ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClient(&redis.Options{Addr: e.Redis.Addr(), ContextTimeoutEnabled: true})
	}
	e.tb.Cleanup(func() { _ = client.Close() })
	return capability.New(client, capability.Options{Timeout: 5 * time.Second, Clock: e.Clock.Now})
}

// Register registers alg's scripts with a capability and fails the test on error.
func Register(tb testing.TB, c *capability.Capability, alg sdk.Algorithm) *capability.Plugin {
	tb.Helper()
	info := alg.Info()
	p, err := c.Register(info.Name, info.Scripts)
	if err != nil {
		tb.Fatalf("registering %s: %v", info.Name, err)
	}
	return p
}

// Configure configures alg and fails the test on error.
func Configure(tb testing.TB, alg sdk.Algorithm, raw map[string]any) sdk.Config {
	tb.Helper()
	cfg, err := alg.Configure(raw)
	if err != nil {
		tb.Fatalf("configure %v: %v", raw, err)
	}
	return cfg
}

// Step is one request of a sequence, made after the clock moved by Advance.
type Step struct {
	Advance time.Duration
	Req     sdk.Request
}

func (s Step) String() string {
	return fmt.Sprintf("+%v %q hits=%d dedup=%q best=%v", s.Advance, s.Req.Subject, s.Req.Hits, s.Req.DedupID, s.Req.BestEffort)
}

// StepOptions shape RandomSteps.
type StepOptions struct {
	Subjects   int           // distinct subjects (default 1)
	MaxAdvance time.Duration // largest clock step (default 0: the clock stands still)
	MaxHits    int64         // hits drawn from [MinHits, MaxHits] (default 1)
	MinHits    int64         // may be 0 (peek) or negative (refund)
	Dedup      float64       // probability of a dedup id drawn from a small set
	BestEffort float64       // probability of best_effort
	Queue      float64       // probability of queue (waiting in line)
}

// RandomSteps draws n steps.
func RandomSteps(rng *rand.Rand, n int, o StepOptions) []Step {
	if o.Subjects < 1 {
		o.Subjects = 1
	}
	if o.MaxHits < o.MinHits {
		o.MaxHits = o.MinHits
	}
	if o.MaxHits == 0 && o.MinHits == 0 {
		o.MaxHits, o.MinHits = 1, 1
	}
	steps := make([]Step, n)
	for i := range steps {
		s := Step{Req: sdk.Request{
			Subject: fmt.Sprintf("subject-%d", rng.IntN(o.Subjects)),
			Hits:    o.MinHits + rng.Int64N(o.MaxHits-o.MinHits+1),
		}}
		if o.MaxAdvance > 0 {
			s.Advance = time.Duration(rng.Int64N(int64(o.MaxAdvance/time.Millisecond)+1)) * time.Millisecond
			if rng.IntN(4) == 0 { // odd microseconds too
				s.Advance += time.Duration(rng.IntN(1000)) * time.Microsecond
			}
		}
		if rng.Float64() < o.Dedup {
			s.Req.DedupID = fmt.Sprintf("d%d", rng.IntN(8))
		}
		s.Req.BestEffort = rng.Float64() < o.BestEffort
		s.Req.Queue = rng.Float64() < o.Queue
		steps[i] = s
	}
	return steps
}

// Conform runs steps through alg on real Redis and through the model, and
// fails at the first decision that differs in any field. On a standalone
// Redis the plugin runs isolated (RegisterIsolated). When alg offers a
// template for the config (sdk.Templater), it must expand, for every step,
// to what Start answers.
func (e *Env) Conform(t testing.TB, alg sdk.Algorithm, raw map[string]any, newModel func(sdk.Config) sdk.LocalLimiter, steps []Step) {
	t.Helper()
	cfg := Configure(t, alg, raw)
	CheckTemplate(t, alg, cfg, steps)
	model := newModel(cfg)
	// On a standalone Redis the plugin runs as its own ACL user, as in
	// ruled: a command missing from its declaration fails the run.
	var plugin *capability.Plugin
	if e.Redis != nil {
		plugin = e.RegisterIsolated(t, alg)
	} else {
		plugin = Register(t, e.Capability(), alg)
	}
	rule := fmt.Sprintf("conform-%d", rand.Int64())
	ctx := context.Background()
	for i, s := range steps {
		e.Clock.Advance(s.Advance)
		got, err := alg.Decide(ctx, plugin.Host(rule, s.Req.Subject), cfg, s.Req)
		if err != nil {
			t.Fatalf("step %d (%v): %v", i, s, err)
		}
		want := model.Decide(e.Clock.Now(), s.Req)
		if got != want {
			t.Fatalf("step %d (%v) at t=%d:\n got %+v\nwant %+v\nhistory:\n%s",
				i, s, e.Clock.Now()-StartUS, got, want, history(steps, i))
		}
	}
}

// CheckTemplate fails when alg is an sdk.Templater whose template for cfg
// is refused by sdk.CheckTemplate or expands, for one of the steps'
// requests, to anything but what Start answers.
func CheckTemplate(t testing.TB, alg sdk.Algorithm, cfg sdk.Config, steps []Step) {
	t.Helper()
	tp, ok := alg.(sdk.Templater)
	if !ok {
		return
	}
	tmpl, ok := tp.Template(cfg)
	if !ok {
		return
	}
	if err := sdk.CheckTemplate(tmpl); err != nil {
		t.Fatalf("template %+v: %v", tmpl, err)
	}
	for i, s := range steps {
		want, err := tp.Start(context.Background(), cfg, s.Req)
		if got := sdk.Expand(tmpl, s.Req); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (%v): the template expands to\n%#v\nStart answers\n%#v (%v)", i, s, got, want, err)
		}
	}
}

func history(steps []Step, upto int) string {
	var b strings.Builder
	for i := max(0, upto-15); i <= upto; i++ {
		fmt.Fprintf(&b, "  %3d %v\n", i, steps[i])
	}
	return b.String()
}

// Hammer sends req from goroutines goroutines on each of instances separate
// capabilities (separate connection pools, as separate ruled instances), each
// goroutine perG times, with the clock standing still, and returns the total
// granted. Errors fail the test.
func (e *Env) Hammer(t testing.TB, alg sdk.Algorithm, raw map[string]any, instances, goroutines, perG int, req sdk.Request) int64 {
	t.Helper()
	cfg := Configure(t, alg, raw)
	rule := fmt.Sprintf("hammer-%d", rand.Int64())
	var granted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, instances*goroutines)
	for range instances {
		plugin := Register(t, e.Capability(), alg)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := plugin.Host(rule, req.Subject)
				for range perG {
					d, err := alg.Decide(context.Background(), h, cfg, req)
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						granted.Add(d.Granted)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("hammer: %v", err)
	}
	return granted.Load()
}

// Replay feeds n copies of req to model at the same instant and returns the
// total granted: what Hammer must match.
func Replay(model sdk.LocalLimiter, nowUS int64, n int, req sdk.Request) int64 {
	var total int64
	for range n {
		if d := model.Decide(nowUS, req); d.Allowed {
			total += d.Granted
		}
	}
	return total
}

// IsolatedCapability is Capability with per-plugin isolation on, as ruled
// runs on a Redis where it may create ACL users: each plugin registered on it
// runs its scripts as its own Redis user, allowed its own keys and exactly
// the commands it declares. A plugin that passes its tests through it
// declares every command it needs.
func (e *Env) IsolatedCapability() *capability.Capability {
	e.tb.Helper()
	if e.Redis == nil {
		e.tb.Fatal("plugintest: IsolatedCapability needs a standalone Env")
	}
	client := redis.NewClient(&redis.Options{Addr: e.Redis.Addr(), ContextTimeoutEnabled: true})
	e.tb.Cleanup(func() { _ = client.Close() })
	iso := &capability.Isolation{ClientAs: func(user, pass string) (redis.UniversalClient, error) {
		c := redis.NewClient(&redis.Options{Addr: e.Redis.Addr(), Username: user, Password: pass, ContextTimeoutEnabled: true})
		e.tb.Cleanup(func() { _ = c.Close() })
		return c, nil
	}}
	return capability.New(client, capability.Options{Timeout: 5 * time.Second, Clock: e.Clock.Now, Isolation: iso})
}

// RegisterIsolated registers alg on an IsolatedCapability and fails the
// test unless the plugin really is isolated.
func (e *Env) RegisterIsolated(tb testing.TB, alg sdk.Algorithm) *capability.Plugin {
	tb.Helper()
	p := Register(tb, e.IsolatedCapability(), alg)
	if !p.Isolated() {
		tb.Fatalf("plugin %s is not isolated", alg.Info().Name)
	}
	return p
}

// ReportRedisTime reports Redis's own time per EVALSHA (INFO commandstats)
// as the benchmark metric redis-µs/call: a busy client machine distorts it
// far less than ns/op. Reset the statistics (CONFIG RESETSTAT) before the
// timed part.
func ReportRedisTime(b *testing.B, client redis.UniversalClient) {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					b.ReportMetric(f, "redis-µs/call")
					return
				}
			}
		}
	}
	b.Fatalf("no EVALSHA statistics in %q", info)
}

// Rule is one rule of an algorithm on an Env, for tests that decide single
// requests at the env's clock: a config, a registration and the rule name
// "r" in keys.
type Rule struct {
	tb     testing.TB
	Env    *Env
	Alg    sdk.Algorithm
	Config sdk.Config
	Plugin *capability.Plugin
}

// Rule configures alg with raw and registers it on a new capability.
func (e *Env) Rule(tb testing.TB, alg sdk.Algorithm, raw map[string]any) *Rule {
	tb.Helper()
	return &Rule{tb: tb, Env: e, Alg: alg, Config: Configure(tb, alg, raw), Plugin: Register(tb, e.Capability(), alg)}
}

// Reconfigure switches the rule to a new config, keeping its keys, as a
// reload of the rule file does.
func (r *Rule) Reconfigure(raw map[string]any) {
	r.tb.Helper()
	r.Config = Configure(r.tb, r.Alg, raw)
}

// Decide decides req at the env's clock (subject "s" when empty) and fails
// the test on error.
func (r *Rule) Decide(req sdk.Request) sdk.Decision {
	r.tb.Helper()
	if req.Subject == "" {
		req.Subject = "s"
	}
	d, err := r.Alg.Decide(context.Background(), r.Plugin.Host("r", req.Subject), r.Config, req)
	if err != nil {
		r.tb.Fatal(err)
	}
	return d
}

// Hit decides n hits for subject "s".
func (r *Rule) Hit(n int64) sdk.Decision {
	r.tb.Helper()
	return r.Decide(sdk.Request{Hits: n})
}

// BenchDecide benchmarks alg's Decide against the env's Redis with Redis's
// own clock (no injected time), from parallel callers (16 per GOMAXPROCS)
// spread over subjects subjects, and reports Redis's time per call as
// redis-µs/call. With mustAllow every decision must allow.
func (e *Env) BenchDecide(b *testing.B, alg sdk.Algorithm, raw map[string]any, subjects int, mustAllow bool) {
	b.Helper()
	client := redis.NewClient(&redis.Options{Addr: e.Redis.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = client.Close() })
	p := Register(b, capability.New(client, capability.Options{Timeout: 5 * time.Second}), alg)
	cfg := Configure(b, alg, raw)
	names := make([]string, max(subjects, 1))
	for i := range names {
		names[i] = fmt.Sprintf("bench-%d", i)
	}
	if err := p.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			subject := names[i%len(names)]
			i++
			d, err := alg.Decide(context.Background(), p.Host("bench", subject), cfg, sdk.Request{Subject: subject, Hits: 1})
			if err != nil || (mustAllow && !d.Allowed) {
				b.Errorf("%+v, %v", d, err)
				return
			}
		}
	})
	b.StopTimer()
	ReportRedisTime(b, client)
}

// BenchDecideOn benchmarks alg's Decide of req through h, as sub-benchmarks
// name (one goroutine) and name/parallel (GOMAXPROCS goroutines). Besides
// wall time it reports cpu-µs/op, the process's CPU time per decision: on a
// shared machine wall time includes waiting for a core, CPU time is the cost
// a decision adds.
func BenchDecideOn(b *testing.B, name string, alg sdk.Algorithm, h sdk.Host, cfg sdk.Config, req sdk.Request) {
	report := func(b *testing.B, start time.Duration) {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
	}
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			if _, err := alg.Decide(context.Background(), h, cfg, req); err != nil {
				b.Fatal(err)
			}
		}
		report(b, cpu)
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime()
		defer report(b, cpu)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := alg.Decide(context.Background(), h, cfg, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CheckBlockSwitch plays steps on a rule whose limit switches at random
// between open and a block (limit 0), as a dynamic limit does, and checks
// every decision against the models of the two configs: under the block,
// hits >= 0 get the block model's answer, and a refund acts on the counts
// as open would while reporting the block's window and reset (limit 0,
// remaining 0). decide reconfigures the rule (block or not), decides r and
// returns the plugin's decision. It fails when the sequence is too easy:
// fewer than 100 blocked steps, 30 denials while open or 10 refunds under
// the block.
func CheckBlockSwitch(t testing.TB, env *Env, rng *rand.Rand, steps []Step, open, shut sdk.LocalLimiter, decide func(block bool, r sdk.Request) sdk.Decision) {
	t.Helper()
	blocked, deniedOpen, refundedShut := 0, 0, 0
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		now := env.Clock.Now()
		block := rng.IntN(3) == 0
		var want sdk.Decision
		if block {
			want = shut.Decide(now, s.Req)
			if s.Req.Hits < 0 {
				d := open.Decide(now, s.Req)
				want = sdk.Decision{Allowed: true, Granted: d.Granted, Window: want.Window, Reset: want.Reset}
				if d.Granted < 0 {
					refundedShut++
				}
			}
			blocked++
		} else {
			want = open.Decide(now, s.Req)
			if !want.Allowed {
				deniedOpen++
			}
		}
		if got := decide(block, s.Req); got != want {
			t.Fatalf("step %d (%v, blocked %v):\n got %+v\nwant %+v", i, s, block, got, want)
		}
	}
	if blocked < 100 || deniedOpen < 30 || refundedShut < 10 {
		t.Fatalf("sequence too easy: %d blocked, %d denied when open, %d refunds under the block", blocked, deniedOpen, refundedShut)
	}
}

// KeyspaceReads returns the Redis server's keyspace hits plus misses: the
// key lookups made so far, to check that a decision read no key.
func (e *Env) KeyspaceReads(t testing.TB) int64 {
	t.Helper()
	info, err := e.Redis.Client().Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "keyspace_hits" || k == "keyspace_misses") {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			n += x
		}
	}
	return n
}
