package fixedwindow_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// TestCluster runs the concurrency and conformance checks against a
// 3-master Redis Cluster, started once for all its subtests.
func TestCluster(t *testing.T) {
	env := plugintest.NewClusterEnv(t)
	t.Run("concurrent-instances", func(t *testing.T) {
		raw := map[string]any{"limit": 150, "window": "1h"}
		req := sdk.Request{Subject: "shared", Hits: 1}
		got := env.Hammer(t, fixedwindow.New(), raw, 3, 8, 20, req)
		want := plugintest.Replay(newModel(plugintest.Configure(t, fixedwindow.New(), raw)), env.Clock.Now(), 3*8*20, req)
		if got != want || want != 150 {
			t.Fatalf("granted %d, model %d, limit 150", got, want)
		}
	})
	t.Run("conform", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		steps := plugintest.RandomSteps(rng, 200, plugintest.StepOptions{Subjects: 4, MaxAdvance: 90 * time.Millisecond,
			MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3})
		env.Conform(t, fixedwindow.New(), map[string]any{"limit": 7, "window": "500ms", "offset": "1us"}, newModel, steps)
	})
}
