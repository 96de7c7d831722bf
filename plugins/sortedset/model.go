package sortedset

import (
	"slices"
	"sort"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the in-process form of the algorithm: the decisions the script
// makes, computed in Go from an explicit clock in microseconds. Tests compare
// the script against it, and it serves as an in-process limiter. It is not
// safe for concurrent use.
type Model struct {
	limits   []int64
	windows  []int64 // µs
	gap      int64   // µs
	counting bool    // count denied actions
	maxLimit int64
	minLimit int64
	maxWin   int64
	block    time.Duration // the longest window of the rates of limit 0; 0: none blocks
	subjects map[string]*subjectLog
}

type subjectLog struct {
	times   []int64 // entry times in µs, ascending, at most maxLimit
	last    int64   // time of the last admitted action, when hasLast
	hasLast bool
}

// NewModel returns a model for one rule's config, which must have passed
// Configure.
func NewModel(c Config) *Model {
	m := &Model{
		gap:      c.MinGap.Microseconds(),
		counting: c.CountDenied,
		minLimit: c.Limit,
		subjects: map[string]*subjectLog{},
	}
	for _, r := range c.Rates() {
		m.limits = append(m.limits, r.Limit)
		m.windows = append(m.windows, r.Window.Microseconds())
		m.maxLimit = max(m.maxLimit, r.Limit)
		m.minLimit = min(m.minLimit, r.Limit)
		m.maxWin = max(m.maxWin, r.Window.Microseconds())
	}
	m.block = c.blockWindow()
	return m
}

// trim drops entries outside every window at nowUS.
func (m *Model) trim(st *subjectLog, nowUS int64) {
	k := sort.Search(len(st.times), func(i int) bool { return st.times[i] > nowUS-m.maxWin })
	if k > 0 {
		st.times = append(st.times[:0], st.times[k:]...)
	}
}

// count is the number of entries newer than nowUS - window.
func count(st *subjectLog, nowUS, window int64) int64 {
	k := sort.Search(len(st.times), func(i int) bool { return st.times[i] > nowUS-window })
	return int64(len(st.times) - k)
}

// Decide answers r at time nowUS (microseconds).
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	if m.block > 0 && r.Hits >= 0 {
		return blockDecision(m.block) // the log is not read, trimmed or written
	}
	st := m.subjects[r.Subject]
	if st == nil {
		st = &subjectLog{}
	}
	m.trim(st, nowUS)
	gapWait := func() int64 {
		if !st.hasLast {
			return 0
		}
		return max(0, st.last+m.gap-nowUS)
	}
	counts := make([]int64, len(m.limits))
	for i, w := range m.windows {
		counts[i] = count(st, nowUS, w)
	}
	var granted int64
	allowed := false
	switch {
	case r.Hits < 0:
		n := min(-r.Hits, int64(len(st.times)))
		st.times = st.times[:int64(len(st.times))-n]
		for i := range counts {
			counts[i] -= min(n, counts[i])
		}
		granted, allowed = -n, true
	case r.Hits == 0:
		allowed = gapWait() == 0
		for i, c := range counts {
			if c+1 > m.limits[i] {
				allowed = false
			}
		}
	default:
		room := r.Hits
		if gapWait() > 0 {
			room = 0
		}
		for i, c := range counts {
			room = min(room, m.limits[i]-c)
		}
		if room >= r.Hits {
			granted = r.Hits
		} else if r.BestEffort && room > 0 {
			granted = room
		}
		allowed = granted > 0
		logged := granted
		if !allowed && m.counting {
			logged = min(r.Hits, m.maxLimit)
		}
		if logged > 0 {
			at, _ := slices.BinarySearch(st.times, nowUS+1) // after entries at nowUS
			st.times = slices.Insert(st.times, at, slices.Repeat([]int64{nowUS}, int(logged))...)
			if extra := int64(len(st.times)) - m.maxLimit; extra > 0 {
				st.times = append(st.times[:0], st.times[extra:]...)
			}
			for i := range counts {
				counts[i] = min(counts[i]+logged, m.maxLimit)
			}
			if allowed && (!st.hasLast || nowUS > st.last) {
				st.last, st.hasLast = nowUS, true
			}
		}
	}
	if len(st.times) > 0 || st.hasLast {
		m.subjects[r.Subject] = st
	}

	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	idx, rem, reset := 0, int64(0), int64(0)
	for i, c := range counts {
		ri := max(0, m.limits[i]-c)
		ti := int64(0)
		if c > 0 {
			ti = st.times[len(st.times)-1] + m.windows[i] - nowUS
		}
		if i == 0 || ri < rem || (ri == rem && ti > reset) {
			idx, rem, reset = i, ri, ti
		}
	}
	d := sdk.Decision{
		Allowed:   allowed,
		Granted:   granted,
		Limit:     m.limits[idx],
		Remaining: rem,
		Window:    us(m.windows[idx]),
		Reset:     us(reset),
	}
	if m.block > 0 { // a refund under a block reports the block
		d.Limit, d.Remaining, d.Window, d.Reset = 0, 0, m.block, m.block
	}
	if !allowed {
		need := int64(1)
		if r.Hits > 0 && !r.BestEffort {
			need = r.Hits
		}
		var retry int64
		if need > m.minLimit {
			for i, l := range m.limits {
				if l < need {
					retry = max(retry, m.windows[i])
				}
			}
		} else {
			retry = gapWait()
			for i, c := range counts {
				if c+need > m.limits[i] {
					kth := st.times[int64(len(st.times))-(m.limits[i]-need+1)]
					retry = max(retry, kth+m.windows[i]-nowUS)
				}
			}
		}
		d.RetryAfter = us(retry)
	}
	return d
}

// Prune forgets every subject whose log is empty and whose gap has passed
// at nowUS, as Redis forgets expired keys. Decisions do not change.
func (m *Model) Prune(nowUS int64) {
	for s, st := range m.subjects {
		m.trim(st, nowUS)
		if len(st.times) == 0 && (!st.hasLast || st.last+m.gap <= nowUS) {
			delete(m.subjects, s)
		}
	}
}

// Len returns the number of subjects the model holds.
func (m *Model) Len() int { return len(m.subjects) }
