package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3" // the bucket id's header input
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	rlqsclient "github.com/ruled-dev/ruled/examples/clients/rlqs"
	"github.com/ruled-dev/ruled/host/rlqs"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// rlqsRules are the rules the RLQS tests serve: leased quotas (a fixed
// window and a token bucket; failing open, closed and local), a blocked
// route, an exempt one, routes whose rules cannot lease (on_error: deny
// and allow), and nothing for the rest.
const rlqsRules = `rules:
  - name: vip
    when: attrs.route == "vip"
    exempt: true
  - name: api
    when: attrs.route == "api"
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
    lease: 10
  - name: bucket
    when: attrs.route == "bucket"
    subject: attrs.tenant
    plugin: tokenbucket
    config: {burst: 100, rate: 1, per: 1h}
    lease: 10
  - name: api-closed
    when: attrs.route == "api-closed"
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
    lease: 10
    on_error: deny
  - name: api-local
    when: attrs.route == "api-local"
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
    lease: 10
    on_error: local
  - name: blocked
    when: attrs.route == "blocked"
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: 0, window: 1h}
    lease: 20
  - name: unleased
    when: attrs.route == "unleased"
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: 50, window: 1h}
    on_error: deny
  - name: shaped
    when: attrs.route == "shaped"
    subject: attrs.tenant
    plugin: leaky
    config: {capacity: 5, rate: 10, per: 1s}
    on_error: deny
  - name: shaped-open
    when: attrs.route == "shaped-open"
    subject: attrs.tenant
    plugin: leaky
    config: {capacity: 5, rate: 10, per: 1s}
    on_error: allow
`

// rlqsDaemon starts the binary with --rlqs-listen and a managed Redis
// (unless args name another), on rlqsRules in the file rules.
func rlqsDaemon(t *testing.T, rules string, args ...string) (*daemon, *grpc.ClientConn) {
	t.Helper()
	return rlqsDaemonOn(t, rules, freePort(t), args...)
}

// rlqsDaemonOn is rlqsDaemon serving RLQS on addr.
func rlqsDaemonOn(t *testing.T, rules, addr string, args ...string) (*daemon, *grpc.ClientConn) {
	t.Helper()
	writeFile(t, filepath.Dir(rules), filepath.Base(rules), rlqsRules)
	d := spawnDaemonAt(t, rules, append([]string{"--rlqs-listen", addr}, args...)...)
	d.waitReady(15 * time.Second)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return d, conn
}

// rlqsClient is a client reporting every interval on conn.
func rlqsClient(t *testing.T, conn *grpc.ClientConn, interval time.Duration) *rlqsclient.Client {
	t.Helper()
	c, err := rlqsclient.New(conn, rlqsclient.Options{Domain: "edge", ReportInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitAssignment waits until the client holds an assignment for id that
// has prefix, and returns it.
func waitAssignment(t *testing.T, c *rlqsclient.Client, id map[string]string, prefix string) string {
	t.Helper()
	return waitAssignmentWithin(t, c, id, prefix, 10*time.Second)
}

// waitAssignmentWithin is waitAssignment, within d.
func waitAssignmentWithin(t *testing.T, c *rlqsclient.Client, id map[string]string, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		a := c.Assignment(id)
		if strings.HasPrefix(a, prefix) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("bucket %v: assignment %q, want %s…", id, a, prefix)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRLQSAssignsWhatTheRulesSay: each bucket's first request is reported
// and the real binary assigns what its rules say: nothing limits a bucket
// no rule matches or an exempt rule admits (ALLOW_ALL), a limit of 0 is
// DENY_ALL, a rule that cannot lease follows its on_error (deny: DENY_ALL,
// allow: ALLOW_ALL), a leased quota is a token bucket of the lease size,
// and a rule without lease: N one of --rlqs-lease-share of its limit (a
// tenth by default; with 0 it cannot lease).
func TestRLQSAssignsWhatTheRulesSay(t *testing.T) {
	for _, run := range []struct {
		args     []string
		unleased string
	}{{nil, "token_bucket max=5 "}, {[]string{"--rlqs-lease-share", "0.5"}, "token_bucket max=25 "}, {[]string{"--rlqs-lease-share", "0"}, "deny_all"}} {
		t.Run(strings.Join(append([]string{"share"}, run.args...), " "), func(t *testing.T) {
			_, conn := rlqsDaemon(t, filepath.Join(t.TempDir(), "rules.yaml"), run.args...)
			waitFor(t, 15*time.Second, "gRPC health SERVING on the RLQS listener", func() bool {
				h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
				return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING
			})
			c := rlqsClient(t, conn, time.Second)
			for _, tc := range []struct {
				route, want string
			}{{"free", "allow_all"}, {"vip", "allow_all"}, {"blocked", "deny_all"}, {"shaped", "deny_all"},
				{"shaped-open", "allow_all"}, {"api", "token_bucket max=10 "}, {"unleased", run.unleased}} {
				id := map[string]string{"route": tc.route, "tenant": "acme"}
				if !c.Allow(id) {
					t.Errorf("%s: the first request denied: Envoy admits while a bucket has no assignment", tc.route)
				}
				waitAssignment(t, c, id, tc.want)
			}
		})
	}
}

// counterUsed is what the rule's counter for subject holds, from GET
// /v1/admin/counters.
func counterUsed(t *testing.T, d *daemon, rule, subject string) int64 {
	t.Helper()
	return counterUsedAt(t, d.base, rule, subject)
}

// counterUsedAt is counterUsed of the HTTP API at base.
func counterUsedAt(t *testing.T, base, rule, subject string) int64 {
	t.Helper()
	resp, err := http.Get(base + "/v1/admin/counters?rule=" + url.QueryEscape(rule))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var page struct {
		Counters []struct {
			Subject string `json:"subject"`
			Used    int64  `json:"used"`
		} `json:"counters"`
	}
	if err := json.Unmarshal(body, &page); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("counters: %d %s (%v)", resp.StatusCode, body, err)
	}
	for _, c := range page.Counters {
		if c.Subject == subject {
			return c.Used
		}
	}
	return 0
}

// TestRLQSClientsStayWithinTheLimit: two and eight clients asking far more
// than a fixed window's or a token bucket's limit admit no more than the
// limit between them (units are taken before the clients may grant them)
// and the requests they admitted without an assignment, and once they
// have stopped, reported and gone, ruled's count is what they admitted, up
// to the limit: what was taken and not granted goes back, and what they
// admitted without an assignment (each client's first requests) is
// counted from their reports.
func TestRLQSClientsStayWithinTheLimit(t *testing.T) {
	for _, tc := range []struct {
		rule  string
		turns bool // a window may turn in the run: the limit applies again
	}{{"api", true}, {"bucket", false}} {
		for _, clients := range []int{2, 8} {
			t.Run(fmt.Sprintf("%s/%d clients", tc.rule, clients), func(t *testing.T) {
				clientsStayWithinTheLimit(t, tc.rule, tc.turns, clients)
			})
		}
	}
}

// clientsStayWithinTheLimit runs TestRLQSClientsStayWithinTheLimit's
// clients on rule, whose limit is 100 an hour: a fixed window, or a token
// bucket of 100 refilled by 1 an hour (no whole permit in the run).
func clientsStayWithinTheLimit(t *testing.T, rule string, turns bool, clients int) {
	d, conn := rlqsDaemon(t, filepath.Join(t.TempDir(), "rules.yaml"))
	const limit, window = 100, time.Hour
	tenant := fmt.Sprintf("t%d", clients)
	id := map[string]string{"route": rule, "tenant": tenant}
	start := time.Now()
	var wg sync.WaitGroup
	cs := make([]*rlqsclient.Client, clients)
	for i := range cs {
		cs[i] = rlqsClient(t, conn, time.Second)
		wg.Add(1)
		go func(c *rlqsclient.Client) {
			defer wg.Done()
			for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				c.Allow(id)
			}
		}(cs[i])
	}
	wg.Wait()
	var admitted, denied, unassigned int64
	for _, c := range cs {
		st := c.Stats()
		admitted, denied, unassigned = admitted+st.Allowed, denied+st.Denied, unassigned+st.Unassigned
	}
	// A bucket's requests are admitted while it has no
	// assignment (Envoy's default): each client's first, and
	// any after an assignment ran out. Those are not counted.
	if unassigned > int64(clients) {
		t.Logf("%d more requests admitted without an assignment: before the first arrived, or after one ran out", unassigned-int64(clients))
	}
	bound := limit + unassigned
	if turns && start.Truncate(window) != time.Now().Truncate(window) {
		bound += limit // the window turned during the run
	}
	if admitted > bound || denied == 0 {
		t.Fatalf("%d clients admitted %d and denied %d, want at most %d admitted", clients, admitted, denied, bound)
	}
	t.Logf("%s, %d clients: admitted %d (%d without an assignment), denied %d", rule, clients, admitted, unassigned, denied)
	// Two reports more from each: the second began after the
	// load had stopped, so the reports hold every admission.
	for _, c := range cs {
		sent := c.Stats().Reports
		waitFor(t, 30*time.Second, "two more reports", func() bool { return c.Stats().Reports >= sent+2 })
	}
	for _, c := range cs {
		_ = c.Close()
	}
	// What was taken for them and not granted goes back once
	// their assignments (3 s) have run out; what they admitted is
	// counted, as far as the limit goes (their requests admitted
	// without an assignment may have gone past it).
	want := min(admitted, limit)
	deadline := time.Now().Add(15 * time.Second)
	for {
		used := counterUsed(t, d, rule, tenant)
		if used == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ruled counts %d, want %d: the clients admitted %d (%d of them without an assignment)", used, want, admitted, unassigned)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRLQSReloadReachesTheClients: a rule reload reaches a client within
// one reporting interval of Envoy's (5 s): the quota it held becomes the
// new rules' answer.
func TestRLQSReloadReachesTheClients(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	d, conn := rlqsDaemon(t, rules)
	c := rlqsClient(t, conn, 5*time.Second)
	id := map[string]string{"route": "api", "tenant": "reload"}
	c.Allow(id)
	waitAssignment(t, c, id, "token_bucket max=10 ")
	writeFile(t, filepath.Dir(rules), filepath.Base(rules), strings.Replace(rlqsRules, "{limit: 100, window: 1h}", "{limit: 0, window: 1h}", 1))
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitAssignmentWithin(t, c, id, "deny_all", 5*time.Second)
}

// TestRLQSRefusesHostileReports: a stream that reports without a domain,
// switches domains, or sends a bucket id or a number of buckets beyond the
// limits is ended with a clear status, and the server goes on serving.
func TestRLQSRefusesHostileReports(t *testing.T) {
	_, conn := rlqsDaemon(t, filepath.Join(t.TempDir(), "rules.yaml"))
	rls := rlqsv3.NewRateLimitQuotaServiceClient(conn)
	usage := func(id map[string]string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id}, TimeElapsed: &durationpb.Duration{}}
	}
	wide := map[string]string{}
	for i := range rlqs.MaxBucketAttrs + 1 {
		wide[fmt.Sprint("k", i)] = "v"
	}
	many := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, rlqs.MaxBuckets+1)
	for i := range many {
		many[i] = usage(map[string]string{"route": "free", "n": fmt.Sprint(i)})
	}
	ok := []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"route": "free"})}
	for _, tc := range []struct {
		name    string
		reports []*rlqsv3.RateLimitQuotaUsageReports
		want    codes.Code
	}{
		{"no domain", []*rlqsv3.RateLimitQuotaUsageReports{{BucketQuotaUsages: ok}}, codes.InvalidArgument},
		{"another domain", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: ok}, {Domain: "other", BucketQuotaUsages: ok}}, codes.InvalidArgument},
		{"empty bucket id", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil)}}}, codes.InvalidArgument},
		{"a wide bucket id", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(wide)}}}, codes.InvalidArgument},
		{"a long value", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"k": strings.Repeat("v", 1025)})}}}, codes.InvalidArgument},
		{"too many buckets", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: many}}, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := rls.StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.reports {
				if err := s.Send(r); err != nil {
					break // the server ended the stream: Recv says why
				}
			}
			for {
				_, err := s.Recv()
				if err == nil {
					continue // an answer to a report before the refused one
				}
				if status.Code(err) != tc.want {
					t.Fatalf("stream ended with %v, want %v", err, tc.want)
				}
				break
			}
		})
	}
	c := rlqsClient(t, conn, time.Second)
	id := map[string]string{"route": "api", "tenant": "after"}
	c.Allow(id)
	waitAssignment(t, c, id, "token_bucket")
}

// TestRLQSWhenRedisIsUnreachable: while Redis does not answer, a leased
// bucket's assignment follows its rule's on_error within a renewal (allow:
// ALLOW_ALL, deny: DENY_ALL) or, for local, is not renewed and runs out,
// leaving the decision to the filter's own fallback; once Redis answers
// again, every bucket has its token bucket back, and what ALLOW_ALL
// admitted is not counted. The failures are logged without a flood.
func TestRLQSWhenRedisIsUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	d, conn := rlqsDaemon(t, filepath.Join(t.TempDir(), "rules.yaml"), "--redis", srv.URL())
	c := rlqsClient(t, conn, time.Second)
	want := map[string]string{"api": "allow_all", "api-closed": "deny_all", "api-local": "none"}
	for route := range want {
		id := map[string]string{"route": route, "tenant": "outage"}
		c.Allow(id)
		waitAssignment(t, c, id, "token_bucket max=10 ")
	}
	srv.Pause()
	paused := time.Now()
	t.Cleanup(srv.Resume)
	for route, a := range want {
		waitAssignmentWithin(t, c, map[string]string{"route": route, "tenant": "outage"}, a, 15*time.Second)
	}
	// Twice the limit admitted under on_error: allow, and reported.
	api := map[string]string{"route": "api", "tenant": "outage"}
	for range 200 {
		if !c.Allow(api) {
			t.Fatal("denied under ALLOW_ALL")
		}
	}
	sent := c.Stats().Reports
	waitFor(t, 10*time.Second, "a report of the admissions", func() bool { return c.Stats().Reports >= sent+2 })
	srv.Resume()
	// Every bucket failed at every renewal; the log says so once in 10 s.
	outage := time.Since(paused)
	if n, most := strings.Count(d.log.String(), "taking quota failed"), 1+int(outage/(10*time.Second)); n < 1 || n > most {
		t.Fatalf("%d warnings of failed takes in the log in an outage of %v, want 1 to %d", n, outage.Round(time.Second), most)
	}
	for route := range want {
		waitAssignmentWithin(t, c, map[string]string{"route": route, "tenant": "outage"}, "token_bucket max=10 ", 15*time.Second)
	}
	// They are not counted once Redis is back, as a decision that
	// on_error: allow admitted is not.
	sent = c.Stats().Reports
	waitFor(t, 10*time.Second, "two more reports", func() bool { return c.Stats().Reports >= sent+2 })
	if used := counterUsed(t, d, "api", "outage"); used >= 100 {
		t.Fatalf("ruled counts %d of the limit of 100 after the outage: it counted what on_error: allow admitted", used)
	}
	if a := c.Assignment(api); !strings.HasPrefix(a, "token_bucket") {
		t.Fatalf("after the outage: %s, want a token bucket", a)
	}
}

// rlqsClientEnv names, in the environment of this test binary run as an
// RLQS client (rlqsClientProcess), the server's address.
const rlqsClientEnv = "RULED_TEST_RLQS_CLIENT"

// rlqsClientProcess is this test binary run as one RLQS client, reporting
// every second: it admits rlqsClientAdmits requests of its bucket, says
// "reported" on stdout once two reports since have said so, and goes on
// reporting until it is stopped or killed.
func rlqsClientProcess(addr string) int {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := rlqsclient.New(conn, rlqsclient.Options{Domain: "edge", ReportInterval: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	id := map[string]string{"route": "api", "tenant": "gone"}
	for c.Stats().Allowed < rlqsClientAdmits {
		c.Allow(id)
		time.Sleep(10 * time.Millisecond)
	}
	for sent := c.Stats().Reports; c.Stats().Reports < sent+2; {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("reported")
	select {}
}

// rlqsClientAdmits is how many requests rlqsClientProcess admits.
const rlqsClientAdmits = 5

// TestRLQSClientThatStopsReportingGivesItsQuotaBack: a client process
// holds quota (ruled took its lease size for it and counted its five
// requests) and stops reporting: killed, its stream ends and what it did
// not use goes back once its assignment has run out; frozen (SIGSTOP,
// its stream still open), ruled stops renewing the bucket after two of
// its reporting intervals and gives back the same. Either way ruled's
// count comes down to the five it admitted.
func TestRLQSClientThatStopsReportingGivesItsQuotaBack(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			d, conn := rlqsDaemon(t, filepath.Join(t.TempDir(), "rules.yaml"))
			cmd, out := startHelper(t, rlqsClientEnv+"="+conn.Target())
			line, err := out.ReadString('\n')
			if err != nil || line != "reported\n" {
				t.Fatalf("client: %q, %v", line, err)
			}
			if held := counterUsed(t, d, "api", "gone"); held <= rlqsClientAdmits {
				t.Fatalf("ruled counts %d for a client that admitted %d: it holds nothing for it", held, rlqsClientAdmits)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			waitFor(t, 30*time.Second, "the quota back", func() bool { return counterUsed(t, d, "api", "gone") == rlqsClientAdmits })
			t.Logf("%v: quota back %v after the client stopped", sig, time.Since(stopped).Round(100*time.Millisecond))
		})
	}
}

// TestRLQSCountsNothingAdmittedUnderAllowAll: what a client admits while
// no rule counts its bucket (an exempt rule's ALLOW_ALL, and its first
// request, before any assignment) is not counted when a reload puts the
// bucket under a limit: ruled's count is what the client admits under
// the limit, nothing.
func TestRLQSCountsNothingAdmittedUnderAllowAll(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	d, conn := rlqsDaemon(t, rules)
	c := rlqsClient(t, conn, time.Second)
	id := map[string]string{"route": "vip", "tenant": "was-exempt"}
	c.Allow(id)
	waitAssignment(t, c, id, "allow_all")
	for range 30 {
		if !c.Allow(id) {
			t.Fatal("denied under ALLOW_ALL")
		}
	}
	sent := c.Stats().Reports
	waitFor(t, 10*time.Second, "a report of the admissions", func() bool { return c.Stats().Reports >= sent+2 })
	limited := strings.Replace(rlqsRules, "    exempt: true\n", "    subject: attrs.tenant\n    plugin: fixedwindow\n    config: {limit: 100, window: 1h}\n    lease: 10\n", 1)
	writeFile(t, filepath.Dir(rules), filepath.Base(rules), limited)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitAssignment(t, c, id, "token_bucket max=10 ")
	sent = c.Stats().Reports
	waitFor(t, 10*time.Second, "two more reports", func() bool { return c.Stats().Reports >= sent+2 })
	_ = c.Close()
	waitFor(t, 15*time.Second, "ruled's count back to 0", func() bool { return counterUsed(t, d, "vip", "was-exempt") == 0 })
}

// TestRLQSClientMovesToAnotherInstance: when the instance serving a
// client's stream dies, the client's assignment runs out, it opens a
// stream again at its next report, to the instance now serving the
// address, which answers its buckets at once from the count in Redis:
// what the client admitted through the first instance still counts.
func TestRLQSClientMovesToAnotherInstance(t *testing.T) {
	srv := redistest.Start(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	addr := freePort(t)
	a, conn := rlqsDaemonOn(t, rules, addr, "--redis", srv.URL())
	c := rlqsClient(t, conn, time.Second)
	id := map[string]string{"route": "api", "tenant": "moved"}
	const limit, first = 100, 95
	// One client spends the limit to its last units: ruled holds back
	// no reserve for good when quota runs short.
	waitFor(t, 60*time.Second, fmt.Sprintf("%d of the limit of %d admitted", first, limit), func() bool {
		c.Allow(id)
		return c.Stats().Allowed >= first
	})
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	waitAssignment(t, c, id, "none")
	rlqsDaemonOn(t, rules, addr, "--redis", srv.URL())
	waitFor(t, 15*time.Second, "an assignment from the new instance", func() bool { return c.Assignment(id) != "none" })
	before := c.Stats()
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		c.Allow(id)
	}
	after := c.Stats()
	admitted, unassigned := after.Allowed-before.Allowed, after.Unassigned-before.Unassigned
	if admitted > limit-first+unassigned || after.Denied == before.Denied {
		t.Fatalf("the new instance let the client admit %d (%d without an assignment) and deny %d; %d of the limit of %d were admitted before",
			admitted, unassigned, after.Denied-before.Denied, first, limit)
	}
	t.Logf("admitted %d through the first instance, %d through the second (%d without an assignment)", first, admitted, unassigned)
}

// TestRLQSEnvoyConfigInTheDocsIsValid: the rate_limit_quota filter's
// configuration in docs/envoy.md is one Envoy accepts: it reads as the
// filter's config (every field and type name known) and passes its
// validation rules, and its bucket settings name the domain and the bucket
// id the text says.
func TestRLQSEnvoyConfigInTheDocsIsValid(t *testing.T) {
	block := docYAMLBlock(t, "envoy.md", "http_filters:\n- name: envoy.filters.http.rate_limit_quota\n")
	var top struct {
		Filters []struct {
			TypedConfig map[string]any `yaml:"typed_config"`
		} `yaml:"http_filters"`
	}
	if err := yaml.Unmarshal([]byte(block), &top); err != nil || len(top.Filters) != 1 {
		t.Fatalf("docs/envoy.md's block: %v (%d filters)", err, len(top.Filters))
	}
	raw := top.Filters[0].TypedConfig
	if raw["@type"] != "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig" {
		t.Fatalf("@type %v", raw["@type"])
	}
	delete(raw, "@type")
	js, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var cfg rlqfilterv3.RateLimitQuotaFilterConfig
	if err := protojson.Unmarshal(js, &cfg); err != nil {
		t.Fatalf("not the filter's config: %v", err)
	}
	if err := cfg.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation refuses it: %v", err)
	}
	var settings rlqfilterv3.RateLimitQuotaBucketSettings
	if err := cfg.GetBucketMatchers().GetOnNoMatch().GetAction().GetTypedConfig().UnmarshalTo(&settings); err != nil {
		t.Fatal(err)
	}
	if err := settings.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation refuses the bucket settings: %v", err)
	}
	ids := settings.GetBucketIdBuilder().GetBucketIdBuilder()
	if cfg.GetDomain() != "edge" || ids["route"].GetStringValue() != "api" || ids["tenant"].GetCustomValue() == nil {
		t.Fatalf("domain %q, bucket id %v: not what the text says", cfg.GetDomain(), ids)
	}
}

// TestRLQSEnvoyRatelimitMode: the binary as envoy ratelimit serves RLQS on
// RULED_RLQS_LISTEN, on the rules translated from envoy ratelimit's
// config: a bucket id that names its descriptor as an RLS call does
// (descriptor_keys and the entries) is a token bucket of
// RULED_RLQS_LEASE_SHARE of the descriptor's limit; a client asking more
// admits no more than the limit (and what it admitted without an
// assignment); and RLS calls share the count: once a client that admitted
// part of the limit is gone, what was taken for it and not used is back,
// and RLS admits exactly the rest.
func TestRLQSEnvoyRatelimitMode(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	const limit = 40
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, conf, "edge.yaml", fmt.Sprintf("domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit))
	rdb := redistest.Start(t)
	addr := freePort(t)
	rl := startRatelimit(t, buildRuled(t), []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr(), "USE_STATSD=false", "LOG_LEVEL=info",
		"RULED_RLQS_LISTEN=" + addr, "RULED_RLQS_LEASE_SHARE=0.5"}, "envoy-ratelimit")
	waitFor(t, 30*time.Second, "/healthcheck 200", func() bool { return rl.healthcheck() == http.StatusOK })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	bucket := func(tenant string) map[string]string {
		return map[string]string{"descriptor_keys": "tenant", "tenant": tenant}
	}

	// A bucket id without descriptor_keys is no descriptor of the config.
	c := rlqsClient(t, conn, time.Second)
	loose := map[string]string{"tenant": "acme"}
	c.Allow(loose)
	waitAssignment(t, c, loose, "allow_all")

	// One client asks far more than the limit.
	id := bucket("acme")
	c.Allow(id)
	waitAssignment(t, c, id, fmt.Sprintf("token_bucket max=%d ", limit/2))
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		c.Allow(id)
	}
	st := c.Stats()
	if admitted, unassigned := st.Allowed-1, st.Unassigned-1; admitted > limit+unassigned || st.Denied == 0 { // less the loose bucket's request
		t.Fatalf("admitted %d (%d without an assignment), denied %d: want at most %d admitted", admitted, unassigned, st.Denied, limit)
	}

	// Another admits part of its limit, and stops.
	c2 := rlqsClient(t, conn, time.Second)
	id2 := bucket("beta")
	c2.Allow(id2)
	waitAssignment(t, c2, id2, fmt.Sprintf("token_bucket max=%d ", limit/2))
	for c2.Stats().Allowed < limit/2+5 {
		c2.Allow(id2)
		time.Sleep(5 * time.Millisecond)
	}
	st2 := c2.Stats()
	sent := st2.Reports
	waitFor(t, 30*time.Second, "two more reports", func() bool { return c2.Stats().Reports >= sent+2 })
	_ = c2.Close()
	waitFor(t, 15*time.Second, fmt.Sprintf("the count down to the %d admitted", st2.Allowed), func() bool {
		return counterUsedAt(t, "http://"+rl.http, "edge-tenant", "tenant=beta") == st2.Allowed
	})
	rls := dialRLS(t, rl.grpc)
	var ok int64
	for range limit {
		if rls.ask(1, entries("tenant", "beta")).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	if ok != limit-st2.Allowed {
		t.Fatalf("RLS admitted %d after an RLQS client admitted %d, want %d", ok, st2.Allowed, limit-st2.Allowed)
	}
	t.Logf("over-demand: admitted %d (%d without an assignment), denied %d; partial: admitted %d, then RLS %d", st.Allowed-1, st.Unassigned-1, st.Denied, st2.Allowed, ok)
}
