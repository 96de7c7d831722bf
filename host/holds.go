package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/rules"
)

// SlotEvent is what a release or a renewal did to one rule's slot.
type SlotEvent string

// SlotEvents.
const (
	SlotReleased SlotEvent = "released" // a release freed the slot
	SlotNotHeld  SlotEvent = "not_held" // a release found none (released before, expired, never taken)
	SlotRenewed  SlotEvent = "renewed"  // a renewal kept the slot, or took it again
	SlotLost     SlotEvent = "lost"     // a renewal was refused: the lease had expired and the slot was taken
	SlotFailed   SlotEvent = "failed"   // the plugin failed: the rule's on_error decided
)

// SlotObserver, when the engine's Observer implements it too, is told what
// each release and renewal did, per rule.
type SlotObserver interface {
	Slot(rule string, event SlotEvent)
}

// ErrNoLeaseID is the error of a release or a renewal without the id the
// slots were acquired with.
var ErrNoLeaseID = errors.New("lease_id: a release or a renewal needs the lease id (or dedup id) the slots were acquired with")

// Release frees the slots that req's lease id (LeaseID, or DedupID without
// one) holds in the rules req matches
// whose plugins declare releases (sdk.Traits.Releases: the concurrency
// limiter): each of those rules is asked one negative hit with the lease
// id, and no other rule is asked, so a release never gives back what a
// rate limit counted. A rule's result has Granted -1 where its slot was
// freed and 0 where the id held none there (released before, expired, or
// never acquired). A plugin that fails follows its rule's on_error (local
// frees a lease held in this instance's memory); a slot that a failed
// release leaves held comes back when its lease expires. Result.Allowed is
// always true; a request without an id is a bad request (ErrNoLeaseID).
func (e *Engine) Release(ctx context.Context, req *CheckRequest) Result {
	return e.holding(ctx, req, -1)
}

// Renew acquires again the slots of req's lease id in the rules req matches
// whose plugins declare releases, as Release picks them: a slot still held
// is kept (for concurrency, its lease's ttl starts again) and takes no
// other, and one whose lease expired is taken anew if a slot is free. No
// other rule is asked, so a renewal counts nothing against rate limits.
// The result is a check's (Allowed when every enforcing rule of them holds
// the slot, RetryAfter and FailClosed of the ones that do not), but a rule
// that refuses leaves the others' slots held: the request is running, and
// its release frees them.
func (e *Engine) Renew(ctx context.Context, req *CheckRequest) Result {
	return e.holding(ctx, req, 1)
}

// holding asks hits (1 renews, -1 releases) of the holding rules req
// matches, each on its own.
func (e *Engine) holding(ctx context.Context, req *CheckRequest, hits int64) Result {
	res := Result{Allowed: true}
	id := req.slotID()
	if id == "" {
		res.Allowed, res.BadRequest = false, ErrNoLeaseID
		return res
	}
	g := e.gen.Load()
	b := newBudget(ctx, time.Now(), e.timeout)
	in := rules.Input{Request: req.Request, Attrs: req.Attrs}
	sels := g.set.AppendMatch(nil, &in)
	one := *req
	one.Hits, one.BestEffort, one.LeaseID, one.Queue = hits, false, id, false
	for i := range sels {
		sel := &sels[i]
		if !sel.Rule.Traits.Releases || sel.Rule.Exempt {
			continue
		}
		res.Results = append(res.Results, RuleResult{})
		rr := &res.Results[len(res.Results)-1]
		decideRule(ctx, g, b, checkMode, sel, &one, rr)
		if e.slotObs != nil && !rr.badRequest() && !rr.cancelled {
			e.slotObs.Slot(rr.Rule, slotEvent(rr, hits))
		}
		switch {
		case rr.badRequest():
			res.Allowed = false
			if res.BadRequest == nil {
				res.BadRequest = fmt.Errorf("rule %s (plugin %s): %w", rr.Rule, rr.Plugin, rr.Err)
			}
		case hits > 0 && !rr.Shadow && !rr.Allowed:
			res.Allowed = false
			res.RetryAfter = max(res.RetryAfter, rr.RetryAfter)
			res.FailClosed = res.FailClosed || rr.Degraded == DegradedDeny
		}
	}
	return res
}

// slotEvent is what rr, a release (hits < 0) or a renewal, did.
func slotEvent(rr *RuleResult, hits int64) SlotEvent {
	switch {
	case rr.Err != nil:
		return SlotFailed
	case hits < 0 && rr.Granted < 0:
		return SlotReleased
	case hits < 0:
		return SlotNotHeld
	case rr.Allowed:
		return SlotRenewed
	}
	return SlotLost
}
