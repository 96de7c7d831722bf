package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/examples/plugins/concurrency/limiter"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func model(c sdk.Config) sdk.LocalLimiter { return limiter.NewModel(c.(limiter.Config)) }

// Steps returns random acquires, peeks and releases of a few lease ids.
func Steps(seed uint64, n int) []plugintest.Step {
	rng := rand.New(rand.NewPCG(seed, 7))
	return plugintest.RandomSteps(rng, n, plugintest.StepOptions{Subjects: 2, MaxAdvance: 120 * time.Millisecond,
		MinHits: -1, MaxHits: 1, Dedup: 1})
}

func TestConfigure(t *testing.T) {
	alg := limiter.New()
	c, err := alg.Configure(map[string]any{"limit": 5})
	if err != nil || c.(limiter.Config) != (limiter.Config{Limit: 5, TTL: 30 * time.Second}) {
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
			env.Conform(t, limiter.New(), raw, model, Steps(uint64(len(fmt.Sprint(raw))), 600))
		})
	}
}

// TestLeases walks through the life of leases with the clock in hand.
func TestLeases(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := limiter.New()
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
	alg := limiter.New()
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
