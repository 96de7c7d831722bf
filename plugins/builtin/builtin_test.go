package builtin_test

import (
	"fmt"
	"testing"

	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/sdk"
)

func TestEveryBuiltinIsListedOnceAndCanDecideLocally(t *testing.T) {
	configs := map[string]map[string]any{
		"fixedwindow": {"limit": 30, "window": "1h"},
		"rolling":     {"limit": 30, "window": "1h", "buckets": 6},
		"tokenbucket": {"rate": 30, "per": "1h", "burst": 30},
		"leaky":       {"capacity": 30, "rate": 30, "per": "1h"},
		"sortedset":   {"limit": 30, "window": "1h"},
		"concurrency": {"limit": 30, "ttl": "1h"},
	}
	seen := map[string]bool{}
	for _, alg := range builtin.All() {
		name := alg.Info().Name
		if seen[name] {
			t.Fatalf("%s listed twice", name)
		}
		seen[name] = true
		raw, ok := configs[name]
		if !ok {
			t.Fatalf("no test config for %s", name)
		}
		cfg, err := alg.Configure(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		la, ok := alg.(sdk.LocalAlgorithm)
		if !ok {
			t.Fatalf("%s cannot decide locally (on_error: local)", name)
		}
		l, err := la.NewLocal(cfg, 1.0/3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		granted := int64(0)
		for i := 0; i < 100; i++ {
			if d := l.Decide(1_790_000_000_000_000, sdk.Request{Subject: "s", Hits: 1, DedupID: fmt.Sprint(i)}); d.Allowed {
				granted += d.Granted
			}
		}
		if granted != 10 {
			t.Errorf("%s at a third of the quota admitted %d of 30, want 10", name, granted)
		}
		// At the whole quota, the limiter is the model `ruled test` decides with.
		m, err := la.NewLocal(cfg, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		granted = 0
		for i := 0; i < 100; i++ {
			if d := m.Decide(1_790_000_000_000_000, sdk.Request{Subject: "s", Hits: 1, DedupID: fmt.Sprint(i)}); d.Allowed {
				granted += d.Granted
			}
		}
		if granted != 30 {
			t.Errorf("%s's model admitted %d, want its whole quota of 30", name, granted)
		}
	}
	if len(seen) != 6 {
		t.Fatalf("%d built-ins, want 6", len(seen))
	}
}
