package concurrency

import (
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the reference model of the plugin: the decisions the script
// makes, computed in Go from an explicit clock. Tests compare the script
// against it; it is not safe for concurrent use.
type Model struct {
	cfg      Config
	subjects map[string]map[string]int64 // subject -> lease id -> expiry (µs)
}

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model { return &Model{cfg: c, subjects: map[string]map[string]int64{}} }

// Decide answers r at time nowUS (microseconds). Requests the limiter
// refuses (see Plugin.Decide) get the zero Decision.
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	if checkRequest(&r) != nil {
		return sdk.Decision{}
	}
	leases := m.subjects[r.Subject]
	if leases == nil {
		leases = map[string]int64{}
		m.subjects[r.Subject] = leases
	}
	for id, exp := range leases {
		if exp <= nowUS {
			delete(leases, id)
		}
	}
	limit, ttl := m.cfg.Limit, m.cfg.TTL.Microseconds()
	d := sdk.Decision{Allowed: true, Limit: limit, Window: m.cfg.TTL}
	_, held := leases[r.DedupID]
	switch {
	case r.Hits > 0 && (held || int64(len(leases)) < limit):
		leases[r.DedupID] = nowUS + ttl
		d.Granted = 1
	case r.Hits > 0:
		d.Allowed = false
	case r.Hits < 0 && held:
		delete(leases, r.DedupID)
		d.Granted = -1
	case r.Hits == 0 && int64(len(leases)) >= limit:
		d.Allowed = false
	}
	d.Remaining = max(limit-int64(len(leases)), 0)
	if len(leases) > 0 {
		first, last := int64(1<<62), int64(0)
		for _, exp := range leases {
			first, last = min(first, exp), max(last, exp)
		}
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		d.Reset = us(last - nowUS)
		if !d.Allowed {
			d.RetryAfter = us(first - nowUS)
		}
	}
	return d
}
