package rolling

import (
	"math"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the in-process form of the algorithm: the decisions the script
// makes, computed in Go from an explicit clock. Tests compare the script
// against it, and it serves as an in-process limiter. It is safe for
// concurrent use, and forgets subjects whose hits have all left the window.
type Model struct {
	cfg    Config
	window int64 // µs
	bucket int64 // µs

	mu       sync.Mutex
	subjects map[string]*subjectState
	ops      int // decisions since the last sweep
}

type count struct{ start, n int64 }

type subjectState struct {
	live   []count          // buckets still in the window with n > 0, ascending start
	oldest int64            // no bucket starts before it (meaningful while live is not empty)
	dedup  map[string]count // dedup id → bucket it was counted in and hits granted
}

// sweepEvery is the least number of decisions between two sweeps of idle
// subjects; a sweep costs one pass over all subjects, so it runs at most
// once per len(subjects) decisions as well.
const sweepEvery = 1024

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model {
	return &Model{cfg: c, window: c.Window.Microseconds(), bucket: c.BucketUS(), subjects: map[string]*subjectState{}}
}

// Subjects returns how many subjects the model holds state for.
func (m *Model) Subjects() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subjects)
}

// expiry is the first instant a bucket starting at s no longer counts.
func (m *Model) expiry(s int64) int64 {
	e := s + m.window
	if r := e % m.bucket; r != 0 {
		e += m.bucket - r
	}
	return e
}

// prune drops the buckets that have left the window.
func (m *Model) prune(st *subjectState, nowUS int64) {
	live := st.live[:0]
	for _, b := range st.live {
		if b.n > 0 && m.expiry(b.start) > nowUS {
			live = append(live, b)
		}
	}
	st.live = live
}

func (m *Model) sweep(nowUS int64) {
	m.ops++
	if m.ops < max(sweepEvery, len(m.subjects)) {
		return
	}
	m.ops = 0
	for subject, st := range m.subjects {
		m.prune(st, nowUS)
		for id, g := range st.dedup {
			if m.expiry(g.start) <= nowUS {
				delete(st.dedup, id)
			}
		}
		if len(st.live) == 0 && len(st.dedup) == 0 {
			delete(m.subjects, subject)
		}
	}
}

// Decide answers r at time nowUS (microseconds).
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(nowUS)
	if m.cfg.Limit == 0 && r.Hits >= 0 {
		return m.block(nowUS) // no subject state for a block
	}
	st := m.subjects[r.Subject]
	if st == nil {
		st = &subjectState{dedup: map[string]count{}}
		m.subjects[r.Subject] = st
	}
	d := m.decide(st, nowUS, r)
	if len(st.live) == 0 && len(st.dedup) == 0 {
		delete(m.subjects, r.Subject)
	}
	return d
}

// block is a block's decision at now: from the clock alone, state
// untouched; a peek is denied too, as in an exhausted window. Its reset
// is when a hit counted now would leave the window.
func (m *Model) block(now int64) sdk.Decision {
	reset := time.Duration(m.expiry(now-now%m.bucket)-now) * time.Microsecond
	return sdk.Decision{Window: m.cfg.Window, Reset: reset, RetryAfter: reset}
}

func (m *Model) decide(st *subjectState, now int64, r sdk.Request) sdk.Decision {
	limit := m.cfg.Limit
	cur := now - now%m.bucket
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	low := cur - m.window + m.bucket // the oldest bucket start still in the window
	m.prune(st, now)
	if len(st.live) == 0 {
		st.oldest = low
	} else {
		st.oldest = max(st.oldest, low)
	}
	total := int64(0)
	for _, b := range st.live {
		total += b.n
	}
	reset := func() int64 {
		if len(st.live) == 0 {
			return 0
		}
		return m.expiry(st.live[len(st.live)-1].start) - now
	}
	waitFor := func(need int64) int64 {
		freed := int64(0)
		for _, b := range st.live {
			if freed += b.n; freed >= need {
				return m.expiry(b.start) - now
			}
		}
		return reset()
	}
	answer := func(allowed bool, granted, retry int64) sdk.Decision {
		d := sdk.Decision{Allowed: allowed, Granted: granted, Limit: limit, Remaining: max(limit-total, 0),
			Window: m.cfg.Window, Reset: us(reset()), RetryAfter: us(retry)}
		if limit == 0 { // a refund under a block
			d.Reset = m.block(now).Reset
		}
		return d
	}
	recorded := func() (count, bool) {
		if r.DedupID == "" {
			return count{}, false
		}
		g, ok := st.dedup[r.DedupID]
		return g, ok && m.expiry(g.start) > now
	}

	switch {
	case r.Hits == 0:
		if total < limit {
			return answer(true, 0, 0)
		}
		return answer(false, 0, waitFor(total+1-limit))

	case r.Hits < 0:
		refund := -r.Hits
		if refund < 0 { // -MinInt64
			refund = math.MaxInt64
		}
		if r.DedupID != "" {
			// Only what this id was granted, once, from the bucket it was counted in.
			g, ok := recorded()
			want := refund
			refund = 0
			if ok {
				delete(st.dedup, r.DedupID)
				for i := range st.live {
					if st.live[i].start == g.start {
						refund = min(want, g.n, st.live[i].n)
						st.live[i].n -= refund
						break
					}
				}
			}
		} else {
			// Unattributed refunds come off the newest buckets first.
			refund = min(refund, total)
			left := refund
			for i := len(st.live) - 1; i >= 0 && left > 0; i-- {
				n := min(left, st.live[i].n)
				st.live[i].n -= n
				left -= n
			}
		}
		total -= refund
		m.prune(st, now) // drops emptied buckets
		return answer(true, -refund, 0)
	}

	if g, ok := recorded(); ok {
		return answer(true, g.n, 0)
	}
	granted := int64(0)
	if r.Hits <= limit-total {
		granted = r.Hits
	} else if r.BestEffort && total < limit {
		granted = limit - total
	}
	if granted > 0 {
		// Counted in the current bucket; if time went back before the oldest
		// tracked bucket, in that one (counted a little longer, never less).
		target := max(cur, st.oldest)
		m.add(st, target, granted)
		total += granted
		if r.DedupID != "" {
			st.dedup[r.DedupID] = count{start: target, n: granted}
		}
		return answer(true, granted, 0)
	}
	switch {
	case r.BestEffort:
		return answer(false, 0, waitFor(total+1-limit))
	case r.Hits > limit:
		return answer(false, 0, reset())
	default:
		return answer(false, 0, waitFor(total+r.Hits-limit))
	}
}

// add counts n hits in the bucket starting at cur, keeping live in order.
func (m *Model) add(st *subjectState, cur, n int64) {
	i := len(st.live)
	for i > 0 && st.live[i-1].start >= cur {
		if st.live[i-1].start == cur {
			st.live[i-1].n += n
			return
		}
		i--
	}
	st.live = append(st.live, count{})
	copy(st.live[i+1:], st.live[i:])
	st.live[i] = count{start: cur, n: n}
}
