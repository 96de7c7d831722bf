package host

import "time"

// Outcomes.
const (
	OutcomeAllowed       Outcome = "allowed"
	OutcomeDenied        Outcome = "denied"
	OutcomeShadowDenied  Outcome = "shadow_denied"
	OutcomeDegradedAllow Outcome = "degraded_allow"
	OutcomeDegradedDeny  Outcome = "degraded_deny"
	OutcomeDegradedLocal Outcome = "degraded_local"
	// OutcomeBadRequest is a request the plugin refused as bad input: a
	// client's mistake, not a limit.
	OutcomeBadRequest Outcome = "bad_request"
	// OutcomeExempt is a request an exempt rule admitted.
	OutcomeExempt Outcome = "exempt"
	// OutcomeCancelled is a decision its caller gave up on (a client that
	// hung up): nobody waits for it, and Redis did not fail.
	OutcomeCancelled Outcome = "cancelled"
)

// Outcome classifies one rule's decision for metrics.
type Outcome string

// Observer receives the engine's events. Implementations must be cheap and
// safe for concurrent use: they run on the decision path.
type Observer interface {
	// Decision is called once per evaluated rule of a check. cached is true
	// when the deny cache answered instead of Redis.
	Decision(rule, plugin string, outcome Outcome, cached bool)
	// Check is called once per check with its duration.
	Check(took time.Duration, allowed bool)
	// Reload is called after every load attempt; rules is the number of
	// serving rules afterwards.
	Reload(err error, rules int)
}

// SubjectObserver, when the engine's Observer implements it too, is told
// of every decision of a rule with detailed_metric: true, with its subject.
type SubjectObserver interface {
	SubjectDecision(rule, subject string, outcome Outcome)
}

// nopObserver is the Observer of an engine without one.
type nopObserver struct{}

func (nopObserver) Decision(string, string, Outcome, bool) {}

func (nopObserver) Check(time.Duration, bool) {}

func (nopObserver) Reload(error, int) {}

// outcome classifies a rule result.
func outcome(rr *RuleResult) Outcome {
	switch {
	case rr.Exempt:
		return OutcomeExempt
	case rr.cancelled:
		return OutcomeCancelled
	case rr.Degraded == DegradedAllow:
		return OutcomeDegradedAllow
	case rr.Degraded == DegradedDeny:
		return OutcomeDegradedDeny
	case rr.Degraded == DegradedLocal:
		return OutcomeDegradedLocal
	case rr.Allowed:
		return OutcomeAllowed
	case rr.badRequest():
		return OutcomeBadRequest
	case rr.Shadow:
		return OutcomeShadowDenied
	default:
		return OutcomeDenied
	}
}
