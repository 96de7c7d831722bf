package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// ruleDecider decides one rule of a request for the rule loop
// (decideRules). The engine's asks the rule's plugin over Redis, behind its
// shortcuts (liveDecider); the Simulator's asks the plugin's local model on
// a clock the caller sets. The loop owns everything else: exempt rules,
// on_error, shadow rules, the first denial and the refunds it sets off.
type ruleDecider interface {
	// decideRule writes sel's decision of r, made within b, to d. cached
	// reports that a shortcut answered instead of the plugin; an error is
	// the plugin's failure (or sdk.BadRequestError), which the loop turns
	// into the rule's on_error decision. (sel and d point into the
	// caller's slices: passing them costs no copy and no allocation.)
	decideRule(ctx context.Context, b budget, sel *rules.Selection, r sdk.Request, d *sdk.Decision) (cached bool, err error)
	// refundRule gives n units of sel's subject back to its plugin, which
	// declares refunds, and returns the plugin's decision of the refund. A
	// failure is the decider's to report; the loop keeps the grant.
	refundRule(ctx context.Context, b budget, sel rules.Selection, n int64, dedupID string, attrs map[string]string) (sdk.Decision, error)
	// decideLocal decides r in-process at this instance's share of the
	// quota, for a rule with on_error: local whose plugin failed; false
	// when the plugin cannot.
	decideLocal(sel rules.Selection, r sdk.Request) (sdk.Decision, bool)
}

// loopMode is what the rule loop decides: a check, or a client lease.
type loopMode uint8

const (
	// checkMode decides a check: the first enforced denial ends it and
	// refunds what the rules before it granted; a plugin that fails is
	// replaced by its rule's on_error policy.
	checkMode loopMode = iota
	// leaseMode takes permits for a client lease (a best-effort request):
	// each enforcing rule's grant bounds what the rules after it are asked
	// for, the least grant is what every rule keeps (the rest is refunded),
	// a rule that grants nothing ends it, and a plugin that fails ends it
	// with its error and a refund of everything, never a degraded grant.
	// The caller leaves exempt rules out: they count nothing and bound no
	// lease.
	leaseMode
)

// decideRules is the rule loop, the one place that walks a request's
// matching rules (sels, in rule order, replaces already applied) and
// combines their decisions into res, reusing res.Results' storage: the
// engine's checks, Envoy's descriptors, client leases, `ruled test` and
// `ruled replay` all decide through it, with the decider of their world.
//
// For each rule in turn: an exempt rule admits (matching stopped at it:
// exempt implies stop); a rule whose expressions failed, or whose plugin failed,
// follows its on_error policy (deny, allow, or local); a shadow rule's
// denial is recorded and ignored; the first enforced denial ends the
// request and refunds the grants before it (refundRules). A caller that
// hangs up ends it without refunds (the grants stand: the conservative
// side). Every plugin call shares b.
//
// In leaseMode it returns the permits every rule keeps and the error of a
// failed plugin; in checkMode it returns 0 and nil.
func decideRules(ctx context.Context, d ruleDecider, b budget, mode loopMode, sels []rules.Selection, req *CheckRequest, res *Result) (int64, error) {
	*res = Result{Allowed: true, Results: res.Results[:0]}
	want := req.Hits
	for i := range sels {
		res.Results = append(res.Results, RuleResult{})
		rr := &res.Results[len(res.Results)-1]
		ask := req
		if mode == leaseMode && want != req.Hits {
			fewer := *req
			fewer.Hits = want
			ask = &fewer
		}
		decideRule(ctx, d, b, mode, &sels[i], ask, rr)
		if mode == leaseMode && rr.Err != nil {
			refundRules(ctx, d, b, sels, res.Results[:i], 0, nil, req.Attrs)
			return 0, fmt.Errorf("rule %s (plugin %s): %w", rr.Rule, rr.Plugin, rr.Err)
		}
		if rr.cancelled {
			res.Allowed = false
			return 0, nil
		}
		if mode == leaseMode {
			// A grant beyond what was asked is not believed.
			rr.Granted = min(max(rr.Granted, 0), want)
			if !rr.Allowed {
				rr.Granted = 0
			}
			if rr.Shadow || rr.Granted >= want {
				continue
			}
			want = rr.Granted
			if want > 0 {
				continue
			}
		} else if rr.Shadow || rr.Allowed {
			continue
		}
		res.Allowed = false
		if rr.badRequest() {
			res.BadRequest = fmt.Errorf("rule %s (plugin %s): %w", rr.Rule, rr.Plugin, rr.Err)
		}
		res.RetryAfter = max(res.RetryAfter, rr.RetryAfter)
		if rr.Degraded == DegradedDeny {
			res.FailClosed = true
		}
		refundRules(ctx, d, b, sels, res.Results[:i], 0, req, req.Attrs)
		return 0, nil
	}
	if mode == leaseMode {
		refundRules(ctx, d, b, sels, res.Results, want, nil, req.Attrs)
		return want, nil
	}
	return 0, nil
}

// decideRule is one rule's decision of req, into rr.
func decideRule(ctx context.Context, d ruleDecider, b budget, mode loopMode, sel *rules.Selection, req *CheckRequest, rr *RuleResult) {
	rule := sel.Rule
	*rr = RuleResult{Rule: rule.Name, Subject: sel.Subject, Plugin: rule.Plugin, Shadow: rule.Shadow, detailed: rule.Detailed, Releases: rule.Traits.Releases}
	if rule.Exempt && sel.Err == nil {
		rr.Allowed, rr.Exempt = true, true
		return
	}
	r := sdk.Request{Subject: sel.Subject, Hits: req.Hits, DedupID: req.dedupFor(rule), BestEffort: req.BestEffort, Attrs: req.Attrs, Queue: req.Queue}
	if sel.Err != nil {
		degrade(d, mode, rr, *sel, r, sel.Err)
		return
	}
	cached, err := d.decideRule(ctx, b, sel, r, &rr.Decision)
	switch {
	case err == nil:
		rr.cached = cached
	case sdk.IsBadRequest(err):
		rr.Decision = sdk.Decision{}
		rr.Err = err
	case errors.Is(ctx.Err(), context.Canceled):
		rr.Decision = sdk.Decision{}
		rr.Err, rr.cancelled = err, true // the caller hung up: not an outage
	default:
		degrade(d, mode, rr, *sel, r, err)
	}
}

// degrade applies the rule's failure policy to a decision that failed:
// deny, allow, or decide in-process at this instance's share of the limit.
// A rule whose plugin cannot decide locally (or whose own evaluation
// failed) falls back from local to allow. A lease does not degrade: the
// error stands, and the client asks per request.
func degrade(d ruleDecider, mode loopMode, rr *RuleResult, sel rules.Selection, r sdk.Request, err error) {
	rule := sel.Rule
	rr.Err = err
	rr.Decision = sdk.Decision{}
	switch {
	case mode == leaseMode:
	case rule.OnError == rules.OnErrorDeny:
		rr.Degraded = DegradedDeny
	case rule.OnError == rules.OnErrorLocal && sel.Err == nil:
		if dec, ok := d.decideLocal(sel, r); ok {
			rr.Decision, rr.Degraded = dec, DegradedLocal
			return
		}
		fallthrough
	default:
		rr.Degraded, rr.Allowed, rr.Granted = DegradedAllow, true, max(r.Hits, 0)
	}
}

// refundRules gives back what the decided rules (done, matched as sels)
// granted beyond keep units (all of it when keep is 0: a request denied in
// the end), where their plugins declare refunds, and makes their results
// say what stands: what is kept granted, the remaining after the refund.
// Only plugin-granted units are refunded; a refund that fails leaves the
// result saying the units were granted (they expire with the window). Each
// refund carries the dedup id its rule was asked with (none when ids is
// nil).
func refundRules(ctx context.Context, d ruleDecider, b budget, sels []rules.Selection, done []RuleResult, keep int64, ids *CheckRequest, attrs map[string]string) {
	for i := range done {
		rr := &done[i]
		sel := sels[i]
		back := rr.Granted - min(rr.Granted, keep)
		if rr.Degraded != DegradedNone || !rr.Allowed || back <= 0 || !sel.Rule.Traits.Refunds {
			continue
		}
		dedupID := ""
		if ids != nil {
			dedupID = ids.dedupFor(sel.Rule)
		}
		dec, err := d.refundRule(ctx, b, sel, back, dedupID, attrs)
		if err != nil {
			continue
		}
		rr.Granted, rr.Remaining, rr.Reset = rr.Granted-back, dec.Remaining, dec.Reset
	}
}

// budget is one check's time: the deadline that every plugin call of the
// check shares, passed to the capability with each call (a deadline, not
// a context: a check costs no timer of its own).
type budget struct{ deadline time.Time }

// newBudget returns the budget of a check that starts at start: timeout,
// or less when ctx's deadline comes first.
func newBudget(ctx context.Context, start time.Time, timeout time.Duration) budget {
	b := budget{deadline: start.Add(timeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(b.deadline) {
		b.deadline = d
	}
	return b
}

// minCallTime is the least time left in which a check still asks Redis.
const minCallTime = time.Millisecond

// spent reports whether the check has less than minCallTime left.
func (b budget) spent() bool { return time.Until(b.deadline) < minCallTime }
