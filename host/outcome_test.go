package host

import (
	"errors"
	"testing"

	"github.com/ruled-dev/ruled/sdk"
)

// TestOutcomes: a plugin's refusal of a request is counted as bad_request,
// not as a denial (a client's mistake is not rate limiting), and a degraded
// decision, which also carries an error, as its policy.
func TestOutcomes(t *testing.T) {
	bad := sdk.BadRequest("no lease id")
	for _, c := range []struct {
		rr   RuleResult
		want Outcome
	}{
		{RuleResult{Err: bad}, OutcomeBadRequest},
		{RuleResult{Err: bad, Shadow: true}, OutcomeBadRequest},
		{RuleResult{Err: errors.New("redis down"), Degraded: DegradedDeny}, OutcomeDegradedDeny},
		{RuleResult{Err: errors.New("redis down"), Degraded: DegradedAllow, Decision: sdk.Decision{Allowed: true}}, OutcomeDegradedAllow},
		{RuleResult{}, OutcomeDenied},
		{RuleResult{Shadow: true}, OutcomeShadowDenied},
		{RuleResult{Decision: sdk.Decision{Allowed: true}}, OutcomeAllowed},
	} {
		if got := outcome(&c.rr); got != c.want {
			t.Errorf("%+v: outcome %s, want %s", c.rr, got, c.want)
		}
		if c.rr.badRequest() != (c.want == OutcomeBadRequest) {
			t.Errorf("%+v: badRequest() %v", c.rr, c.rr.badRequest())
		}
	}
}
