package fixedwindow

import (
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the in-process reference model of the algorithm: the decisions
// the script makes, computed in Go from an explicit clock. Tests compare the
// script against it, and on_error: local decides with it (NewLocal); it is
// not safe for concurrent use.
type Model struct {
	cfg      Config
	subjects map[string]*modelState
	last     [2]int64 // the calendar period found last, [start, end) in µs
}

type modelState struct {
	start, count int64
	dedup        map[string]int64
}

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model { return &Model{cfg: c, subjects: map[string]*modelState{}} }

// period returns the window that holds nowUS, [start, end) in µs: the
// fixed window, or the calendar period computed in Go with the zone.
func (m *Model) period(nowUS int64) (int64, int64) {
	if m.cfg.Calendar == "" {
		window, offset := m.cfg.Window.Microseconds(), m.cfg.Offset.Microseconds()
		start := nowUS - (nowUS-offset)%window
		return start, start + window
	}
	if m.last[0] > nowUS || nowUS >= m.last[1] {
		p := m.cfg.calendar().periodsAt(nowUS)
		m.last = [2]int64{p.us[0], p.us[1]}
	}
	return m.last[0], m.last[1]
}

// Decide answers r at time nowUS (microseconds).
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	limit := m.cfg.Limit
	start, end := m.period(nowUS)
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	reset, window := end-nowUS, us(end-start)
	if limit == 0 && r.Hits >= 0 {
		// A block: decided from the clock alone, state untouched; a peek
		// is denied too, as in an exhausted window.
		return sdk.Decision{Window: window, Reset: us(reset), RetryAfter: us(reset)}
	}
	st := m.subjects[r.Subject]
	if st == nil || st.start != start {
		st = &modelState{start: start, dedup: map[string]int64{}}
		m.subjects[r.Subject] = st
	}
	d := sdk.Decision{Limit: limit, Window: window, Reset: us(reset)}
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
