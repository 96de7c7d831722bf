package rolling_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/rolling"
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
		{"single", map[string]any{"limit": 150, "window": "1h", "buckets": 60}, sdk.Request{Subject: "shared", Hits: 1}, 150},
		{"best-effort", map[string]any{"limit": 100, "window": "1m", "buckets": 6}, sdk.Request{Subject: "shared-be", Hits: 3, BestEffort: true}, 100},
	} {
		t.Run("concurrent-instances/"+tc.name, func(t *testing.T) {
			got := env.Hammer(t, rolling.New(), tc.raw, 3, 8, 20, tc.req)
			want := plugintest.Replay(newModel(plugintest.Configure(t, rolling.New(), tc.raw)), env.Clock.Now(), 3*8*20, tc.req)
			if got != want || want != tc.want {
				t.Fatalf("granted %d, model %d, expected %d", got, want, tc.want)
			}
		})
	}
	t.Run("conform", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 2))
		steps := plugintest.RandomSteps(rng, 200, plugintest.StepOptions{Subjects: 4, MaxAdvance: 90 * time.Millisecond,
			MinHits: -3, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3})
		env.Conform(t, rolling.New(), map[string]any{"limit": 7, "window": "500ms", "buckets": 5}, newModel, steps)
	})
}
