package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

const clientLeaseRules = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
    lease: 30
  - name: per-path
    when: request.path == "/tight"
    subject: request.path
    plugin: fixedwindow
    config: {limit: 10, window: 1h}
    lease: 50
  - name: dry-run
    when: request.path == "/shadow"
    subject: request.path
    plugin: fixedwindow
    config: {limit: 4, window: 1h}
    lease: 50
    shadow: true
  - name: shaped
    when: request.path == "/shaped"
    subject: request.ip
    plugin: leaky
    config: {capacity: 5, rate: 10, per: 1s, mode: shape}
`

// peekRemaining is what rule's counter has left for req, asked of Redis.
func peekRemaining(t *testing.T, e *host.Engine, req host.Request, rule string) int64 {
	t.Helper()
	res := e.Check(context.Background(), &host.CheckRequest{Request: req, Hits: 0})
	for _, rr := range res.Results {
		if rr.Rule == rule {
			return rr.Remaining
		}
	}
	t.Fatalf("rule %s did not match %+v", rule, req)
	return 0
}

func TestClientLeaseTakesTheLeastOfEveryRule(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	ctx := context.Background()
	req := host.Request{IP: "192.0.2.1", Path: "/tight"}

	l, err := e.ClientLeases().Take(ctx, &host.LeaseRequest{Request: req, Permits: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// per-ip allows 30 per lease, per-path has 10 left: 10 from each, and
	// per-ip's other 20 went back at once.
	if !l.Leasable || l.Permits != 10 || len(l.Holds()) != 2 {
		t.Fatalf("lease = %+v, want 10 permits held by both rules", l)
	}
	if l.TTL <= 0 || l.TTL > host.ClientLeaseTTL {
		t.Fatalf("ttl %v, want within (0, %v]", l.TTL, host.ClientLeaseTTL)
	}
	if got := peekRemaining(t, e, req, "per-ip"); got != 90 {
		t.Fatalf("per-ip remaining %d after a lease of 10, want 90", got)
	}

	// per-path is used up: the next lease is a denial the client may keep.
	l2, err := e.ClientLeases().Take(ctx, &host.LeaseRequest{Request: req, Permits: 5})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Permits != 0 || l2.RetryAfter <= 0 || !l2.DenyFirm || len(l2.Holds()) != 0 {
		t.Fatalf("lease over the limit = %+v, want 0 permits, a firm denial with a retry-after", l2)
	}
	if got := peekRemaining(t, e, req, "per-ip"); got != 90 {
		t.Fatalf("per-ip remaining %d after a denied lease, want 90 (what it took went back)", got)
	}

	// Four of the ten used: six go back to each rule.
	n, err := returnLease(ctx, e, &host.LeaseReturn{Request: req, Permits: l.Permits, Unused: 6, Holds: l.Holds(), ID: l.ID, Deadline: time.Now().Add(time.Second)})
	if err != nil || n != 12 {
		t.Fatalf("returned %d units (%v), want 6 to each of two rules", n, err)
	}
	if got := peekRemaining(t, e, req, "per-ip"); got != 96 {
		t.Fatalf("per-ip remaining %d after four were used, want 96", got)
	}
	if got := peekRemaining(t, e, req, "per-path"); got != 6 {
		t.Fatalf("per-path remaining %d after four were used, want 6", got)
	}
}

func TestClientLeaseShadowRuleCountsOnlyWhatItAllowed(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	ctx := context.Background()
	req := host.Request{IP: "192.0.2.2", Path: "/shadow"}

	// The shadow rule has 4; it does not cut the lease, which per-ip sizes.
	l, err := e.ClientLeases().Take(ctx, &host.LeaseRequest{Request: req, Permits: 20})
	if err != nil {
		t.Fatal(err)
	}
	if l.Permits != 20 {
		t.Fatalf("permits %d, want 20 (a shadow rule never cuts a lease)", l.Permits)
	}
	var shadowTaken int64
	for _, h := range l.Holds() {
		if h.Rule == "dry-run" {
			shadowTaken = h.Taken
		}
	}
	if shadowTaken != 4 {
		t.Fatalf("shadow rule holds %d, want its 4", shadowTaken)
	}
	// Two used: the shadow rule counted the first four of the lease, so it
	// gets two back; per-ip gets the other eighteen.
	n, err := returnLease(ctx, e, &host.LeaseReturn{Request: req, Permits: 20, Unused: 18, Holds: l.Holds(), ID: l.ID, Deadline: time.Now().Add(time.Second)})
	if err != nil || n != 18+2 {
		t.Fatalf("returned %d (%v), want 20", n, err)
	}
	if got := peekRemaining(t, e, req, "dry-run"); got != 2 {
		t.Fatalf("shadow remaining %d after two used, want 2", got)
	}
}

func TestClientLeaseRefusedWhereARuleCannotLease(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	for _, tc := range []struct {
		req  host.Request
		want string
	}{
		{host.Request{IP: "192.0.2.3", Path: "/shaped"}, "rule shaped has no lease size"},
	} {
		l, err := e.ClientLeases().Take(context.Background(), &host.LeaseRequest{Request: tc.req, Permits: 10})
		if err != nil {
			t.Fatal(err)
		}
		if l.Leasable || !strings.Contains(l.Reason, tc.want) {
			t.Fatalf("lease %+v, want refused: %q", l, tc.want)
		}
		if got := peekRemaining(t, e, tc.req, "per-ip"); got != 100 {
			t.Fatalf("a refused lease took quota: per-ip remaining %d", got)
		}
	}
}

func TestClientLeaseWithoutRulesIsUnbounded(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, "rules:\n  - name: only-users\n    when: request.user != \"\"\n    subject: request.user\n    plugin: fixedwindow\n    config: {limit: 1, window: 1m}\n    lease: 1\n", time.Second)
	l, err := e.ClientLeases().Take(context.Background(), &host.LeaseRequest{Request: host.Request{IP: "192.0.2.4"}, Permits: 500})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Leasable || l.Permits != 500 || len(l.Holds()) != 0 || l.TTL != host.ClientLeaseTTL {
		t.Fatalf("lease with no rule matching = %+v, want all 500 permits, nothing held", l)
	}
}

// Returns that give nothing back: to a subject the rule no longer picks,
// of more than the lease had, and too close to the lease's deadline.
func TestClientLeaseReturnsThatGiveNothingBack(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	ctx := context.Background()
	req := host.Request{IP: "192.0.2.5"}
	l, err := e.ClientLeases().Take(ctx, &host.LeaseRequest{Request: req, Permits: 30})
	if err != nil || l.Permits != 30 {
		t.Fatalf("lease %+v (%v)", l, err)
	}
	// A hold for another subject (the rules changed what it is) is not
	// refunded to the subject the rule picks now.
	holds := []host.LeaseHold{{Rule: "per-ip", Subject: "192.0.2.99", Taken: 30}}
	n, err := returnLease(ctx, e, &host.LeaseReturn{Request: req, Permits: 30, Unused: 30, Holds: holds, ID: l.ID, Deadline: time.Now().Add(time.Second)})
	if err != nil || n != 0 {
		t.Fatalf("returned %d (%v) to a subject that is not the request's, want 0", n, err)
	}
	if _, err := returnLease(ctx, e, &host.LeaseReturn{Request: req, Permits: 30, Unused: 31, Holds: l.Holds(), ID: l.ID, Deadline: time.Now().Add(time.Second)}); err == nil {
		t.Fatal("returning more than the lease had was accepted")
	}
	late := &host.LeaseReturn{Request: req, Permits: 30, Unused: 30, Holds: l.Holds(), ID: l.ID, Deadline: time.Now().Add(2*host.ReturnSlack - time.Millisecond)}
	if n, err := returnLease(ctx, e, late); !errors.Is(err, host.ErrLateReturn) || n != 0 {
		t.Fatalf("return %v before the deadline: %d, %v; want ErrLateReturn", 2*host.ReturnSlack, n, err)
	}
	if got := peekRemaining(t, e, req, "per-ip"); got != 70 {
		t.Fatalf("per-ip remaining %d, want 70", got)
	}
}

// returnLease gives back the unused permits of one lease.
func returnLease(ctx context.Context, e *host.Engine, ret *host.LeaseReturn) (int64, error) {
	r := e.ClientLeases().Return(ctx, []*host.LeaseReturn{ret})[0]
	return r.Returned, r.Err
}

// TestClientLeaseTakesNothingUnsigned: when the fleet's lease key cannot
// be read (here it is not a key: too short), Take fails before it counts
// anything, so no permit is held by a lease nobody can return.
func TestClientLeaseTakesNothingUnsigned(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	ctx := context.Background()
	if err := srv.Client().Set(ctx, host.LeaseKeyName(e), "short", 0).Err(); err != nil {
		t.Fatal(err)
	}
	req := host.Request{IP: "192.0.2.9", Path: "/"}
	before := peekRemaining(t, e, req, "per-ip")
	if _, err := e.ClientLeases().Take(ctx, &host.LeaseRequest{Request: req, Permits: 10}); err == nil {
		t.Fatal("a lease was taken with no lease key to sign it")
	}
	if after := peekRemaining(t, e, req, "per-ip"); after != before {
		t.Fatalf("per-ip has %d left after the refused lease, %d before: the lease took permits", after, before)
	}
}

// A rule without lease: N leases only when the request gives a limit
// share: at most that share of the limit it reports, rounded up, what it
// granted beyond going back at once; and only then do its holds go back.
func TestClientLeaseSizedByTheLimitShare(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, `rules:
  - name: unleased
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 38, window: 1h}
`, time.Second)
	ctx := context.Background()
	req := host.Request{IP: "192.0.2.9"}
	cl := e.ClientLeases()

	l, err := cl.Take(ctx, &host.LeaseRequest{Request: req, Permits: 1000})
	if err != nil || l.Leasable || !strings.Contains(l.Reason, "rule unleased has no lease size") {
		t.Fatalf("lease without a limit share = %+v (%v), want refused for no lease size", l, err)
	}
	if _, err := cl.Take(ctx, &host.LeaseRequest{Request: req, Permits: 1, LimitShare: 1.5}); err == nil {
		t.Fatal("a limit share of 1.5 was taken")
	}

	// A quarter of 38, rounded up: 10; the other 28 of the 38 granted
	// went back at once.
	l, err = cl.Take(ctx, &host.LeaseRequest{Request: req, Permits: 1000, LimitShare: 0.25})
	if err != nil || !l.Leasable || l.Permits != 10 || l.MaxPermits != 10 {
		t.Fatalf("lease = %+v (%v), want 10 permits, a lease size of 10", l, err)
	}
	if got := peekRemaining(t, e, req, "unleased"); got != 28 {
		t.Fatalf("remaining %d after a lease of 10 of 38, want 28", got)
	}

	// Its holds go back only with the share (the rule leases only then).
	ret := host.LeaseReturn{Request: req, Permits: l.Permits, Unused: 7, Holds: l.Holds(), Deadline: time.Now().Add(time.Minute)}
	if n, err := cl.GiveBack(ctx, &ret); err != nil || n != 0 {
		t.Fatalf("gave back %d (%v) without the share, want 0", n, err)
	}
	ret.LimitShare = 0.25
	if n, err := cl.GiveBack(ctx, &ret); err != nil || n != 7 {
		t.Fatalf("gave back %d (%v), want the 7 unused", n, err)
	}
	if got := peekRemaining(t, e, req, "unleased"); got != 35 {
		t.Fatalf("remaining %d after 3 of a lease were used, want 35", got)
	}
}
