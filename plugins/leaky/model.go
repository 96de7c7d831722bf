package leaky

import (
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the in-process form of the algorithm: the decisions the script
// makes, computed in Go from an explicit clock in microseconds. Tests compare
// the script against it, and it serves as an in-process limiter. It is not
// safe for concurrent use.
//
// As in the script, a bucket's level is scaled by per (one unit = per µs)
// and drains by rate per µs, so all arithmetic is on integers.
type Model struct {
	cfg      Config
	per      int64
	full     int64
	window   int64
	subjects map[string]*bucket
}

type bucket struct {
	t     int64 // time of the last change, µs
	level int64 // scaled level, 0 < level <= full
}

// NewModel returns a model for one rule's config, which must have passed
// Configure.
func NewModel(c Config) *Model {
	return &Model{
		cfg:      c,
		per:      c.PerUS(),
		full:     c.Capacity * c.PerUS(),
		window:   c.Window().Microseconds(),
		subjects: map[string]*bucket{},
	}
}

// level returns subject's bucket drained to nowUS (the stored time is kept
// when the clock went backwards).
func (m *Model) level(subject string, nowUS int64) (t, level int64) {
	b := m.subjects[subject]
	if b == nil {
		return nowUS, 0
	}
	t, level = b.t, b.level
	if nowUS > t {
		if nowUS-t >= ceilDiv(level, m.cfg.Rate) {
			level = 0
		} else {
			level -= (nowUS - t) * m.cfg.Rate
		}
		t = nowUS
	}
	return t, level
}

// Decide answers r at time nowUS (microseconds).
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	c := m.cfg
	t, level := m.level(r.Subject, nowUS)
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	remaining := func() int64 { return c.Capacity - ceilDiv(level, m.per) }
	reset := func() int64 { return ceilDiv(level, c.Rate) }
	wait := func(need int64) int64 {
		if need > c.Capacity {
			return m.window
		}
		return ceilDiv(level-(c.Capacity-need)*m.per, c.Rate)
	}
	store := func() {
		if level <= 0 {
			delete(m.subjects, r.Subject)
			return
		}
		m.subjects[r.Subject] = &bucket{t: t, level: level}
	}
	d := sdk.Decision{Limit: c.Capacity, Window: us(m.window)}
	switch {
	case r.Hits == 0:
		if remaining() >= 1 {
			d.Allowed = true
			if c.Mode == Shape {
				d.Delay = us(reset())
			}
		} else {
			d.RetryAfter = us(wait(1))
		}
	case r.Hits < 0:
		units := min(-r.Hits, ceilDiv(level, m.per))
		if units > 0 {
			level = max(level-units*m.per, 0)
			store()
		}
		d.Allowed, d.Granted = true, -units
	default:
		room := remaining()
		granted := int64(0)
		if r.Hits <= room {
			granted = r.Hits
		} else if r.BestEffort {
			granted = room
		}
		if granted > 0 {
			if c.Mode == Shape {
				d.Delay = us(reset())
			}
			level += granted * m.per
			store()
			d.Allowed, d.Granted = true, granted
		} else {
			need := r.Hits
			if r.BestEffort {
				need = 1
			}
			d.RetryAfter = us(wait(need))
		}
	}
	d.Remaining = remaining()
	d.Reset = us(reset())
	return d
}

// Prune forgets every subject whose bucket is empty at nowUS, as Redis
// forgets expired keys. Decisions do not change.
func (m *Model) Prune(nowUS int64) {
	for s := range m.subjects {
		if _, level := m.level(s, nowUS); level == 0 {
			delete(m.subjects, s)
		}
	}
}

// Len returns the number of subjects whose bucket the model holds.
func (m *Model) Len() int { return len(m.subjects) }
