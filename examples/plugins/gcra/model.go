package gcra

import (
	"math"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the reference model of the algorithm: the decisions the script
// makes, computed in Go from an explicit clock with the same integer
// arithmetic. Tests compare the script against it. It is not safe for
// concurrent use.
type Model struct {
	cfg      Config
	subjects map[string]tat
}

// tat is a stored theoretical arrival time: t whole µs plus f ticks of
// 1/rate µs, as the script's hash holds it.
type tat struct{ t, f int64 }

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model { return &Model{cfg: c, subjects: map[string]tat{}} }

// Decide answers r at time nowUS (microseconds).
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	rate, per, limit := m.cfg.Rate, m.cfg.Per.Microseconds(), m.cfg.Limit()
	tau := limit * per

	// debt is TAT − now in ticks, in [0, tau]. A TAT beyond the tolerance
	// (the config changed) moves back to now + tau and is stored so.
	var debt int64
	clamped := false
	if st, ok := m.subjects[r.Subject]; ok {
		if dt := st.t - nowUS; dt >= 0 {
			if dt > tau/rate {
				debt = tau + 1
			} else {
				debt = dt*rate + min(max(st.f, 0), rate-1)
			}
			if debt > tau {
				debt, clamped = tau, true
			}
		}
	}
	avail := (tau - debt) / per
	reset := func() int64 { return ceilDiv(debt, rate) }
	waitFor := func(n int64) int64 { return ceilDiv(n*per-(tau-debt), rate) } // n <= limit
	store := func() {
		if debt <= 0 {
			delete(m.subjects, r.Subject)
			return
		}
		m.subjects[r.Subject] = tat{t: nowUS + debt/rate, f: debt % rate}
	}
	if clamped {
		store()
	}
	answer := func(allowed bool, granted, retry int64) sdk.Decision {
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		return sdk.Decision{Allowed: allowed, Granted: granted, Limit: limit, Remaining: avail,
			Window: m.cfg.Window(), Reset: us(reset()), RetryAfter: us(retry)}
	}

	switch {
	case r.Hits == 0:
		if avail >= 1 {
			return answer(true, 0, 0)
		}
		return answer(false, 0, waitFor(1))

	case r.Hits < 0:
		n := -r.Hits
		if n < 0 { // -MinInt64
			n = math.MaxInt64
		}
		before := avail
		if n >= limit {
			debt = 0
		} else {
			debt = max(debt-n*per, 0)
		}
		avail = (tau - debt) / per
		store()
		return answer(true, before-avail, 0)
	}

	granted := int64(0)
	if r.Hits <= avail {
		granted = r.Hits
	} else if r.BestEffort && avail >= 1 {
		granted = avail
	}
	if granted > 0 {
		debt += granted * per
		avail -= granted
		store()
		return answer(true, granted, 0)
	}
	switch {
	case r.BestEffort:
		return answer(false, 0, waitFor(1))
	case r.Hits > limit:
		return answer(false, 0, reset())
	default:
		return answer(false, 0, waitFor(r.Hits))
	}
}
