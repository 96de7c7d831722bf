package tokenbucket

import (
	"math"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the in-process form of the algorithm: the decisions the script
// makes, computed in Go from an explicit clock with the same exact integer
// arithmetic. Tests compare the script against it, and it serves as an
// in-process limiter. It is safe for concurrent use, and forgets subjects
// whose bucket has refilled (a forgotten subject has a full bucket).
type Model struct {
	cfg Config

	mu       sync.Mutex
	subjects map[string]*bucket
	ops      int // decisions since the last sweep
}

type bucket struct {
	level  int64 // permits × unit
	t      int64 // µs the level was computed at
	unit   int64 // per in µs when the level was stored
	fullAt int64 // µs from which the bucket is full under the config it was stored with
}

// sweepEvery is the least number of decisions between two sweeps of full
// buckets; a sweep costs one pass over all subjects, so it runs at most
// once per len(subjects) decisions as well.
const sweepEvery = 1024

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model { return &Model{cfg: c, subjects: map[string]*bucket{}} }

// Subjects returns how many subjects the model holds state for.
func (m *Model) Subjects() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subjects)
}

// Decide answers r at time nowUS (microseconds) under the model's config.
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision { return m.DecideWith(m.cfg, nowUS, r) }

// DecideWith answers r at time nowUS under c instead of the model's own
// config, as the script does when a reloaded or dynamic rule passes a new
// rate, per or burst: the stored level is clamped to the new burst and
// converted to the new per, keeping whole permits.
func (m *Model) DecideWith(c Config, nowUS int64, r sdk.Request) sdk.Decision {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(nowUS)

	rate, unit, burst := c.Rate, c.Per.Microseconds(), c.Burst
	capacity := burst * unit
	level, t := capacity, nowUS
	if b := m.subjects[r.Subject]; b != nil {
		l0 := b.level
		if b.unit != unit {
			l0 = min(max(l0, 0)/b.unit, burst) * unit
		}
		level, t = min(max(l0, 0), capacity), b.t
		if nowUS > t {
			if deficit := capacity - level; deficit > 0 {
				if elapsed := nowUS - t; elapsed >= ceilDiv(deficit, rate) {
					level = capacity
				} else {
					level += elapsed * rate
				}
			}
			t = nowUS
		}
	}
	avail := level / unit
	waitFor := func(n int64) int64 { // n <= burst
		if need := n*unit - level; need > 0 {
			return ceilDiv(need, rate)
		}
		return 0
	}
	store := func() {
		if level >= capacity {
			delete(m.subjects, r.Subject) // full: the same as no state, under any later config too
			return
		}
		m.subjects[r.Subject] = &bucket{level: level, t: t, unit: unit, fullAt: t + ceilDiv(capacity-level, rate)}
	}
	answer := func(allowed bool, granted, retry int64) sdk.Decision {
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		return sdk.Decision{Allowed: allowed, Granted: granted, Limit: burst, Remaining: avail,
			Window: c.Window(), Reset: us(ceilDiv(capacity-level, rate)), RetryAfter: us(retry)}
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
		n = min(n, burst)
		before := avail
		if n*unit >= capacity-level {
			level = capacity
		} else {
			level += n * unit
		}
		avail = level / unit
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
		level -= granted * unit
		avail -= granted
		store()
		return answer(true, granted, 0)
	}
	switch {
	case r.BestEffort:
		return answer(false, 0, waitFor(1))
	case r.Hits > burst:
		return answer(false, 0, ceilDiv(capacity-level, rate))
	default:
		return answer(false, 0, waitFor(r.Hits))
	}
}

func (m *Model) sweep(nowUS int64) {
	m.ops++
	if m.ops < max(sweepEvery, len(m.subjects)) {
		return
	}
	m.ops = 0
	for subject, b := range m.subjects {
		if b.fullAt <= nowUS {
			delete(m.subjects, subject)
		}
	}
}

// ceilDiv is a / b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b < a {
		q++
	}
	return q
}
