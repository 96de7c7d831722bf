package sortedset_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// TestCluster runs the concurrency and conformance checks against a
// 3-master Redis Cluster, started once for all its subtests.
func TestCluster(t *testing.T) {
	env := plugintest.NewClusterEnv(t)
	for _, tc := range []struct {
		name string
		raw  map[string]any
		want int64
	}{
		{"one-rate", map[string]any{"limit": 150, "window": "1h"}, 150},
		{"two-rates-count-denied", map[string]any{"limit": 150, "window": "1h", "also": also(40, "1m"), "count_denied": true}, 40},
		{"min-gap", map[string]any{"limit": 150, "window": "1h", "min_gap": "1s"}, 1},
	} {
		t.Run("concurrent-instances/"+tc.name, func(t *testing.T) {
			req := sdk.Request{Subject: "shared-" + tc.name, Hits: 1}
			got := env.Hammer(t, sortedset.New(), tc.raw, 3, 8, 20, req)
			want := plugintest.Replay(newModel(plugintest.Configure(t, sortedset.New(), tc.raw)), env.Clock.Now(), 3*8*20, req)
			if got != want || want != tc.want {
				t.Fatalf("granted %d, model %d, want %d", got, want, tc.want)
			}
		})
	}
	t.Run("conform", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 2))
		steps := sameMicrosecond(rng, plugintest.RandomSteps(rng, 200, plugintest.StepOptions{Subjects: 4,
			MaxAdvance: 900 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}), 0.3)
		env.Conform(t, sortedset.New(), map[string]any{"limit": 3, "window": "1500001us", "count_denied": true,
			"also": also(12, "10s", 2, "100ms")}, newModel, steps)
	})
}
