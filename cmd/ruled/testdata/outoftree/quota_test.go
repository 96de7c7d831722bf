package quota_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"example.com/quota"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// model is what the script must decide, from an explicit clock.
type model struct {
	c      quota.Config
	starts map[string]int64
	counts map[string]int64
}

func (m *model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	window := m.c.Window.Microseconds()
	start := nowUS - nowUS%window
	if m.starts[r.Subject] != start {
		m.starts[r.Subject], m.counts[r.Subject] = start, 0
	}
	count, reset := m.counts[r.Subject], time.Duration(start+window-nowUS)*time.Microsecond
	d := sdk.Decision{Allowed: true, Limit: m.c.Limit, Remaining: max(m.c.Limit-count, 0), Window: m.c.Window, Reset: reset}
	switch {
	case r.Hits <= 0:
	case count+r.Hits > m.c.Limit:
		d.Allowed, d.RetryAfter = false, reset
	default:
		m.counts[r.Subject] += r.Hits
		d.Granted, d.Remaining = r.Hits, m.c.Limit-count-r.Hits
	}
	return d
}

// TestConforms runs random requests against a real redis-server (the kit
// starts one) and compares every decision with the model.
func TestConforms(t *testing.T) {
	env := plugintest.NewEnv(t)
	rng := rand.New(rand.NewPCG(1, 2))
	steps := plugintest.RandomSteps(rng, 500, plugintest.StepOptions{Subjects: 3, MaxAdvance: 300 * time.Millisecond, MinHits: 0, MaxHits: 4})
	env.Conform(t, quota.New(), map[string]any{"limit": 5, "window": "1s"}, func(c sdk.Config) sdk.LocalLimiter {
		return &model{c: c.(quota.Config), starts: map[string]int64{}, counts: map[string]int64{}}
	}, steps)
}
