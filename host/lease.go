package host

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/host/local"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// MaxLeaseAge bounds how long leased permits may be granted after they were
// taken from Redis (they also end with the quota's reset).
const MaxLeaseAge = time.Second

// maxLeases bounds the leases held; past it, expired ones are dropped.
const maxLeases = 100_000

const leaseShards = 64

// leases hold permits taken from Redis in bulk, per rule and subject, for
// rules with a lease size: most decisions are then made in-process.
type leases struct {
	seed   maphash.Seed
	shards [leaseShards]leaseShard
}

type leaseShard struct {
	mu sync.Mutex
	m  map[local.Key]*lease
}

// lease is one rule and subject's permits.
type lease struct {
	mu       sync.Mutex
	rule     *rules.Rule // the rule (of one loaded set) that filled it
	plugin   *plugin
	sel      rules.Selection
	permits  int64
	taken    time.Time    // when the permits were taken
	expires  time.Time    // when they may no longer be granted
	decision sdk.Decision // the fill's decision: limit, window, remaining
}

func newLeases() *leases {
	l := &leases{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = map[local.Key]*lease{}
	}
	return l
}

func (ls *leases) get(key local.Key) *lease {
	s := &ls.shards[key.Hash(ls.seed)%leaseShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.m[key]
	if l == nil {
		if len(s.m) >= maxLeases/leaseShards {
			now := time.Now()
			for k, old := range s.m {
				if old.mu.TryLock() {
					if old.permits == 0 || !now.Before(old.expires) {
						delete(s.m, k)
					}
					old.mu.Unlock()
				}
			}
		}
		l = &lease{}
		s.m[key] = l
	}
	return l
}

// drain takes every unexpired lease's permits out, for returning them.
func (ls *leases) drain() []*lease {
	var out []*lease
	now := time.Now()
	for i := range ls.shards {
		s := &ls.shards[i]
		s.mu.Lock()
		for k, l := range s.m {
			l.mu.Lock()
			if l.permits > 0 && now.Before(l.expires) {
				cp := &lease{rule: l.rule, plugin: l.plugin, sel: l.sel, permits: l.permits}
				out = append(out, cp)
			}
			l.permits = 0
			l.mu.Unlock()
			delete(s.m, k)
		}
		s.mu.Unlock()
	}
	return out
}

// leaseable reports whether a request may be served from a lease: it takes
// units, without the per-request options a lease cannot honour.
func leaseable(rule *rules.Rule, req *CheckRequest) bool {
	return rule.Lease > 0 && req.Hits > 0 && req.DedupID == "" && !req.BestEffort
}

// decideLeased grants req from the rule and subject's lease, refilling the
// lease from Redis (lease permits, best effort, in one call) when it cannot.
// The lease's lock is held across a refill, so that concurrent requests for
// one subject wait for one refill instead of each taking a lease.
func (e *Engine) decideLeased(ctx context.Context, b budget, p *plugin, key local.Key, sel rules.Selection, req *CheckRequest) (sdk.Decision, error) {
	rule := sel.Rule
	l := e.leases.get(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.rule == rule && now.Before(l.expires) && l.permits >= req.Hits {
		l.permits -= req.Hits
		return l.grant(req.Hits, now), nil
	}
	want := max(rule.Lease, req.Hits)
	fill := sdk.Request{Subject: sel.Subject, Hits: want, BestEffort: true, Attrs: req.Attrs}
	d, err := safeDecide(ctx, b, p, rule.Name, sel.Config, fill)
	if err != nil {
		return d, err
	}
	if !d.Allowed || d.Granted < req.Hits {
		// Not enough for this request: give back any partial grant and
		// decide the request alone, for an exact answer and retry-after.
		if d.Allowed && d.Granted > 0 {
			back := sdk.Request{Subject: sel.Subject, Hits: -d.Granted, Attrs: req.Attrs}
			if _, err := safeDecide(ctx, b, p, rule.Name, sel.Config, back); err != nil {
				e.log.Warn("returning leased permits failed", "rule", rule.Name, "err", err)
			}
		}
		l.permits = 0
		alone := sdk.Request{Subject: sel.Subject, Hits: req.Hits, Attrs: req.Attrs}
		return safeDecide(ctx, b, p, rule.Name, sel.Config, alone)
	}
	l.rule, l.sel, l.plugin = rule, sel, p
	l.permits = d.Granted - req.Hits
	l.taken = now
	age := MaxLeaseAge
	if d.Reset > 0 {
		age = min(age, d.Reset)
	}
	l.expires = now.Add(age)
	l.decision = d
	return l.grant(req.Hits, now), nil
}

// grant is the decision for hits granted from the lease at now.
func (l *lease) grant(hits int64, now time.Time) sdk.Decision {
	d := l.decision
	d.Allowed, d.Granted, d.RetryAfter, d.Delay = true, hits, 0, 0
	d.Remaining = l.decision.Remaining + l.permits
	d.Reset = max(0, l.decision.Reset-now.Sub(l.taken))
	return d
}

// ReturnLeases gives the unexpired permits of every lease back to Redis,
// for shutdown and reload. Permits past their age are not returned: their
// quota period has moved on.
func (e *Engine) ReturnLeases(ctx context.Context) {
	for _, l := range e.leases.drain() {
		back := sdk.Request{Subject: l.sel.Subject, Hits: -l.permits}
		if _, err := safeDecide(ctx, budget{}, l.plugin, l.rule.Name, l.sel.Config, back); err != nil {
			e.log.Warn("returning leased permits failed", "rule", l.rule.Name, "err", err)
		}
	}
}
