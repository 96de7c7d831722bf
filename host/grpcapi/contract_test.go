package grpcapi_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// contractRules exercise the points where envoy ratelimit's contract is
// subtle: shadow limits, exempt descriptors, limit overrides, replaces,
// the order of a descriptor's entries.
const contractRules = `rules:
  - name: vip
    when: attrs["domain"] == "edge" && attrs["user"] == "vip"
    exempt: true
  - name: override
    when: attrs["domain"] == "edge" && attrs["limit_override"] != ""
    subject: attrs["descriptor_keys"] + "/" + attrs["key"]
    plugin: fixedwindow
    config: {limit: '=int(attrs["limit_override"])', window: '=attrs["limit_override_window"]'}
  - name: per-user
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "user" && attrs["limit_override"] == ""
    subject: attrs["user"]
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
  - name: trial
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "trial"
    subject: attrs["trial"]
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
    shadow: true
  - name: per-tenant
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "tenant"
    subject: attrs["tenant"]
    plugin: fixedwindow
    config: {limit: 1, window: 1m}
  - name: tenant-route
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "tenant,route"
    subject: attrs["tenant"] + attrs["route"]
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
    replaces: [per-tenant]
  - name: banned
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "banned"
    subject: attrs["banned"]
    plugin: fixedwindow
    config: {limit: 0, window: 1m}
`

func ask(t *testing.T, f *fixture, hits uint32, ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds})
}

// TestDescriptorHitsAddendZeroOnlyChecks: a descriptor's own hits_addend 0
// checks without consuming, as in envoy ratelimit; the request's 0 means 1.
func TestDescriptorHitsAddendZeroOnlyChecks(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	peek := descriptor("user", "ann")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		if got := ask(t, f, 0, peek).Statuses[0].LimitRemaining; got != 10 {
			t.Fatalf("descriptor hits_addend 0: remaining %d, want 10 (nothing consumed)", got)
		}
	}
	if got := ask(t, f, 0, descriptor("user", "ann")).Statuses[0].LimitRemaining; got != 9 {
		t.Fatalf("request hits_addend 0: remaining %d, want 9 (0 means 1)", got)
	}
}

// TestShadowLimitIsReported: a shadow rule's limit is reported like an
// enforcing one's, and over its limit the status stays OK with nothing
// remaining, as envoy ratelimit's shadow_mode answers.
func TestShadowLimitIsReported(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	d := descriptor("trial", "t1")
	st := ask(t, f, 1, d).Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "trial" || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 1 || st.DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("within the shadow limit: %v", st)
	}
	ask(t, f, 1, d)
	resp := ask(t, f, 1, d)
	st = resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "trial" ||
		st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("over the shadow limit: %v, want OK with the limit, 0 remaining and a reset", resp)
	}
	if got := header(resp, "ratelimit"); !strings.HasPrefix(got, `"trial";r=0;t=`) {
		t.Fatalf("ratelimit header %q, want the shadow rule with r=0", got)
	}
	if got := header(resp, "retry-after"); got != "" {
		t.Fatalf("retry-after %q on an OK answer", got)
	}
}

// TestDeniedAnswerReportsRefundedRemaining: in a denied answer, a
// descriptor that was allowed and then refunded reports the remaining the
// next call finds, and a denied status reports 0 remaining even when the
// plugin has units left (hits_addend over what remains).
func TestDeniedAnswerReportsRefundedRemaining(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	ask(t, f, 4, descriptor("user", "bob")) // 6 left
	resp := ask(t, f, 7, descriptor("user", "cy"), descriptor("user", "bob"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("7 of 6: %v, want OVER_LIMIT", resp)
	}
	if st := resp.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 10 {
		t.Fatalf("the refunded descriptor: %v, want OK with 10 remaining (its 7 went back)", st)
	}
	if st := resp.Statuses[1]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("the denied descriptor: %v, want OVER_LIMIT with 0 remaining and a reset", st)
	}
	if got := header(resp, "ratelimit"); !strings.HasPrefix(got, `"per-user";r=0;t=`) {
		t.Fatalf("ratelimit header %q, want r=0 for the denying rule", got)
	}
	peek := descriptor("user", "cy")
	peek.HitsAddend = wrapperspb.UInt64(0)
	if got := ask(t, f, 0, peek).Statuses[0].LimitRemaining; got != 10 {
		t.Fatalf("after the denied call: cy has %d, want 10", got)
	}
}

// TestExemptDescriptor: an exempt rule's descriptor is OK with no limit
// and the most that can remain, as envoy ratelimit's unlimited.
func TestExemptDescriptor(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	for range 20 {
		st := ask(t, f, 1, descriptor("user", "vip")).Statuses[0]
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
			t.Fatalf("exempt: %v", st)
		}
	}
}

// TestLimitOverride: a descriptor's limit override reaches a rule whose
// config reads it, with its unit and multiplier as the window.
func TestLimitOverride(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	d := descriptor("key", "k1")
	d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)}
	for i := range 3 {
		st := ask(t, f, 1, d).Statuses[0]
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "override" || st.CurrentLimit.GetRequestsPerUnit() != 3 ||
			st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.GetUnitMultiplier().GetValue() != 2 ||
			st.LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v, want 3 per 2 minutes with %d remaining", i+1, st, 2-i)
		}
	}
	if st := ask(t, f, 1, d).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th of 3: %v", st)
	}
	// A descriptor without an override does not reach the override rule,
	// even with an entry of the reserved name.
	plain := descriptor("user", "dan", "limit_override", "1000")
	if st := ask(t, f, 1, plain).Statuses[0]; st.CurrentLimit.GetName() != "" {
		t.Fatalf("an entry named limit_override matched %q", st.CurrentLimit.GetName())
	}
	bad := descriptor("key", "k2")
	bad.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3}
	_, err := f.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{bad}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unit") {
		t.Fatalf("override without a unit: %v, want InvalidArgument about the unit", err)
	}
}

// TestReplacesAcrossDescriptors: a limit replaced by another descriptor's
// rule of the same call does not apply, as with envoy ratelimit's
// replaces; alone it does.
func TestReplacesAcrossDescriptors(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	for range 3 {
		resp := ask(t, f, 1, descriptor("tenant", "acme"), descriptor("tenant", "acme", "route", "/a"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil ||
			resp.Statuses[1].CurrentLimit.GetName() != "tenant-route" {
			t.Fatalf("replaced: %v", resp)
		}
	}
	if resp := ask(t, f, 1, descriptor("tenant", "acme")); resp.Statuses[0].CurrentLimit.GetName() != "per-tenant" || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("alone, the first call: %v, want per-tenant to apply (its 3 earlier calls were not counted)", resp)
	}
	if resp := ask(t, f, 1, descriptor("tenant", "acme")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("alone, the second call: %v, want OVER_LIMIT (limit 1)", resp)
	}
}

// TestEntryOrderMatters: descriptor_keys keeps the order of the entries,
// which envoy ratelimit matches level by level.
func TestEntryOrderMatters(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	if st := ask(t, f, 1, descriptor("tenant", "t", "route", "/r")).Statuses[0]; st.CurrentLimit.GetName() != "tenant-route" {
		t.Fatalf("tenant, route: %v", st)
	}
	if st := ask(t, f, 1, descriptor("route", "/r", "tenant", "t")).Statuses[0]; st.CurrentLimit != nil {
		t.Fatalf("route, tenant: %v, want no limit", st)
	}
}

// TestEmptyDomainOrDescriptorsIsAnError, as in envoy ratelimit.
func TestEmptyDomainOrDescriptorsIsAnError(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("user", "x")}},
		{Domain: "edge"},
	} {
		_, err := f.rls.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must not be empty") {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}

// TestBlockedDescriptor: a limit of 0 is always over the limit and reports
// requests_per_unit 0, as envoy ratelimit's requests_per_unit: 0.
func TestBlockedDescriptor(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, contractRules)
	resp := ask(t, f, 1, descriptor("banned", "mallory"))
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "banned" || st.CurrentLimit.GetRequestsPerUnit() != 0 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("blocked: %v", resp)
	}
	if got := header(resp, "ratelimit-policy"); got != `"banned";q=0;w=60` {
		t.Fatalf("ratelimit-policy %q", got)
	}
}
