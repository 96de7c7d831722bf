package host

import (
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// Degraded values; empty means the plugin decided.
const (
	DegradedNone  Degraded = ""
	DegradedAllow Degraded = "allow"
	DegradedDeny  Degraded = "deny"
	DegradedLocal Degraded = "local"
)

// Bounds of a check body, the same for every API that takes one (HTTP,
// Envoy RLS, ruled test).
const (
	// MaxHits bounds the absolute value of a check's hits.
	MaxHits = 1_000_000_000
	// MaxDedupID bounds the length of a check's dedup id, in bytes.
	MaxDedupID = 256
)

// CheckHits refuses hits out of ±MaxHits, the bound of every front end and
// of rule tests; the caller names the field.
func CheckHits(hits int64) error {
	if hits < -MaxHits || hits > MaxHits {
		return fmt.Errorf("must be between %d and %d, got %d", -MaxHits, MaxHits, hits)
	}
	return nil
}

// CheckDedupID refuses a dedup id longer than MaxDedupID.
func CheckDedupID(id string) error {
	if len(id) > MaxDedupID {
		return fmt.Errorf("at most %d bytes, got %d", MaxDedupID, len(id))
	}
	return nil
}

// Request is the HTTP-level view of a request that rules match against.
type Request = rules.Request

// NormalizeHeaders returns h with lower-case names, as rules see them: h
// itself when it already has them.
func NormalizeHeaders(h map[string]string) map[string]string { return rules.NormalizeHeaders(h) }

// CheckRequest is one question put to the engine.
type CheckRequest struct {
	Request Request
	Attrs   map[string]string
	Hits    int64 // 0 peeks; negative refunds where the plugin supports it
	DedupID string
	// LeaseID names the request's in-flight slots: the rules whose plugins
	// declare releases are asked with it as their dedup id, instead of
	// DedupID, and no other rule sees it (a rate limit keeps no record of
	// it). Release and Renew name the slots by it.
	LeaseID    string
	BestEffort bool
	// Queue says the request waits in line for its slots (sdk.Request.Queue):
	// /v1/acquire with a lease id sets it, and asks again until served.
	Queue bool
}

// dedupFor is the dedup id rule is asked with: LeaseID for a rule whose
// plugin declares releases, when the request has one, else DedupID.
func (req *CheckRequest) dedupFor(rule *rules.Rule) string {
	if req.LeaseID != "" && rule.Traits.Releases {
		return req.LeaseID
	}
	return req.DedupID
}

// slotID is the id of the slots a release or a renewal names: LeaseID, or
// DedupID without one.
func (req *CheckRequest) slotID() string {
	if req.LeaseID != "" {
		return req.LeaseID
	}
	return req.DedupID
}

// Degraded says how a decision was made when it could not be made by the
// plugin: the rule's on_error policy.
type Degraded string

// RuleResult is one matching rule's decision.
type RuleResult struct {
	Rule    string
	Subject string
	Plugin  string
	Shadow  bool
	// Exempt is true for an exempt rule: it admitted the request without
	// a plugin and ended the evaluation.
	Exempt   bool
	Degraded Degraded
	// Err is why the decision is degraded, if it is, or the plugin's
	// refusal of the request as bad input (sdk.BadRequestError; Degraded
	// is then empty).
	Err error
	// Releases is true when the rule's plugin declares releases
	// (sdk.Traits.Releases): its grants are slots, held until released.
	Releases bool
	sdk.Decision

	cached    bool // answered by the deny cache
	detailed  bool // the rule asks for per-subject metrics
	cancelled bool // the caller gave up before the plugin decided
}

// Held reports whether the result holds a slot for the request's dedup id
// until Engine.Release frees it or its lease expires: a grant of a plugin
// that declares releases (sdk.Traits.Releases), made in Redis or, under
// on_error: local, in this instance's memory.
func (rr *RuleResult) Held() bool {
	return rr.Releases && rr.Allowed && rr.Granted > 0 && (rr.Degraded == DegradedNone || rr.Degraded == DegradedLocal)
}

// FromDenyCache reports whether the deny cache gave the result, instead
// of the plugin.
func (rr *RuleResult) FromDenyCache() bool { return rr.cached }

// ReportsLimit reports whether the result is a limit to tell clients of
// (RateLimit fields, RLS statuses): an enforcing rule, not shadow, whose
// plugin reported a limit.
func (rr *RuleResult) ReportsLimit() bool { return !rr.Shadow && rr.hasLimit() }

// hasLimit reports whether the plugin reported a limit: a positive one, or
// a block (limit 0) over a window.
func (rr *RuleResult) hasLimit() bool { return rr.Limit > 0 || (rr.Limit == 0 && rr.Window > 0) }

// badRequest reports whether the plugin refused the request as bad input:
// the only result with an error that is neither degraded nor cancelled.
func (rr *RuleResult) badRequest() bool {
	return rr.Err != nil && rr.Degraded == DegradedNone && !rr.cancelled
}

// Result is the combined decision for a request.
type Result struct {
	// Allowed is true when every non-shadow rule allowed.
	Allowed bool
	// FailClosed is true when the request was denied by an on_error: deny
	// policy rather than by a limit (HTTP answers 503).
	FailClosed bool
	// RetryAfter is the longest retry-after among the denying rules.
	RetryAfter time.Duration
	// BadRequest is set when a plugin refused the request as bad input
	// (sdk.BadRequestError): the request is denied, not on the rule's
	// on_error policy, and the HTTP API answers 400 with its message.
	BadRequest error
	// Results holds one entry per evaluated rule, in rule order.
	Results []RuleResult
}

// Held reports whether some rule of the request holds a slot for its
// lease id (RuleResult.Held): what a release of it would free.
func (r *Result) Held() bool {
	for i := range r.Results {
		if r.Results[i].Held() {
			return true
		}
	}
	return false
}

// Policy returns the most restrictive non-shadow result with a limit (a
// denying rule with the longest retry-after, else the one with the fewest
// remaining), the one an Envoy RLS descriptor status reports, and false
// when there is none.
func (r *Result) Policy() (RuleResult, bool) { return r.policy(false) }

// ShadowPolicy returns the most restrictive shadow result with a limit,
// and false when there is none: what a shadow rule would have told
// clients.
func (r *Result) ShadowPolicy() (RuleResult, bool) { return r.policy(true) }

// policy returns the most restrictive result with a limit among the shadow
// results or among the enforcing ones.
func (r *Result) policy(shadow bool) (RuleResult, bool) {
	best, found := RuleResult{}, false
	for _, rr := range r.Results {
		if rr.Shadow != shadow || !rr.hasLimit() {
			continue
		}
		if !found || moreRestrictive(rr, best) {
			best, found = rr, true
		}
	}
	return best, found
}

func moreRestrictive(a, b RuleResult) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}
