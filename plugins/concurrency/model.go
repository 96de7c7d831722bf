package concurrency

import (
	"cmp"
	"slices"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// Model is the reference model of the plugin: the decisions the script
// makes, computed in Go from an explicit clock. Tests compare the script
// against it; it is not safe for concurrent use.
type Model struct {
	cfg      Config
	subjects map[string]*subjectState
}

// subjectState is one subject's leases and line.
type subjectState struct {
	leases map[string]int64 // lease id -> expiry (µs)
	line   map[string]int64 // waiting lease id -> arrival (µs)
	waits  map[string]int64 // waiting lease id -> deadline (µs)
}

// maxGonePerCall is how many waiters past their deadline one call takes
// out of the line, as the script does.
const maxGonePerCall = 64

// NewModel returns a model for one rule's config.
func NewModel(c Config) *Model { return &Model{cfg: c, subjects: map[string]*subjectState{}} }

// Decide answers r at time nowUS (microseconds). Requests the limiter
// refuses (see Plugin.Decide) get the zero Decision.
func (m *Model) Decide(nowUS int64, r sdk.Request) sdk.Decision {
	if checkRequest(&r) != nil {
		return sdk.Decision{}
	}
	s := m.subjects[r.Subject]
	if s == nil {
		s = &subjectState{leases: map[string]int64{}, line: map[string]int64{}, waits: map[string]int64{}}
		m.subjects[r.Subject] = s
	}
	for id, exp := range s.leases {
		if exp <= nowUS {
			delete(s.leases, id)
		}
	}
	s.trimLine(nowUS)
	limit, ttl := m.cfg.Limit, m.cfg.TTL.Microseconds()
	d := sdk.Decision{Allowed: true, Limit: limit, Window: m.cfg.TTL}
	count, waiting := int64(len(s.leases)), int64(len(s.line))
	_, held := s.leases[r.DedupID]
	switch {
	case r.Hits > 0:
		ahead, inline := s.rank(r.DedupID)
		if !inline {
			ahead = waiting
		}
		if held || ahead < limit-count {
			s.leases[r.DedupID] = nowUS + ttl
			delete(s.line, r.DedupID)
			delete(s.waits, r.DedupID)
			d.Granted = 1
			break
		}
		d.Allowed = false
		if r.Queue {
			if !inline {
				s.line[r.DedupID] = nowUS
			}
			s.waits[r.DedupID] = nowUS + LineTTL.Microseconds()
		}
	case r.Hits < 0:
		if held {
			delete(s.leases, r.DedupID)
			d.Granted = -1
		}
		delete(s.line, r.DedupID)
		delete(s.waits, r.DedupID)
	case waiting >= limit-count:
		d.Allowed = false
	}
	d.Remaining = max(limit-int64(len(s.leases)), 0)
	if len(s.leases) > 0 {
		first, last := int64(1<<62), int64(0)
		for _, exp := range s.leases {
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

// entry is a member of a sorted set and its score.
type entry struct {
	id    string
	score int64
}

// sorted is set's members in Redis's order: by score, then by id.
func sorted(set map[string]int64) []entry {
	es := make([]entry, 0, len(set))
	for id, score := range set {
		es = append(es, entry{id, score})
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(a.score, b.score), cmp.Compare(a.id, b.id)) })
	return es
}

// trimLine takes the waiters whose deadline has come out of the line, at
// most maxGonePerCall, the earliest deadlines first.
func (s *subjectState) trimLine(nowUS int64) {
	for i, e := range sorted(s.waits) {
		if i == maxGonePerCall || e.score > nowUS {
			return
		}
		delete(s.line, e.id)
		delete(s.waits, e.id)
	}
}

// rank is id's place in line (0 first), and whether it is in line.
func (s *subjectState) rank(id string) (int64, bool) {
	if _, ok := s.line[id]; !ok {
		return 0, false
	}
	for i, e := range sorted(s.line) {
		if e.id == id {
			return int64(i), true
		}
	}
	return 0, false
}
