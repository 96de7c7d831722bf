package leaky_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// TestCluster runs the concurrency and conformance checks against a
// 3-master Redis Cluster, started once for all its subtests.
func TestCluster(t *testing.T) {
	env := plugintest.NewClusterEnv(t)
	for _, mode := range []string{"police", "shape"} {
		t.Run("concurrent-instances/"+mode, func(t *testing.T) {
			raw := map[string]any{"capacity": 150, "rate": 1, "per": "1h", "mode": mode}
			req := sdk.Request{Subject: "shared-" + mode, Hits: 1}
			got := env.Hammer(t, leaky.New(), raw, 3, 8, 20, req)
			want := plugintest.Replay(newModel(plugintest.Configure(t, leaky.New(), raw)), env.Clock.Now(), 3*8*20, req)
			if got != want || want != 150 {
				t.Fatalf("granted %d, model %d, capacity 150", got, want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		raw  map[string]any
		opts plugintest.StepOptions
	}{
		{"police", map[string]any{"capacity": 7, "rate": 2, "per": "1500001us"},
			plugintest.StepOptions{Subjects: 4, MaxAdvance: 700 * time.Millisecond, MinHits: -2, MaxHits: 4, BestEffort: 0.3}},
		{"shape", map[string]any{"capacity": 6, "rate": 3, "per": "1000003us", "mode": "shape"},
			plugintest.StepOptions{Subjects: 4, MaxAdvance: 500 * time.Millisecond, MinHits: -1, MaxHits: 3, BestEffort: 0.3}},
	} {
		t.Run("conform/"+tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			env.Conform(t, leaky.New(), tc.raw, newModel, plugintest.RandomSteps(rng, 200, tc.opts))
		})
	}
}
