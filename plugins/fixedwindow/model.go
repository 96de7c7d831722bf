package fixedwindow

import (
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the in-process reference model of the algorithm: the decisions
// the script makes, computed in Go from an explicit clock. Tests compare the
// script against it; it is not safe for concurrent use.
type Model struct {
	cfg      Config
	subjects map[string]*modelState
}

type modelState struct {
	start, count int64
	dedup        map[string]int64
}

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model { return &Model{cfg: c, subjects: map[string]*modelState{}} }

// Decide answers r at time nowUS (microseconds).
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	window, offset, limit := m.cfg.Window.Microseconds(), m.cfg.Offset.Microseconds(), m.cfg.Limit
	start := nowUS - (nowUS-offset)%window
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	reset := start + window - nowUS
	if limit == 0 && r.Hits >= 0 {
		// A block: decided from the clock alone, state untouched; a peek
		// is denied too, as in an exhausted window.
		return sdk.Decision{Window: m.cfg.Window, Reset: us(reset), RetryAfter: us(reset)}
	}
	st := m.subjects[r.Subject]
	if st == nil || st.start != start {
		st = &modelState{start: start, dedup: map[string]int64{}}
		m.subjects[r.Subject] = st
	}
	d := sdk.Decision{Limit: limit, Window: m.cfg.Window, Reset: us(reset)}
	switch {
	case r.Hits == 0:
		d.Remaining = max(limit-st.count, 0)
		d.Allowed = d.Remaining > 0
	case r.Hits < 0:
		refund := -r.Hits
		if r.DedupID != "" {
			g, ok := st.dedup[r.DedupID]
			refund = min(refund, g) // 0 when unknown
			if ok {
				delete(st.dedup, r.DedupID)
			}
		}
		refund = min(refund, st.count)
		st.count -= refund
		d.Allowed, d.Granted, d.Remaining = true, -refund, max(limit-st.count, 0)
	default:
		if g, ok := st.dedup[r.DedupID]; ok && r.DedupID != "" {
			d.Allowed, d.Granted, d.Remaining = true, g, max(limit-st.count, 0)
			break
		}
		granted := int64(0)
		if st.count+r.Hits <= limit {
			granted = r.Hits
		} else if r.BestEffort && st.count < limit {
			granted = limit - st.count
		}
		if granted > 0 {
			st.count += granted
			if r.DedupID != "" {
				st.dedup[r.DedupID] = granted
			}
			d.Allowed, d.Granted = true, granted
		}
		d.Remaining = max(limit-st.count, 0)
	}
	if !d.Allowed {
		d.RetryAfter = d.Reset
	}
	return d
}
