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

// ruleLeases hold permits taken from Redis in bulk, per rule and subject, for
// rules with a lease size: most decisions are then made in-process.
type ruleLeases struct {
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
	plugin   *plugin
	sel      rules.Selection // of the rule (of one loaded set) that filled it
	permits  int64
	taken    time.Time    // when the permits were taken
	used     time.Time    // when the lease last granted
	expires  time.Time    // when they may no longer be granted
	decision sdk.Decision // the fill's decision: limit, window, remaining
}

func newRuleLeases() *ruleLeases {
	l := &ruleLeases{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = map[local.Key]*lease{}
	}
	return l
}

// lookup returns key's lease, or nil when there is none.
func (ls *ruleLeases) lookup(key local.Key) *lease {
	s := &ls.shards[key.Hash(ls.seed)%leaseShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

// get returns key's lease, adding an empty one when there is none.
func (ls *ruleLeases) get(key local.Key, now time.Time) *lease {
	s := &ls.shards[key.Hash(ls.seed)%leaseShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.m[key]
	if l == nil {
		if len(s.m) >= maxLeases/leaseShards {
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
func (ls *ruleLeases) drain(now time.Time) []*lease {
	var out []*lease
	for i := range ls.shards {
		s := &ls.shards[i]
		s.mu.Lock()
		for k, l := range s.m {
			l.mu.Lock()
			if cp := l.takeOut(now, 0); cp != nil {
				out = append(out, cp)
			}
			l.mu.Unlock()
			delete(s.m, k)
		}
		s.mu.Unlock()
	}
	return out
}

// leaseable reports whether a request may be served from a lease: it takes
// units, without the per-request options a lease cannot honour.
func leaseable(rule *rules.Rule, req *sdk.Request) bool {
	return rule.Lease > 0 && req.Hits > 0 && req.DedupID == "" && !req.BestEffort
}

// decideLeased grants req from the rule and subject's lease, refilling the
// lease from Redis (lease permits, best effort, in one call) when it cannot.
// The lease's lock is held across a refill, so that concurrent requests for
// one subject wait for one refill instead of each taking a lease.
func (e *Engine) decideLeased(ctx context.Context, b budget, p *plugin, key local.Key, sel *rules.Selection, req *sdk.Request) (sdk.Decision, error) {
	rule := sel.Rule
	now := e.now()
	l := e.ruleLeases.get(key, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	valid := l.sel.Rule == rule && now.Before(l.expires)
	if valid && l.permits >= req.Hits {
		l.permits -= req.Hits
		l.used = now
		return l.grant(req.Hits, now), nil
	}
	// Top the lease up: the permits it still holds count towards the
	// request, so none are left behind in Redis.
	held := int64(0)
	if valid {
		held = l.permits
	}
	l.permits = 0
	want := max(rule.Lease, req.Hits) - held
	fill := sdk.Request{Subject: sel.Subject, Hits: want, BestEffort: true, Attrs: req.Attrs}
	d, err := safeDecide(ctx, b, p, rule.Name, sel.Config, fill)
	if err != nil {
		e.giveBack(ctx, b, p, *sel, held)
		return d, err
	}
	got := held
	if d.Allowed {
		got += max(d.Granted, 0)
	}
	if got < req.Hits {
		// Not enough for this request: give back what is held and decide
		// the request alone, for an exact answer and retry-after.
		e.giveBack(ctx, b, p, *sel, got)
		alone := sdk.Request{Subject: sel.Subject, Hits: req.Hits, Attrs: req.Attrs}
		return safeDecide(ctx, b, p, rule.Name, sel.Config, alone)
	}
	age := MaxLeaseAge
	if d.Reset > 0 {
		age = min(age, d.Reset)
	}
	if !valid || held == 0 || now.Add(age).Before(l.expires) {
		// Permits held from before keep their (earlier) end; a lease
		// that held none starts afresh.
		l.expires = now.Add(age)
	}
	l.sel, l.plugin = *sel, p
	l.permits = got - req.Hits
	l.taken, l.used = now, now
	l.decision = d
	return l.grant(req.Hits, now), nil
}

// giveBack returns n leased permits of sel's subject to Redis, where the
// plugin declares refunds (otherwise they are left to expire).
func (e *Engine) giveBack(ctx context.Context, b budget, p *plugin, sel rules.Selection, n int64) {
	if n <= 0 || !sel.Rule.Traits.Refunds {
		return
	}
	if _, err := e.refundUnits(ctx, b, p, sel, n, "", nil); err != nil {
		e.warnGated("returning leased permits failed", sel.Rule.Name, "err", err)
	}
}

// returnRuleLease gives key's unused leased permits back before a request the
// lease cannot serve (a peek, a refund, a retry with a dedup_id, a best
// effort request) goes to the plugin, so that the plugin sees the units
// this instance holds as unused, as it would without the lease.
func (e *Engine) returnRuleLease(ctx context.Context, b budget, key local.Key) {
	l := e.ruleLeases.lookup(key)
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.permits > 0 && l.sel.Rule != nil && e.now().Before(l.expires) {
		e.giveBack(ctx, b, l.plugin, l.sel, l.permits)
	}
	l.permits = 0
}

// grant is the decision for hits granted from the lease at now.
func (l *lease) grant(hits int64, now time.Time) sdk.Decision {
	d := l.decision
	d.Allowed, d.Granted, d.RetryAfter, d.Delay = true, hits, 0, 0
	d.Remaining = l.decision.Remaining + l.permits
	d.Reset = max(0, l.decision.Reset-now.Sub(l.taken))
	return d
}

// takeOut takes the lease's permits out (its lock held) and returns a
// copy of them to give back, when there are some and at least margin is
// left before the lease ends; otherwise it leaves them to be granted until
// then and returns nil.
func (l *lease) takeOut(now time.Time, margin time.Duration) *lease {
	if l.permits <= 0 || !now.Add(margin).Before(l.expires) {
		return nil
	}
	cp := &lease{plugin: l.plugin, sel: l.sel, permits: l.permits, expires: l.expires}
	l.permits = 0
	return cp
}

// returnRuleLeases gives the unexpired permits of every lease back to Redis,
// for shutdown and reload. Permits past their age are not returned: their
// quota period has moved on, and neither are those of a plugin that does not
// declare refunds.
func (e *Engine) returnRuleLeases(ctx context.Context) {
	for _, l := range e.ruleLeases.drain(e.now()) {
		e.giveBack(ctx, budget{}, l.plugin, l.sel, l.permits)
	}
}

// Idle leases: a lease unused for leaseIdle, or ending within
// leaseReturnBefore, gives its permits back (returnIdleRuleLeases).
const (
	leaseIdle         = 100 * time.Millisecond
	leaseReturnBefore = 300 * time.Millisecond
)

// returnIdleRuleLeases gives back, every leaseIdle/2 until ctx ends, the
// permits of the leases that went unused for leaseIdle or end within
// leaseReturnBefore, so that quota does not sit in this instance while
// others are denied (permits not returned stay counted until their quota
// period moves on). Run runs it.
func (e *Engine) returnIdleRuleLeases(ctx context.Context) {
	t := time.NewTicker(leaseIdle / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := e.now()
			for _, l := range e.ruleLeases.idle(now) {
				// The refund must be done ReturnSlack before the lease
				// ends (a budget is on the wall clock; e.now may not be).
				b := budget{deadline: time.Now().Add(l.expires.Sub(now) - ReturnSlack)}
				// Permits taken out are given back even when Run is
				// stopped meanwhile: the budget bounds the call.
				e.giveBack(context.WithoutCancel(ctx), b, l.plugin, l.sel, l.permits)
			}
		}
	}
}

// idle takes the permits out of the leases returnIdleRuleLeases gives back.
func (ls *ruleLeases) idle(now time.Time) []*lease {
	var out []*lease
	for i := range ls.shards {
		s := &ls.shards[i]
		s.mu.Lock()
		for _, l := range s.m {
			if !l.mu.TryLock() { // busy: not idle
				continue
			}
			if now.Sub(l.used) >= leaseIdle || l.expires.Sub(now) < leaseReturnBefore {
				// Not within 2 × ReturnSlack of the end: the refund
				// could reach the next window.
				if cp := l.takeOut(now, 2*ReturnSlack); cp != nil {
					out = append(out, cp)
				}
			}
			l.mu.Unlock()
		}
		s.mu.Unlock()
	}
	return out
}
