package tokenbucket_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/tokenbucket"
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
		req  sdk.Request
		want int64
	}{
		{"single", map[string]any{"rate": 150, "per": "1h"}, sdk.Request{Subject: "shared", Hits: 1}, 150},
		{"best-effort", map[string]any{"rate": 10, "burst": 100}, sdk.Request{Subject: "shared-be", Hits: 3, BestEffort: true}, 100},
	} {
		t.Run("concurrent-instances/"+tc.name, func(t *testing.T) {
			got := env.Hammer(t, tokenbucket.New(), tc.raw, 3, 8, 20, tc.req)
			want := plugintest.Replay(newModel(plugintest.Configure(t, tokenbucket.New(), tc.raw)), env.Clock.Now(), 3*8*20, tc.req)
			if got != want || want != tc.want {
				t.Fatalf("granted %d, model %d, expected %d", got, want, tc.want)
			}
		})
	}
	t.Run("conform", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 2))
		steps := plugintest.RandomSteps(rng, 200, plugintest.StepOptions{Subjects: 4, MaxAdvance: 150 * time.Millisecond,
			MinHits: -3, MaxHits: 6, Dedup: 0.3, BestEffort: 0.3})
		env.Conform(t, tokenbucket.New(), map[string]any{"rate": 10, "burst": 4}, newModel, steps)
	})
}
