package grpcapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/sdk"
)

// testRules are the fixture's rules. Their windows are moved (offset) so
// that each begins at the call (redistest.WindowOffset): the calls of a
// test made within a window after it, the fixture's start included, fall
// in one window.
func testRules() string {
	return fmt.Sprintf(`rules:
  - name: per-user
    when: attrs["domain"] == "edge" && attrs["user"] != ""
    subject: attrs["user"]
    plugin: fixedwindow
    config: {limit: 3, window: 1m, offset: %s}
  - name: per-ip
    when: request.ip != ""
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 10s, offset: %s}
`, redistest.WindowOffset(time.Minute), redistest.WindowOffset(10*time.Second))
}

type fixture struct {
	redis  *redistest.Server
	engine *host.Engine
	rls    rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	health *grpcapi.Health
	// notReady is what the health service's readiness says; nil: ready.
	notReady atomic.Pointer[error]
}

// newFixture serves the rate limit service of a real engine on a real
// redis-server over a loopback gRPC port.
func newFixture(t *testing.T) *fixture { return newFixtureTimeout(t, 2*time.Second) }

// newFixtureTimeout is newFixture with a Redis call time-out of timeout.
func newFixtureTimeout(t *testing.T, timeout time.Duration) *fixture {
	return newFixtureOf(t, timeout, testRules())
}

// newFixtureOf is newFixture with a Redis call time-out of timeout and
// rules of its own.
func newFixtureOf(t *testing.T, timeout time.Duration, rules string) *fixture {
	t.Helper()
	rs := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(rc, capability.Options{Timeout: timeout}), Plugins: builtin.All()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{redis: rs, engine: e, health: grpcapi.NewHealth(nil)}
	srv := grpcapi.NewServer(e, f.health, nil, grpcapi.ServiceOptions{})
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	go f.health.Follow(ctx, func(context.Context) error {
		if err := f.notReady.Load(); err != nil {
			return *err
		}
		return nil
	}, 10*time.Millisecond)
	t.Cleanup(func() { cancel(); f.health.EndWatches(); srv.GracefulStop() })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f.rls, f.conn = rlsv3.NewRateLimitServiceClient(conn), conn
	return f
}

func descriptor(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (f *fixture) ask(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := f.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

// remaining peeks at a rule's remaining units for a subject.
func (f *fixture) remaining(t *testing.T, user, ip string) (byUser, byIP int64) {
	t.Helper()
	res := f.engine.Check(context.Background(), &host.CheckRequest{
		Request: host.Request{IP: ip}, Attrs: map[string]string{"domain": "edge", "user": user}, Hits: 0})
	byUser, byIP = -1, -1
	for _, rr := range res.Results {
		switch rr.Rule {
		case "per-user":
			byUser = rr.Remaining
		case "per-ip":
			byIP = rr.Remaining
		}
	}
	return byUser, byIP
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

func TestOKThenOverLimit(t *testing.T) {
	f := newFixture(t)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("user", "alice")}}
	for i := 1; i <= 3; i++ {
		resp := f.ask(t, req)
		st := resp.Statuses[0]
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v", i, resp)
		}
		cl := st.CurrentLimit
		if cl.GetName() != "per-user" || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.GetUnitMultiplier() != nil {
			t.Fatalf("call %d: current limit %v", i, cl)
		}
		if st.LimitRemaining != uint32(3-i) {
			t.Fatalf("call %d: remaining %d, want %d", i, st.LimitRemaining, 3-i)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
			t.Fatalf("call %d: duration until reset %v", i, d)
		}
		if got := header(resp, "ratelimit-policy"); got != `"per-user";q=3;w=60` {
			t.Fatalf("call %d: ratelimit-policy %q", i, got)
		}
	}
	resp := f.ask(t, req)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th call: %v", resp)
	}
	if resp.Statuses[0].LimitRemaining != 0 || header(resp, "retry-after") == "" || header(resp, "ratelimit") == "" {
		t.Fatalf("4th call: %v", resp)
	}
	// Another domain: no rule matches, so OK without a current limit.
	other := f.ask(t, &rlsv3.RateLimitRequest{Domain: "other", Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("user", "alice")}})
	if other.OverallCode != rlsv3.RateLimitResponse_OK || other.Statuses[0].CurrentLimit != nil || len(other.ResponseHeadersToAdd) != 0 {
		t.Fatalf("other domain: %v", other)
	}
}

// TestDenialReportsNoQuotaLeft: a min_gap denial leaves the rates' quota
// unspent, yet the status and the headers say none is left until the
// retry-after, as the HTTP API does.
func TestDenialReportsNoQuotaLeft(t *testing.T) {
	f := newFixtureOf(t, 2*time.Second, `rules:
  - name: login-gap
    subject: request.ip
    plugin: sortedset
    config: {limit: 5, window: 1m, min_gap: 10s}
`)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("remote_address", "192.0.2.8")}}
	if resp := f.ask(t, req); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("first call: %v", resp)
	}
	resp := f.ask(t, req)
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 {
		t.Fatalf("within min_gap: %v", resp)
	}
	if d := st.DurationUntilReset.AsDuration(); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("duration until reset %s, want the min_gap's retry-after (9s..10s)", d)
	}
	if rl, ra := header(resp, "ratelimit"), header(resp, "retry-after"); rl != `"login-gap";r=0;t=10` || ra != "10" {
		t.Fatalf("ratelimit %q, retry-after %q", rl, ra)
	}
}

func TestSeveralDescriptorsInOneCall(t *testing.T) {
	f := newFixture(t)
	ask := func(ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		return f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
	}
	user := descriptor("user", "bob")
	ip := descriptor("remote_address", "192.0.2.7")
	resp := ask(user, ip)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetName() != "per-user" ||
		resp.Statuses[1].CurrentLimit.GetName() != "per-ip" {
		t.Fatalf("first call: %v", resp)
	}
	// remote_address became request.ip; the 10s window is 10 × SECOND.
	if cl := resp.Statuses[1].CurrentLimit; cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetUnitMultiplier().GetValue() != 10 {
		t.Fatalf("per-ip limit %v", cl)
	}
	// Every rule is reported in the headers, in descriptor order.
	if got := header(resp, "ratelimit"); !strings.HasPrefix(got, `"per-user";r=2;t=`) || !strings.Contains(got, `, "per-ip";r=1;t=`) {
		t.Fatalf("ratelimit header %q", got)
	}
	ask(ip) // per-ip now exhausted
	if u, i := f.remaining(t, "bob", "192.0.2.7"); u != 2 || i != 0 {
		t.Fatalf("remaining user %d ip %d, want 2 and 0", u, i)
	}

	// user first: allowed, then refunded because ip is over the limit.
	resp = ask(user, ip)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("user, ip: %v", resp)
	}
	if u, _ := f.remaining(t, "bob", "192.0.2.7"); u != 2 {
		t.Fatalf("user quota used by a denied call: remaining %d, want 2", u)
	}
	// ip first: over the limit, so user is only peeked at.
	resp = ask(ip, user)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].LimitRemaining != 2 {
		t.Fatalf("ip, user: %v", resp)
	}
	if u, _ := f.remaining(t, "bob", "192.0.2.7"); u != 2 {
		t.Fatalf("user quota used after a denial: remaining %d, want 2", u)
	}
}

func TestHitsAddend(t *testing.T) {
	f := newFixture(t)
	user := func(name string) *rlcommonv3.RateLimitDescriptor { return descriptor("user", name) }

	// Request-level hits_addend: 2 units.
	resp := f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlcommonv3.RateLimitDescriptor{user("carol")}})
	if resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2: %v", resp)
	}
	// 0 means 1.
	resp = f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 0, Descriptors: []*rlcommonv3.RateLimitDescriptor{user("dave")}})
	if resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("hits_addend 0: %v", resp)
	}
	// A descriptor's own hits_addend overrides the request's.
	d := user("erin")
	d.HitsAddend = wrapperspb.UInt64(3)
	resp = f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*rlcommonv3.RateLimitDescriptor{d, user("frank")}})
	if resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[1].LimitRemaining != 2 || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("descriptor hits_addend 3: %v", resp)
	}
	// More than is left is over the limit.
	resp = f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 4, Descriptors: []*rlcommonv3.RateLimitDescriptor{user("gina")}})
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits_addend 4 of 3: %v", resp)
	}
	// is_negative_hits gives units back.
	d = user("erin")
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(2), true
	f.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if u, _ := f.remaining(t, "erin", ""); u != 2 {
		t.Fatalf("after refunding 2 of 3: remaining %d, want 2", u)
	}
	// An absurd hits_addend is an invalid argument.
	d = user("hank")
	d.HitsAddend = wrapperspb.UInt64(1 << 40)
	_, err := f.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("huge hits_addend: %v, want InvalidArgument", err)
	}
}

// TestHealthService: the health service's "" and rate limit service
// follow readiness, on Check and on Watch streams, and Shutdown makes them
// NOT_SERVING for good; EndWatches ends the Watch streams.
func TestHealthService(t *testing.T) {
	f := newFixture(t)
	hc := healthpb.NewHealthClient(f.conn)
	names := []string{"", grpcapi.RateLimitServiceName}
	if grpcapi.RateLimitServiceName != "envoy.service.ratelimit.v3.RateLimitService" {
		t.Fatalf("RateLimitServiceName %q", grpcapi.RateLimitServiceName)
	}
	// checkIs polls Check until every service reports want.
	checkIs := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range names {
			var got any
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
				if err == nil && resp.Status == want {
					break
				}
				got = fmt.Sprint(resp, err)
				if time.Now().After(deadline) {
					t.Fatalf("Check(%q): %v, want %v within 5s", name, got, want)
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watches := map[string]healthpb.Health_WatchClient{}
	for _, name := range names {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		watches[name] = w
	}
	// watchIs reads each Watch stream until it reports want.
	watchIs := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for name, w := range watches {
			for {
				resp, err := w.Recv()
				if err != nil {
					t.Fatalf("Watch(%q): %v, want %v", name, err, want)
				}
				if resp.Status == want {
					break
				}
			}
		}
	}
	checkIs(healthpb.HealthCheckResponse_SERVING)
	watchIs(healthpb.HealthCheckResponse_SERVING)
	down := errors.New("redis down")
	f.notReady.Store(&down)
	checkIs(healthpb.HealthCheckResponse_NOT_SERVING)
	watchIs(healthpb.HealthCheckResponse_NOT_SERVING)
	f.notReady.Store(nil)
	checkIs(healthpb.HealthCheckResponse_SERVING)
	watchIs(healthpb.HealthCheckResponse_SERVING)

	f.health.Shutdown()
	checkIs(healthpb.HealthCheckResponse_NOT_SERVING)
	watchIs(healthpb.HealthCheckResponse_NOT_SERVING)
	time.Sleep(50 * time.Millisecond) // Follow, still running, finds the daemon ready
	checkIs(healthpb.HealthCheckResponse_NOT_SERVING)
	f.health.EndWatches()
	for name, w := range watches {
		for i := 0; ; i++ {
			resp, err := w.Recv()
			if err != nil {
				break
			}
			if resp.Status != healthpb.HealthCheckResponse_NOT_SERVING || i == 3 {
				t.Fatalf("Watch(%q) after EndWatches: %v, want at most a last NOT_SERVING and the stream ended", name, resp)
			}
		}
	}
}

func TestRateLimitOf(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		mult   uint32 // 0: no multiplier
	}{
		{0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0},
		{300 * time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
		{1500 * time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 2},
		{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
		{10 * time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 10},
		{90 * time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 90},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0},
		{15 * time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, 15},
		{2 * time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, 2},
		{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY, 0},
		{14 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK, 2},
		{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH, 0},
		{60 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH, 2},
		{31 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY, 31},
		{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR, 0},
	} {
		rl := grpcapi.RateLimitOf("r", 5, tc.window)
		if rl.Unit != tc.unit || rl.GetUnitMultiplier().GetValue() != tc.mult || rl.RequestsPerUnit != 5 || rl.Name != "r" {
			t.Errorf("window %v: %v, want unit %v × %d", tc.window, rl, tc.unit, tc.mult)
		}
	}
	if rl := grpcapi.RateLimitOf("r", 1<<40, time.Second); rl.RequestsPerUnit != 1<<32-1 {
		t.Errorf("huge limit: %d", rl.RequestsPerUnit)
	}
}

// TestOneBoundPerRequest: with Redis stopped, a request of eight
// descriptors is answered within the engine's decision time-out, which its
// checks share, not within one time-out per descriptor; the descriptors
// reached after it follow on_error (allow) at once.
func TestOneBoundPerRequest(t *testing.T) {
	const call = 100 * time.Millisecond
	f := newFixtureTimeout(t, call)
	bound := f.engine.DecisionTimeout()
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := range 8 {
		req.Descriptors = append(req.Descriptors, descriptor("user", fmt.Sprintf("u%d", i)))
	}
	f.ask(t, req)
	f.redis.Pause()
	defer f.redis.Resume()
	start := time.Now()
	resp := f.ask(t, req)
	took := time.Since(start)
	t.Logf("8 descriptors on a stopped Redis: answered in %v (decision time-out %v, one call %v)", took, bound, call)
	if took > bound+100*time.Millisecond {
		t.Fatalf("answered in %v, want within the decision time-out %v (8 calls would take %v)", took, bound, 8*call)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("overall %v, want OK (on_error: allow)", resp.OverallCode)
	}
}

// refusingChecker grants every descriptor except those of user "bad",
// which it refuses as bad input, and records the hits it was asked for.
type refusingChecker struct {
	mu   sync.Mutex
	hits []int64
}

func (c *refusingChecker) CheckEach(_ context.Context, reqs []*host.CheckRequest) []host.Result {
	out := make([]host.Result, len(reqs))
	for i, req := range reqs {
		c.mu.Lock()
		c.hits = append(c.hits, req.Hits)
		c.mu.Unlock()
		if req.Attrs["user"] == "bad" {
			out[i] = host.Result{BadRequest: sdk.BadRequest("no lease id")}
			break
		}
		out[i] = host.Result{Allowed: true, Results: []host.RuleResult{{Rule: "r", Decision: sdk.Decision{Allowed: true, Granted: req.Hits, Limit: 5}}}}
	}
	return out
}

// TestBadInputIsInvalidArgument: a descriptor a plugin refuses as bad input
// fails the call with InvalidArgument naming the descriptor and the
// problem.
func TestBadInputIsInvalidArgument(t *testing.T) {
	c := &refusingChecker{}
	svc := grpcapi.NewRateLimitService(c, nil, grpcapi.ServiceOptions{})
	_, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("user", "good"), descriptor("user", "bad")}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[1]") || !strings.Contains(err.Error(), "no lease id") {
		t.Fatalf("err %v, want InvalidArgument naming the descriptor and the problem", err)
	}
	if want := []int64{1, 1}; !slices.Equal(c.hits, want) {
		t.Fatalf("hits asked %v, want %v", c.hits, want)
	}
}

// With RefuseRefunds (serve --client-refunds=admin or deny) a descriptor
// with is_negative_hits is refused with PermissionDenied and gives nothing
// back; plain descriptors are still decided.
func TestRefusedRefunds(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcapi.NewServer(f.engine, grpcapi.NewHealth(nil), nil, grpcapi.ServiceOptions{RefuseRefunds: true})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.GracefulStop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rls := rlsv3.NewRateLimitServiceClient(conn)
	user := func(name string) *rlcommonv3.RateLimitDescriptor { return descriptor("user", name) }
	ctx := context.Background()
	if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{user("ivy")}}); err != nil {
		t.Fatalf("a plain descriptor: %v", err)
	}
	d := user("ivy")
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
	_, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("is_negative_hits: %v, want PermissionDenied", err)
	}
	if u, _ := f.remaining(t, "ivy", ""); u != 2 {
		t.Fatalf("remaining %d after one hit and a refused refund, want 2", u)
	}
}

// recordingChecker admits every descriptor and records the checks.
type recordingChecker struct {
	mu   sync.Mutex
	reqs []host.CheckRequest
}

func (c *recordingChecker) CheckEach(_ context.Context, reqs []*host.CheckRequest) []host.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]host.Result, len(reqs))
	for i, req := range reqs {
		c.reqs = append(c.reqs, *req)
		out[i] = host.Result{Allowed: true}
	}
	return out
}

// TestLeaseIDEntry: a descriptor's lease_id entry is the check's lease id,
// not its dedup id, neither an attr nor one of the descriptor's keys (rules
// match the descriptor as if it were not there), and one longer than
// host.MaxDedupID is InvalidArgument.
func TestLeaseIDEntry(t *testing.T) {
	c := &recordingChecker{}
	svc := grpcapi.NewRateLimitService(c, nil, grpcapi.ServiceOptions{})
	for _, d := range []*rlcommonv3.RateLimitDescriptor{
		descriptor("route", "orders", "lease_id", "req-1"),
		descriptor("lease_id", "req-2", "route", "orders", "user", "ann"),
		descriptor("lease_id", "req-3"),
	} {
		if _, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	want := []struct{ id, keys string }{{"req-1", "route"}, {"req-2", "route,user"}, {"req-3", ""}}
	for i, w := range want {
		got := c.reqs[i]
		if _, ok := got.Attrs["lease_id"]; got.LeaseID != w.id || got.DedupID != "" || got.Attrs[grpcapi.KeysAttr] != w.keys || ok {
			t.Errorf("descriptor %d: lease id %q, keys %q, attrs %v; want %q, %q and no lease_id attr", i, got.LeaseID, got.Attrs[grpcapi.KeysAttr], got.Attrs, w.id, w.keys)
		}
	}
	_, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("route", "orders", "lease_id", strings.Repeat("x", host.MaxDedupID+1))}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lease_id") {
		t.Fatalf("a lease_id of %d bytes: %v, want InvalidArgument naming lease_id", host.MaxDedupID+1, err)
	}
}
