package rlqs

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// assignment is a quota assignment action for id.
func assignment(id map[string]string, ttl time.Duration, st *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: st}}}
}

func tokenBucketOf(max, perFill uint32) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(time.Second)}}}
}

// TestAssignmentsAsEnvoyAppliesThem: the client applies assignments as
// Envoy's filter does (see the package comment): a token bucket starts
// full and refills continuously, a repeated one keeps its tokens, a
// changed one is rescaled, requests_per_time_unit is skipped, an
// assignment runs out after its whole seconds, and abandon forgets.
func TestAssignmentsAsEnvoyAppliesThem(t *testing.T) {
	c := &Client{buckets: map[string]*bucket{}}
	id := map[string]string{"route": "api"}
	t0 := time.Now()
	c.buckets[bucketKey(id)] = &bucket{id: id, reported: t0}
	b := c.buckets[bucketKey(id)]
	take := func(now time.Time, n int) (allowed int) {
		for range n {
			if ok, _ := b.decide(now, false); ok {
				allowed++
			}
		}
		return allowed
	}
	if ok, assigned := b.decide(t0, false); !ok || assigned {
		t.Fatal("without an assignment a request is admitted, unassigned")
	}
	if ok, _ := b.decide(t0, true); ok {
		t.Fatal("DenyWithoutAssignment admitted a request without an assignment")
	}
	c.applyLocked(assignment(id, 3*time.Second, tokenBucketOf(10, 2)), t0)
	if n := take(t0, 20); n != 10 {
		t.Fatalf("a new token bucket of 10 admitted %d at once, want 10 (it starts full)", n)
	}
	if n := take(t0.Add(time.Second), 20); n != 2 {
		t.Fatalf("after 1 s at 2 a second: %d admitted, want 2", n)
	}
	// The same assignment again keeps the (empty) bucket.
	c.applyLocked(assignment(id, 3*time.Second, tokenBucketOf(10, 2)), t0.Add(time.Second))
	if n := take(t0.Add(time.Second), 5); n != 0 {
		t.Fatalf("a repeated assignment refilled the bucket: %d admitted", n)
	}
	// A changed one rescales the tokens: 1 s at 2 = 2 of 10, so 4 of 20.
	c.applyLocked(assignment(id, 3*time.Second, tokenBucketOf(20, 2)), t0.Add(2*time.Second))
	if n := take(t0.Add(2*time.Second), 10); n != 4 {
		t.Fatalf("a rescaled bucket admitted %d, want 4", n)
	}
	// requests_per_time_unit is not applied: the token bucket stays.
	c.applyLocked(assignment(id, 3*time.Second, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 100, TimeUnit: typev3.RateLimitUnit_SECOND}}}), t0.Add(2*time.Second))
	if a := c.Assignment(id); a != "none" && a[:12] != "token_bucket" {
		t.Fatalf("after requests_per_time_unit: %s", a)
	}
	// Whole seconds: a TTL of 2.9 s lasts 2 s.
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	c.applyLocked(assignment(id, 2900*time.Millisecond, deny), t0.Add(3*time.Second))
	if ok, assigned := b.decide(t0.Add(4*time.Second), false); ok || !assigned {
		t.Fatal("DENY_ALL admitted a request")
	}
	if ok, assigned := b.decide(t0.Add(5*time.Second), false); !ok || assigned {
		t.Fatal("an assignment outlived its whole seconds")
	}
	c.applyLocked(&rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}, t0.Add(5*time.Second))
	if len(c.buckets) != 0 {
		t.Fatal("abandon kept the bucket")
	}
	if st := c.Stats(); st.Assignments != 4 {
		t.Fatalf("%d assignments counted, want 4 (requests_per_time_unit and abandon are not)", st.Assignments)
	}
}
