package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyContractRules are written as an envoy ratelimit user would have
// them: a per-user limit, a shadow limit, an unlimited user.
const envoyContractRules = `rules:
  - name: vip
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "user" && attrs["user"] == "vip"
    exempt: true
  - name: per-user
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "user"
    subject: attrs["user"]
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
  - name: trial
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "trial"
    subject: attrs["trial"]
    plugin: fixedwindow
    config: {limit: 1, window: 1m}
    shadow: true
`

// rlsClient is a gRPC client of a daemon's rate limit service.
type rlsClient struct {
	t   *testing.T
	rls rlsv3.RateLimitServiceClient
}

func dialRLS(t *testing.T, addr string) *rlsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rlsClient{t: t, rls: rlsv3.NewRateLimitServiceClient(conn)}
}

func (c *rlsClient) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.rls.ShouldRateLimit(ctx, req)
}

func (c *rlsClient) ask(hits uint32, ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	c.t.Helper()
	resp, err := c.call(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds})
	if err != nil {
		c.t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func entries(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestEnvoyRLSContract plays envoy ratelimit's own scenarios against the
// real binary in its default configuration (managed Redis, ACL isolation)
// with a real gRPC client: the answers envoy ratelimit gives, point by
// point (docs/http.md, "Compared with envoy ratelimit").
func TestEnvoyRLSContract(t *testing.T) {
	addr := freePort(t)
	d := spawnDaemon(t, envoyContractRules, "--grpc-listen", addr)
	d.waitReady(20 * time.Second)
	c := dialRLS(t, addr)

	// A descriptor's own hits_addend 0 only checks.
	peek := entries("user", "ann")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		if st := c.ask(1, peek).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 10 {
			t.Fatalf("hits_addend 0: %v, want OK with 10 remaining", st)
		}
	}
	// Over the limit: remaining 0; the allowed descriptor of the denied
	// call reports what it has after its refund.
	c.ask(4, entries("user", "bob"))
	resp := c.ask(7, entries("user", "ann"), entries("user", "bob"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 10 ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("7 hits with 6 left: %v", resp)
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == "ratelimit" && !strings.Contains(h.Value, `"per-user";r=0;`) {
			t.Fatalf("ratelimit header %q, want r=0", h.Value)
		}
	}
	// A shadow limit is reported, and never denies.
	c.ask(1, entries("trial", "t"))
	st := c.ask(1, entries("trial", "t")).Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "trial" || st.LimitRemaining != 0 {
		t.Fatalf("over a shadow limit: %v, want OK reporting trial with 0 remaining", st)
	}
	// Unlimited.
	if st := c.ask(1, entries("user", "vip")).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Fatalf("exempt: %v", st)
	}
	// Errors.
	for _, req := range []*rlsv3.RateLimitRequest{{Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("user", "x")}}, {Domain: "edge"}} {
		if _, err := c.call(req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v, want InvalidArgument", req, err)
		}
	}
}
