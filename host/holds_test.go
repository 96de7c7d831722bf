package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// A rate limit and an in-flight limit on the same requests.
const rateAndSlots = `
rules:
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config: {limit: 10, window: 1h}
  - name: in-flight
    subject: request.user
    plugin: concurrency
    config: {limit: 2, ttl: 1m}
`

// holdReq is a request of user u holding the lease id.
func holdReq(id string, hits int64) *host.CheckRequest {
	return &host.CheckRequest{Request: host.Request{User: "u"}, Hits: hits, DedupID: id}
}

// TestReleaseAndRenewReachOnlyTheSlots holds what Release and Renew promise:
// they reach only the rules whose plugins declare releases, so a release
// gives back a slot and never what a rate limit counted, and a renewal
// keeps a slot without counting the request again.
func TestReleaseAndRenewReachOnlyTheSlots(t *testing.T) {
	e := newEngine(t, redistest.Start(t), rateAndSlots, 5*time.Second)
	ctx := context.Background()
	remaining := func() (rate, slots int64) {
		t.Helper()
		res := e.Check(ctx, &host.CheckRequest{Request: host.Request{User: "u"}, Hits: 0})
		if len(res.Results) != 2 {
			t.Fatalf("peek: %+v", res)
		}
		return res.Results[0].Remaining, res.Results[1].Remaining
	}

	for _, id := range []string{"a", "b"} {
		res := e.Check(ctx, holdReq(id, 1))
		if !res.Allowed || res.Results[0].Held() || !res.Results[1].Held() {
			t.Fatalf("acquire %s: %+v, want allowed, the slot held and the count not", id, res)
		}
	}
	if res := e.Check(ctx, holdReq("c", 1)); res.Allowed || res.Results[1].Held() || res.Results[0].Held() {
		t.Fatalf("a third holder: %+v, want denied, nothing held", res)
	}
	if rate, slots := remaining(); rate != 8 || slots != 0 {
		t.Fatalf("after two holders: rate remaining %d, slots %d; want 8 (the denied request refunded) and 0", rate, slots)
	}

	rel := e.Release(ctx, holdReq("a", 0))
	if len(rel.Results) != 1 || rel.Results[0].Rule != "in-flight" || rel.Results[0].Granted != -1 || rel.BadRequest != nil {
		t.Fatalf("release a: %+v, want the in-flight rule alone, one slot freed", rel)
	}
	if rate, slots := remaining(); rate != 8 || slots != 1 {
		t.Fatalf("after the release: rate remaining %d, slots %d; want 8 (a release gives back no count) and 1", rate, slots)
	}
	if rel := e.Release(ctx, holdReq("a", 0)); len(rel.Results) != 1 || rel.Results[0].Granted != 0 {
		t.Fatalf("release a again: %+v, want nothing freed", rel)
	}

	if ren := e.Renew(ctx, holdReq("b", 0)); !ren.Allowed || len(ren.Results) != 1 || !ren.Results[0].Held() {
		t.Fatalf("renew b: %+v, want its slot kept", ren)
	}
	if rate, slots := remaining(); rate != 8 || slots != 1 {
		t.Fatalf("after renewing b: rate remaining %d, slots %d; want 8 (a renewal counts nothing) and 1 (nor takes a slot)", rate, slots)
	}
	// A renewal of a lease that is gone takes a free slot, or is refused.
	if ren := e.Renew(ctx, holdReq("x", 0)); !ren.Allowed {
		t.Fatalf("renew x with a slot free: %+v", ren)
	}
	ren := e.Renew(ctx, holdReq("y", 0))
	if ren.Allowed || ren.RetryAfter <= 0 || ren.FailClosed || ren.Results[0].Held() {
		t.Fatalf("renew y with no slot free: %+v, want denied with a retry-after", ren)
	}
	if rate, _ := remaining(); rate != 8 {
		t.Fatalf("after the renewals: rate remaining %d, want 8", rate)
	}

	for _, f := range []func(context.Context, *host.CheckRequest) host.Result{e.Release, e.Renew} {
		if res := f(ctx, holdReq("", 0)); !errors.Is(res.BadRequest, host.ErrNoLeaseID) || res.Allowed {
			t.Fatalf("without a dedup id: %+v, want ErrNoLeaseID", res)
		}
	}
}

// TestLeaseIDReachesOnlyTheSlots: a request's LeaseID is the dedup id of
// the rules that hold slots and of no other, so a rate limit keeps no
// record of it: the same lease id twice renews one slot but counts twice,
// where the same DedupID would be one retried request, counted once. A
// release by the lease id frees the slot.
func TestLeaseIDReachesOnlyTheSlots(t *testing.T) {
	e := newEngine(t, redistest.Start(t), rateAndSlots, 5*time.Second)
	ctx := context.Background()
	lease := func() *host.CheckRequest {
		return &host.CheckRequest{Request: host.Request{User: "u"}, Hits: 1, LeaseID: "slot-1"}
	}
	for i := range 2 {
		if res := e.Check(ctx, lease()); !res.Allowed || !res.Results[1].Held() {
			t.Fatalf("check %d with the lease id: %+v", i, res)
		}
	}
	peek := e.Check(ctx, &host.CheckRequest{Request: host.Request{User: "u"}, Hits: 0})
	if rate, slots := peek.Results[0].Remaining, peek.Results[1].Remaining; rate != 8 || slots != 1 {
		t.Fatalf("rate remaining %d, slots %d; want 8 (two checks counted) and 1 (one slot renewed)", rate, slots)
	}
	if rel := e.Release(ctx, &host.CheckRequest{Request: host.Request{User: "u"}, LeaseID: "slot-1"}); len(rel.Results) != 1 || rel.Results[0].Granted != -1 {
		t.Fatalf("release by the lease id: %+v", rel)
	}
}
