package host

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/rules"
)

// ClientLeases lend permits to clients that grant them in-process (the Go
// client, /v1/lease): Take decides them through the rule loop, Return
// credits unused ones back once per lease fleet-wide, and Sign and Verify
// authenticate the lease strings with the fleet's key. Engine.ClientLeases
// returns them. (Rule leases, a rule's lease: N, are the engine's own
// shortcut: ruleleases.go.)
type ClientLeases struct {
	e   *Engine
	key leaseKey      // the fleet's lease key, cached
	obs LeaseObserver // the engine's Observer, when it listens to client leases
}

// ClientLeases returns the engine's ClientLeases.
func (e *Engine) ClientLeases() *ClientLeases { return &e.clientLeases }

// ClientLeaseTTL bounds how long a client may grant leased permits after it
// sent the request that took them. Leases also end with the earliest reset
// of the rules they were taken from.
const ClientLeaseTTL = MaxLeaseAge

// MaxClientLease bounds the permits one client lease may ask for.
const MaxClientLease = 1_000_000

// LeaseRequest asks for permits a client grants in-process to requests like
// this one (the same attributes, one hit each).
type LeaseRequest struct {
	Request Request
	Attrs   map[string]string
	Permits int64 // wanted, 1 to MaxClientLease
	// LimitShare, above 0, lets rules without a lease size (no lease: N)
	// lease too, each at most this share of the limit its plugin reports
	// (rounded up, at least 1): the RLQS server's sizing for rules written
	// for per-request checks, such as those translated from envoy
	// ratelimit. 0: such rules cannot lease. At most 1.
	LimitShare float64
}

// LeaseHold is what one rule counted for a client lease: Taken units of
// Subject, the first Taken of the lease's permits the client uses.
type LeaseHold struct {
	Rule    string
	Subject string
	Taken   int64
}

// ClientLease is the answer to a LeaseRequest.
type ClientLease struct {
	// ID names the lease, at random (NewLeaseID), when it holds units: a
	// return names it, and the lease is credited at most once
	// (ClientLeases.Return).
	ID string
	// Leasable is false when some rule matching the request does not allow
	// leases (no lease: N, or a plugin that cannot lease): the client asks
	// per request instead. Reason says which rule and why.
	Leasable bool
	Reason   string
	// OnError, when Leasable is false, is the on_error policy of the rule
	// that cannot lease; with Take's error, the strictest policy of the
	// rules that could not be asked. For callers that must decide without
	// asking (the RLQS server).
	OnError rules.OnError
	// Permits is how many requests the client may grant, one hit each,
	// until TTL after it sent the request: at most the permits asked for,
	// and no more than each rule's lease size. 0 means the rules deny now.
	Permits int64
	TTL     time.Duration
	// MaxPermits is the most one lease of these rules gives: the least
	// lease size of the enforcing rules (MaxClientLease when none matched).
	// A rule sized by LimitShare has its size known once it granted.
	MaxPermits int64
	// RetryAfter, when Permits is 0, is the denying rule's retry-after, and
	// DenyFirm says whether the client may deny until then without asking
	// (the rule's deny cache is on: its plugin declares firm denials).
	RetryAfter time.Duration
	DenyFirm   bool
	// Results are the matching rules' decisions for the permits (Granted
	// is what each counted), in rule order, for the client's answers.
	Results []RuleResult
}

// Holds are what the rules counted for the lease: what to refund when the
// client returns unused permits.
func (l *ClientLease) Holds() []LeaseHold {
	var hs []LeaseHold
	for _, rr := range l.Results {
		if rr.Granted > 0 {
			hs = append(hs, LeaseHold{Rule: rr.Rule, Subject: rr.Subject, Taken: rr.Granted})
		}
	}
	return hs
}

// unused is what of the hold goes back when the client used the first
// used permits of its lease.
func (h LeaseHold) unused(used int64) int64 { return h.Taken - min(h.Taken, used) }

// LeaseReturn gives back permits of a client lease that were not used.
type LeaseReturn struct {
	Request Request // of the LeaseRequest
	Attrs   map[string]string
	Permits int64 // the lease's
	Unused  int64 // 0 to Permits
	Holds   []LeaseHold
	// LimitShare is the LeaseRequest's: holds of rules without a lease
	// size go back only when it is above 0.
	LimitShare float64
	// ID is the lease's ClientLease.ID: of all the returns naming it, on
	// every instance sharing the Redis, only the first that gives units
	// back is credited.
	ID string
	// Deadline is when the lease ends: its request's start plus its TTL,
	// on the clock of the instance that gave it.
	Deadline time.Time
}

// ReturnSlack is how long before its lease's deadline a return's Redis
// calls must be done; a return is taken only while twice that is left.
const ReturnSlack = 50 * time.Millisecond

// ErrLateReturn is the error of a return that came within 2 × ReturnSlack
// of its lease's deadline: its units are left to their window, since by
// the time Redis ran the refund the window could have moved on, and the
// units would be credited to the next one.
var ErrLateReturn = errors.New("lease return: too close to the lease's deadline")

// LeaseEvent is what happened to client-leased units.
type LeaseEvent string

// LeaseEvents.
const (
	LeaseTaken    LeaseEvent = "taken"    // counted for a client lease
	LeaseReturned LeaseEvent = "returned" // given back unused
	LeaseLate     LeaseEvent = "late"     // returned too late, left counted
)

// LeaseRuleUnloaded is the rule a LeaseObserver is told of for units of a
// rule that is not loaded (removed by a reload since the lease): metric
// labels name only loaded rules, so their number is bounded by the rules.
const LeaseRuleUnloaded = "_unloaded"

// LeaseObserver, when the engine's Observer implements it too, is told of
// client-leased units, per rule.
type LeaseObserver interface {
	LeaseUnits(rule string, event LeaseEvent, units int64)
}

// observeLease tells the observer of units of rule, if it listens.
func (cl *ClientLeases) observeLease(rule string, event LeaseEvent, units int64) {
	if cl.obs != nil && units > 0 {
		cl.obs.LeaseUnits(rule, event, units)
	}
}

// Take takes permits for a client to grant in-process, through the rule
// loop (leaseMode): from every rule the request matches, best effort, the
// same number from each (what a rule took beyond the least any enforcing
// rule granted goes back at once). It never degrades: when a plugin fails,
// it gives back what it took and returns the error, and the client asks
// per request, where the rules' on_error policies apply (the lease
// returned with the error says their strictest, as OnError). The fleet's
// lease key is read before anything is taken: a lease that could not be
// signed takes nothing.
func (cl *ClientLeases) Take(ctx context.Context, req *LeaseRequest) (ClientLease, error) {
	if req.Permits < 1 || req.Permits > MaxClientLease {
		return ClientLease{}, fmt.Errorf("lease: permits must be between 1 and %d, got %d", MaxClientLease, req.Permits)
	}
	if err := CheckLimitShare(req.LimitShare); err != nil {
		return ClientLease{}, fmt.Errorf("lease: limit share %v: %w", req.LimitShare, err)
	}
	b := newBudget(ctx, time.Now(), cl.e.timeout)
	g := cl.e.gen.Load()
	in := rules.Input{Request: req.Request, Attrs: req.Attrs}
	sels := g.set.AppendMatch(nil, &in)
	// An exempt rule admits and counts nothing: it does not bound a lease.
	sels = slices.DeleteFunc(sels, func(sel rules.Selection) bool { return sel.Rule.Exempt && sel.Err == nil })
	out := ClientLease{Leasable: true, TTL: ClientLeaseTTL, MaxPermits: MaxClientLease}
	for _, sel := range sels {
		if why := notLeasable(sel, req.LimitShare); why != "" {
			return ClientLease{Reason: why, OnError: sel.Rule.OnError}, nil
		}
		if !sel.Rule.Shadow && sel.Rule.Lease > 0 {
			out.MaxPermits = min(out.MaxPermits, sel.Rule.Lease)
		}
	}
	failed := ClientLease{OnError: strictestOnError(sels)}
	if _, err := cl.currentLeaseKey(ctx); err != nil {
		return failed, fmt.Errorf("lease: %w", err)
	}
	ask := CheckRequest{Request: req.Request, Attrs: req.Attrs, Hits: min(req.Permits, out.MaxPermits), BestEffort: true}
	var res Result
	permits, err := decideRules(ctx, g, b, leaseMode, sels, &ask, &res)
	if err != nil {
		return failed, fmt.Errorf("lease: %w", err)
	}
	if sized := limitShareSize(sels, res.Results, req.LimitShare); sized < out.MaxPermits {
		out.MaxPermits = sized
		if permits > sized {
			// Taken before the size was known: the rest goes back.
			refundRules(ctx, g, b, sels, res.Results, sized, nil, req.Attrs)
			permits = sized
		}
	}
	out.Permits, out.Results = permits, res.Results
	if permits == 0 && len(res.Results) > 0 {
		// The last rule decided is the one that granted nothing.
		out.RetryAfter, out.DenyFirm = res.RetryAfter, sels[len(res.Results)-1].Rule.DenyCache
	}
	for _, rr := range out.Results {
		if rr.Reset > 0 {
			out.TTL = min(out.TTL, rr.Reset)
		}
		cl.observeLease(rr.Rule, LeaseTaken, rr.Granted)
	}
	if out.Permits == 0 {
		out.TTL = 0
	}
	if len(out.Holds()) > 0 {
		out.ID = NewLeaseID()
	}
	return out, nil
}

// strictestOnError is the strictest failure policy of the enforcing rules
// of sels: deny over local over allow (the default, when none enforces).
func strictestOnError(sels []rules.Selection) rules.OnError {
	rank := func(o rules.OnError) int {
		switch o {
		case rules.OnErrorDeny:
			return 2
		case rules.OnErrorLocal:
			return 1
		}
		return 0
	}
	out := rules.OnErrorAllow
	for _, sel := range sels {
		if !sel.Rule.Shadow && rank(sel.Rule.OnError) > rank(out) {
			out = sel.Rule.OnError
		}
	}
	return out
}

// ErrLimitShare is CheckLimitShare's error.
var ErrLimitShare = errors.New("want a share from 0 to 1")

// CheckLimitShare checks a LimitShare (and the settings that give one):
// a number from 0 to 1.
func CheckLimitShare(v float64) error {
	if !(v >= 0 && v <= 1) {
		return ErrLimitShare
	}
	return nil
}

// limitShareSize is the least lease size of the enforcing rules without
// lease: N among those decided (results, in the order of sels), share of
// the limit each reported, rounded up and at least 1; MaxClientLease when
// there are none (or share is 0).
func limitShareSize(sels []rules.Selection, results []RuleResult, share float64) int64 {
	size := int64(MaxClientLease)
	if share <= 0 {
		return size
	}
	for i, rr := range results {
		if rule := sels[i].Rule; rule.Lease <= 0 && !rule.Shadow {
			size = min(size, max(int64(math.Ceil(share*float64(max(rr.Limit, 0)))), 1))
		}
	}
	return size
}

// notLeasable says why sel's rule cannot lease to clients, or "": a rule
// without a lease size leases only with a limit share above 0.
func notLeasable(sel rules.Selection, limitShare float64) string {
	rule := sel.Rule
	switch {
	case sel.Err != nil:
		return fmt.Sprintf("rule %s: %v", rule.Name, sel.Err)
	case rule.Lease <= 0 && limitShare <= 0:
		return fmt.Sprintf("rule %s has no lease size (lease: N)", rule.Name)
	case !rule.Traits.Leasable:
		return fmt.Sprintf("rule %s: plugin %s does not declare leasable grants", rule.Name, rule.Plugin)
	}
	return ""
}

// LeaseReturnResult is what one return of ClientLeases.Return gave back.
type LeaseReturnResult struct {
	Returned int64 // units, summed over the rules
	Err      error // ErrLateReturn, ErrLeaseReturned, or why a refund failed
}

// Return gives back the units clients did not use of leases: each
// hold counted the first Taken of its lease's permits, so it gets back
// what of those went unused. Holds are refunded only to the rule of the
// same name that still matches the request with the same subject, leases
// allowed; others are skipped (their units expire with the window).
//
// A lease is credited at most once, fleet-wide: the returns that give
// units back first mark their leases returned in Redis (one round trip
// for all of rets; SET NX of returnedKey, kept until a little past
// the lease's deadline), and a return whose lease was marked before, by
// this call, an earlier one or another instance, gives nothing back and
// answers ErrLeaseReturned. A lease is marked before it is refunded: when
// the marking or the refund fails, its units stay counted until their
// window ends, which only under-admits.
//
// A return within 2 × ReturnSlack of its deadline gives nothing back and
// answers ErrLateReturn; the Redis calls of one taken must be done
// ReturnSlack before the deadline, or they are not made.
func (cl *ClientLeases) Return(ctx context.Context, rets []*LeaseReturn) []LeaseReturnResult {
	out := make([]LeaseReturnResult, len(rets))
	g := cl.e.gen.Load()
	start := time.Now()
	claims := make([]int, 0, len(rets))
	for i, ret := range rets {
		switch {
		case ret.Permits < 0 || ret.Unused < 0 || ret.Unused > ret.Permits:
			out[i].Err = fmt.Errorf("lease return: unused must be between 0 and the lease's %d permits, got %d", ret.Permits, ret.Unused)
		case !ValidLeaseID(ret.ID):
			out[i].Err = fmt.Errorf("lease return: lease id %q: want %d to %d bytes of base64url", ret.ID, 1, maxLeaseID)
		case cl.lateReturn(g, ret, start):
			out[i].Err = ErrLateReturn
		case ret.givesBack():
			claims = append(claims, i)
		}
	}
	if len(claims) == 0 {
		return out
	}
	first, err := cl.markReturned(ctx, start, rets, claims)
	for k, i := range claims {
		ret := rets[i]
		switch {
		case err != nil:
			out[i].Err = err
		case first[k] != nil:
			out[i].Err = first[k]
		case cl.lateReturn(g, ret, time.Now()): // the marking took the time left
			out[i].Err = ErrLateReturn
		default:
			out[i].Returned, out[i].Err = cl.refundLease(ctx, g, ret)
		}
	}
	return out
}

// GiveBack gives back the units of ret's holds that its lease did not
// use, for a holder that keeps its own ledger of what it took and granted
// (the RLQS server, host/rlqs): unlike Return, nothing is marked in Redis,
// so a second GiveBack of the same lease would credit it twice. As with
// Return, a lease within 2 × ReturnSlack of its deadline gives nothing
// back (ErrLateReturn), and holds go back only to the rule that still
// matches with the same subject.
func (cl *ClientLeases) GiveBack(ctx context.Context, ret *LeaseReturn) (int64, error) {
	if ret.Permits < 0 || ret.Unused < 0 || ret.Unused > ret.Permits {
		return 0, fmt.Errorf("lease return: unused must be between 0 and the lease's %d permits, got %d", ret.Permits, ret.Unused)
	}
	if !ret.givesBack() {
		return 0, nil
	}
	g := cl.e.gen.Load()
	if cl.lateReturn(g, ret, time.Now()) {
		return 0, ErrLateReturn
	}
	return cl.refundLease(ctx, g, ret)
}

// Rules returns the rule set Take decides on now: a holder that answers
// from what it took before (the RLQS server) asks again when it changes.
func (cl *ClientLeases) Rules() *rules.Set { return cl.e.Rules() }

// givesBack reports whether some hold of ret has unused units to give back.
func (ret *LeaseReturn) givesBack() bool {
	used := ret.Permits - ret.Unused
	for _, h := range ret.Holds {
		if h.unused(used) > 0 {
			return true
		}
	}
	return false
}

// lateReturn reports whether ret comes, at now, within 2 × ReturnSlack of
// its deadline, and then tells the observer of its units as late.
func (cl *ClientLeases) lateReturn(g *generation, ret *LeaseReturn, now time.Time) bool {
	if now.Add(2 * ReturnSlack).Before(ret.Deadline) {
		return false
	}
	used := ret.Permits - ret.Unused
	for _, h := range ret.Holds {
		rule := h.Rule
		if _, ok := g.set.Rule(rule); !ok { // metric labels only of loaded rules
			rule = LeaseRuleUnloaded
		}
		cl.observeLease(rule, LeaseLate, h.unused(used))
	}
	return true
}

// refundLease refunds what ret's holds did not use, its lease marked
// returned by this call.
func (cl *ClientLeases) refundLease(ctx context.Context, g *generation, ret *LeaseReturn) (int64, error) {
	e := cl.e
	used := ret.Permits - ret.Unused
	b := newBudget(ctx, time.Now(), e.timeout)
	if cut := ret.Deadline.Add(-ReturnSlack); cut.Before(b.deadline) {
		b.deadline = cut
	}
	in := rules.Input{Request: ret.Request, Attrs: ret.Attrs}
	sels := g.set.AppendMatch(nil, &in)
	var total int64
	var errs []string
	for _, h := range ret.Holds {
		back := h.unused(used)
		if back <= 0 {
			continue
		}
		for _, sel := range sels {
			rule := sel.Rule
			if rule.Name != h.Rule || sel.Subject != h.Subject || notLeasable(sel, ret.LimitShare) != "" || !rule.Traits.Refunds {
				continue
			}
			if _, err := g.refundRule(ctx, b, sel, back, "", nil); err != nil {
				errs = append(errs, fmt.Sprintf("rule %s: %v", rule.Name, err))
				break
			}
			cl.observeLease(rule.Name, LeaseReturned, back)
			total += back
			break
		}
	}
	if errs != nil {
		return total, fmt.Errorf("lease return: %s", strings.Join(errs, "; "))
	}
	return total, nil
}
