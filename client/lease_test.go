package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/client"
)

const leaseRules = `rules:
  - name: quota
    when: request.ip != "" && request.path != "/shaped"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2000, window: 1h}
    lease: 100
  - name: bucket
    when: request.path == "/bucket"
    subject: request.ip
    plugin: tokenbucket
    config: {burst: 1500, rate: 1, per: 1h}
    lease: 50
  - name: shaped
    when: request.path == "/shaped"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1h}
`

// calls counts the requests a test ruled served, by path.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) observe(r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[r.URL.Path]++
}

func (c *calls) get(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

// remaining asks ruled (without leases) what rule has left for req.
func remaining(t *testing.T, url string, req client.CheckRequest, rule string) int64 {
	t.Helper()
	req.Peek = true
	a, err := client.New(url).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range a.Results {
		if r.Rule == rule {
			return r.Remaining
		}
	}
	t.Fatalf("rule %s did not match: %+v", rule, a.Results)
	return 0
}

func TestLeasedChecksAskRuledOncePerLease(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	ctx := context.Background()
	req := ip("192.0.2.1")
	leased := 0
	for i := 0; i < 500; i++ {
		a, err := c.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !a.Allowed || a.StatusCode != http.StatusOK || len(a.Results) != 1 || a.Results[0].Limit != 2000 {
			t.Fatalf("check %d: %+v", i, a)
		}
		if a.Leased {
			leased++
		}
	}
	if leased != 500 || seen.get("/v1/check") != 0 {
		t.Fatalf("%d of 500 decided from leases, %d checks sent to ruled; want all leased", leased, seen.get("/v1/check"))
	}
	// Leases grow from 16 to the rule's 100: a handful of calls.
	if n := seen.get("/v1/lease"); n > 15 {
		t.Fatalf("%d lease calls for 500 decisions with leases of up to 100", n)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// What was leased and not used went back: ruled counts exactly 500.
	if got := remaining(t, r.url, req, "quota"); got != 1500 {
		t.Fatalf("remaining %d after 500 leased decisions and Close, want 1500", got)
	}
	// After Close the client asks ruled per request.
	a, err := c.Check(ctx, req)
	if err != nil || a.Leased || !a.Allowed {
		t.Fatalf("check after Close: %+v, %v; want asked of ruled", a, err)
	}
}

func TestLeasesFallBackWhereARuleCannotLease(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := client.CheckRequest{Request: client.Request{IP: "192.0.2.2", Path: "/shaped"}}
	for i := 1; i <= 4; i++ {
		a, err := c.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Leased || a.Allowed != (i <= 3) {
			t.Fatalf("check %d: leased %v allowed %v; want asked of ruled, the 4th denied", i, a.Leased, a.Allowed)
		}
	}
	// One lease call said no; the rest went straight to /v1/check.
	if n, m := seen.get("/v1/lease"), seen.get("/v1/check"); n != 1 || m != 4 {
		t.Fatalf("%d lease calls and %d checks, want 1 and 4", n, m)
	}
}

// Quota is not stranded in an idle client: what it leased and did not use
// goes back within IdleReturn and a sweep.
func TestIdleLeaseGoesBack(t *testing.T) {
	r := startRuledWith(t, leaseRules, nil)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: 50 * time.Millisecond}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := ip("192.0.2.3")
	for i := 0; i < 3; i++ {
		if a, err := c.Check(context.Background(), req); err != nil || !a.Allowed || !a.Leased {
			t.Fatalf("check %d: %+v %v", i, a, err)
		}
	}
	if got := remaining(t, r.url, req, "quota"); got >= 1997 {
		t.Fatalf("remaining %d right after a lease, want the lease taken", got)
	}
	deadline := time.Now().Add(2 * time.Second)
	for remaining(t, r.url, req, "quota") != 1997 {
		if time.Now().After(deadline) {
			t.Fatalf("remaining %d 2 s after the client went idle, want 1997", remaining(t, r.url, req, "quota"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Clients over-demanding one quota admit at most the limit, and at least
// the limit less one lease per client; after Close, ruled counts exactly
// what they admitted.
func TestClientsSharingAQuotaStayWithinTheBound(t *testing.T) {
	for _, tc := range []struct {
		name, path, rule string
		limit, lease     int64
	}{
		{"fixedwindow", "/", "quota", 2000, 100},
		{"tokenbucket", "/bucket", "bucket", 1500, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRuledWith(t, leaseRules, nil)
			req := client.CheckRequest{Request: client.Request{IP: "192.0.2.4", Path: tc.path}}
			const clients, workers = 4, 4
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			cs := make([]*client.Client, clients)
			for i := range cs {
				cs[i] = client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func(c *client.Client) {
						defer wg.Done()
						for {
							a, err := c.Check(context.Background(), req)
							if err != nil {
								t.Error(err)
								return
							}
							if !a.Allowed {
								denied.Add(1)
								return
							}
							admitted.Add(1)
						}
					}(cs[i])
				}
			}
			wg.Wait()
			got := admitted.Load()
			if got > tc.limit || got < tc.limit-clients*tc.lease {
				t.Fatalf("admitted %d, want within [%d, %d]", got, tc.limit-clients*tc.lease, tc.limit)
			}
			for _, c := range cs {
				if err := c.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			left := remaining(t, r.url, req, tc.rule)
			if tc.rule == "quota" && left != tc.limit-got {
				t.Fatalf("ruled has %d left after %d admitted and every lease closed, want %d", left, got, tc.limit-got)
			}
			t.Logf("%d clients admitted %d of %d (%d left in ruled)", clients, got, tc.limit, left)
		})
	}
}

// A denial the rule's plugin declares firm is kept by the client for up to
// a second: ruled is not asked per request while the quota is used up.
func TestLeasedDenialIsKept(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := ip("192.0.2.5")
	ctx := context.Background()
	allowed, denied := 0, 0
	for i := 0; i < 2300; i++ {
		a, err := c.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed {
			allowed++
			continue
		}
		denied++
		if !a.Leased || a.StatusCode != http.StatusTooManyRequests || a.RetryAfter <= 0 || a.RetryAfter > time.Hour {
			t.Fatalf("denial %d: %+v", denied, a)
		}
	}
	if allowed != 2000 || denied != 300 {
		t.Fatalf("allowed %d denied %d, want 2000 and 300", allowed, denied)
	}
	if n := seen.get("/v1/lease"); n > 40 || seen.get("/v1/check") != 0 {
		t.Fatalf("%d lease calls, %d checks for 2300 decisions", n, seen.get("/v1/check"))
	}
}

// BenchmarkLeasedCheck is decisions made in-process from leases, from
// parallel goroutines, against ruled and Redis on this machine.
func BenchmarkLeasedCheck(b *testing.B) {
	r := startRuledWith(b, "rules:\n  - name: big\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 1000000000000, window: 1h}\n    lease: 100000\n", nil)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{MaxPermits: 100000}))
	defer c.Close(context.Background())
	req := client.CheckRequest{Request: client.Request{IP: "192.0.2.9", Path: "/items", Method: "GET"}, Attrs: map[string]string{"tenant": "acme"}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if a, err := c.Check(context.Background(), req); err != nil || !a.Allowed {
				b.Error(a, err)
				return
			}
		}
	})
}

// The middleware decides from leases when its client has them, and its
// answers carry the RateLimit fields ruled would have sent.
func TestMiddlewareWithLeases(t *testing.T) {
	var seen calls
	r := startRuledWith(t, `rules:
  - name: small
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1h}
    lease: 2
`, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	a := newApp(t, c, client.MiddlewareOptions{})
	for i := 1; i <= 3; i++ {
		resp, _ := a.get(t, "/", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") != `"small";q=3;w=3600` ||
			!strings.HasPrefix(resp.Header.Get("RateLimit"), `"small";r=`) || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	resp, _ := a.get(t, "/", nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.HasPrefix(resp.Header.Get("RateLimit"), `"small";r=0;t=`) {
		t.Fatalf("4th request: %d %v", resp.StatusCode, resp.Header)
	}
	if n := seen.get("/v1/check"); n != 0 || seen.get("/v1/lease") == 0 {
		t.Fatalf("%d checks and %d lease calls, want leases only", n, seen.get("/v1/lease"))
	}
}

// A reload reaches a client with leases within a second: it asks again
// what its requests match at least once a second, and leased permits end
// within a second of being taken.
func TestLeasesFollowAReloadWithinASecond(t *testing.T) {
	r := startRuledWith(t, "rules:\n  - name: before\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 1000000, window: 1h}\n    lease: 100\n", nil)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := ip("192.0.2.20")
	ruleOf := func() string {
		a, err := c.Check(context.Background(), req)
		if err != nil || len(a.Results) != 1 {
			t.Fatalf("check: %+v %v", a, err)
		}
		return a.Results[0].Rule
	}
	for i := 0; i < 50; i++ {
		if got := ruleOf(); got != "before" {
			t.Fatalf("rule %q before the reload", got)
		}
	}
	path := filepath.Join(t.TempDir(), "after.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: after\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 1000000, window: 1h}\n    lease: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.engine.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	for ruleOf() != "after" {
		if time.Since(reloaded) > 1250*time.Millisecond {
			t.Fatalf("the client still decides by the old rules %v after the reload", time.Since(reloaded))
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("new rules in use %v after the reload", time.Since(reloaded))
}

// A client keeps a firm denial for at most a second: quota freed in ruled
// (here by an operator's reset) is found within it.
func TestLeasedDenialLastsAtMostASecond(t *testing.T) {
	r := startRuledWith(t, "rules:\n  - name: small\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 3, window: 1h}\n    lease: 2\n", nil)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := ip("192.0.2.21")
	allowed := func() bool {
		a, err := c.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return a.Allowed
	}
	for allowed() {
	}
	if _, err := r.engine.Counters().Reset(context.Background(), "small", "192.0.2.21"); err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	for !allowed() {
		if time.Since(reset) > 1250*time.Millisecond {
			t.Fatalf("still denied %v after the quota was reset", time.Since(reset))
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("allowed again %v after the reset", time.Since(reset))
}

// A request seen for the first time takes a permit for itself alone: a
// stream of distinct requests (each with its own request id) takes no
// permits it would leave unused.
func TestDistinctRequestsTakeNoMoreThanTheyUse(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	for i := 0; i < 50; i++ {
		req := client.CheckRequest{Request: client.Request{IP: "192.0.2.30"}, Attrs: map[string]string{"request-id": fmt.Sprint(i)}}
		if a, err := c.Check(context.Background(), req); err != nil || !a.Allowed {
			t.Fatalf("check %d: %+v %v", i, a, err)
		}
	}
	if got := remaining(t, r.url, ip("192.0.2.30"), "quota"); got != 2000-50 {
		t.Fatalf("remaining %d after 50 distinct requests, want %d: none taken ahead", got, 2000-50)
	}
	if n := seen.get("/v1/lease"); n != 50 {
		t.Fatalf("%d lease calls for 50 distinct requests, want 50", n)
	}
}

// A request for more hits than a lease gives goes to ruled, which denies
// it outright: leases would only drain the quota gathering its hits.
func TestRequestsOfManyHitsAreNotLeased(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := client.CheckRequest{Request: client.Request{IP: "192.0.2.40", Path: "/bucket"}, Hits: 3000}
	a, err := c.Check(context.Background(), req)
	if err != nil || a.Allowed || a.Leased {
		t.Fatalf("3000 hits against a burst of 1500: %+v %v; want denied by ruled", a, err)
	}
	req.Hits = 2
	if a, err = c.Check(context.Background(), req); err != nil || !a.Allowed || a.Leased {
		t.Fatalf("2 hits: %+v %v; want allowed by ruled", a, err)
	}
	if n, m := seen.get("/v1/lease"), seen.get("/v1/check"); n != 0 || m != 2 {
		t.Fatalf("%d lease calls and %d checks, want 0 and 2", n, m)
	}
	probe := client.CheckRequest{Request: req.Request}
	if got := remaining(t, r.url, probe, "bucket"); got != 1500-2 {
		t.Fatalf("bucket has %d left, want %d: only the 2 hits taken", got, 1500-2)
	}
}

// A Check whose context ends during its lease call is an UnreachableError
// and leaves the request leasing: the caller gave up, ruled did not fail.
func TestCancelledCheckKeepsLeasing(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := ip("192.0.2.41")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Check(ctx, req)
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled check: %v (%T), want an UnreachableError of context.Canceled", err, err)
	}
	for i := 0; i < 20; i++ {
		if a, err := c.Check(context.Background(), req); err != nil || !a.Allowed || !a.Leased {
			t.Fatalf("check %d after a cancelled one: %+v %v; want leased", i, a, err)
		}
	}
	if n := seen.get("/v1/check"); n != 0 {
		t.Fatalf("%d checks sent to ruled after a cancelled check, want 0", n)
	}
}

// A Check waiting for another's lease call ends with its context, with an
// UnreachableError.
func TestCheckWaitingForALeaseEndsWithItsContext(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	var blocked atomic.Bool
	r := startRuledWith(t, leaseRules, func(r *http.Request) {
		if r.URL.Path == "/v1/lease" && blocked.CompareAndSwap(false, true) {
			arrived <- struct{}{}
			<-release
		}
	})
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := ip("192.0.2.42")
	first := make(chan error, 1)
	go func() {
		a, err := c.Check(context.Background(), req)
		if err == nil && (!a.Allowed || !a.Leased) {
			err = fmt.Errorf("answer %+v, want leased", a)
		}
		first <- err
	}()
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Check(ctx, req)
	close(release)
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || !errors.Is(err, context.DeadlineExceeded) || !ue.Timeout() {
		t.Fatalf("check that timed out waiting: %v (%T), want an UnreachableError of context.DeadlineExceeded", err, err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the check that leased: %v", err)
	}
	if a, err := c.Check(context.Background(), req); err != nil || !a.Leased {
		t.Fatalf("check after: %+v %v; want leased", a, err)
	}
}

// The requests a client remembers are bounded: past the bound a new
// request goes to ruled per request.
func TestLeasesRememberBoundedRequests(t *testing.T) {
	var seen calls
	r := startRuledWith(t, leaseRules, seen.observe)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	client.SetLeaseBounds(c, 1, time.Hour)
	const n = 100
	for i := 0; i < n; i++ {
		req := client.CheckRequest{Request: client.Request{IP: "192.0.2.43"}, Attrs: map[string]string{"request-id": fmt.Sprint(i)}}
		if a, err := c.Check(context.Background(), req); err != nil || !a.Allowed {
			t.Fatalf("check %d: %+v %v", i, a, err)
		}
	}
	kept := client.RememberedRequests(c)
	if kept == 0 || kept > client.LeaseShards {
		t.Fatalf("%d requests remembered, want 1 to %d (one per shard)", kept, client.LeaseShards)
	}
	if l, ch := seen.get("/v1/lease"), seen.get("/v1/check"); l != kept || ch != n-kept {
		t.Fatalf("%d lease calls and %d checks, want %d and %d", l, ch, kept, n-kept)
	}
}

// The sweeper forgets requests gone idle, which frees room for others.
func TestIdleRequestsAreForgotten(t *testing.T) {
	r := startRuledWith(t, leaseRules, nil)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	client.SetLeaseBounds(c, 1000, 100*time.Millisecond)
	for i := 0; i < 5; i++ {
		req := client.CheckRequest{Request: client.Request{IP: "192.0.2.44"}, Attrs: map[string]string{"request-id": fmt.Sprint(i)}}
		if a, err := c.Check(context.Background(), req); err != nil || !a.Allowed || !a.Leased {
			t.Fatalf("check %d: %+v %v", i, a, err)
		}
	}
	if client.RememberedRequests(c) == 0 {
		t.Fatal("no request remembered right after its checks")
	}
	deadline := time.Now().Add(2 * time.Second)
	for client.RememberedRequests(c) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still remembered 2 s after they went idle", client.RememberedRequests(c))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A leased denial by a block (limit 0) carries its RateLimit fields, as
// ruled's own answer does.
func TestLeasedDenialByABlockHasRateLimitFields(t *testing.T) {
	r := startRuledWith(t, `rules:
  - name: blocked
    when: request.path == "/blocked"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 0, window: 1h}
    lease: 2
  - name: minute
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
    lease: 2
`, nil)
	c := client.New(r.url, client.WithLeases(client.LeaseOptions{IdleReturn: time.Hour}))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	req := client.CheckRequest{Request: client.Request{IP: "192.0.2.45", Path: "/blocked"}}
	a, err := c.Check(context.Background(), req)
	if err != nil || a.Allowed || !a.Leased {
		t.Fatalf("blocked check: %+v %v; want a leased denial", a, err)
	}
	ruled, err := client.New(r.url).Check(context.Background(), req)
	if err != nil || ruled.Allowed {
		t.Fatalf("ruled's check: %+v %v", ruled, err)
	}
	h, want := a.RateLimitHeader(), ruled.RateLimitHeader()
	if got := h.Get("RateLimit-Policy"); got != want.Get("RateLimit-Policy") || got != `"blocked";q=0;w=3600` {
		t.Fatalf("RateLimit-Policy %q, ruled's %q", got, want.Get("RateLimit-Policy"))
	}
	item := regexp.MustCompile(`^"blocked";r=0;t=(\d+)$`)
	for _, f := range []http.Header{h, want} {
		m := item.FindStringSubmatch(f.Get("RateLimit"))
		if m == nil || m[1] != f.Get("Retry-After") {
			t.Fatalf("RateLimit %q Retry-After %q (ruled's: %q %q), want the block listed", h.Get("RateLimit"), h.Get("Retry-After"), want.Get("RateLimit"), want.Get("Retry-After"))
		}
		if s, _ := strconv.Atoi(m[1]); s < 1 || s > 3600 {
			t.Fatalf("RateLimit %q", f.Get("RateLimit"))
		}
	}
}
