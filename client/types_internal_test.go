package client

import (
	"net/http"
	"testing"
	"time"
)

// A leased denial lists each denying rule with its own retry-after, and
// every rule the lease's RateLimit-Policy lists, a block (limit 0) too.
func TestLeasedRateLimitHeaderPerRule(t *testing.T) {
	a := &Answer{
		Leased: true, StatusCode: http.StatusTooManyRequests, RetryAfter: time.Hour,
		policy: `"a";q=10;w=60, "b";q=0;w=3600, "ok";q=5;w=60`,
		Results: []Result{
			{Rule: "a", Limit: 10, RetryAfter: 30 * time.Second},
			{Rule: "b", Limit: 0, RetryAfter: time.Hour},
			{Rule: "s", Limit: 5, Shadow: true, RetryAfter: 2 * time.Hour},
			{Rule: "ok", Limit: 5, Allowed: true, Remaining: 3},
		},
	}
	h := a.RateLimitHeader()
	if got, want := h.Get("RateLimit"), `"a";r=0;t=30, "b";r=0;t=3600`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	if got := h.Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After %q, want 3600", got)
	}
	if got := h.Get("RateLimit-Policy"); got != a.policy {
		t.Errorf("RateLimit-Policy %q, want %q", got, a.policy)
	}

	// Allowed: every listed rule, none unlisted.
	a = &Answer{
		Leased: true, Allowed: true, StatusCode: http.StatusOK, policy: `"x";q=10;w=60`,
		Results: []Result{
			{Rule: "x", Limit: 10, Allowed: true, Remaining: 4, Reset: 1500 * time.Millisecond},
			{Rule: "xy", Limit: 10, Allowed: true, Remaining: 4},
		},
	}
	h = a.RateLimitHeader()
	if got, want := h.Get("RateLimit"), `"x";r=4;t=2`; got != want || h.Get("Retry-After") != "" {
		t.Errorf("RateLimit %q Retry-After %q, want %q and none", got, h.Get("Retry-After"), want)
	}
}
