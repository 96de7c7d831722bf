package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/metrics"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

const rulesYAML = `rules:
  - name: x
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
  - name: y
    when: request.path == "/never"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
`

// subject is the one subject of the test's traffic; it must never appear in
// the exposition.
const subject = "203.0.113.77-secret-subject"

type rig struct {
	m      *metrics.Metrics
	e      *host.Engine
	rs     *redistest.Server
	client *redis.Client
	srv    *httptest.Server
	rules  string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	m := metrics.New(metrics.Options{Version: "test"})
	cap := capability.New(client, capability.Options{
		Timeout: 2 * time.Second, Observe: m.RedisCall, OnAvailability: m.RedisAvailable,
		// A long cool-down: no probe call while the test runs, so the error
		// count is exactly the breaker's threshold.
		BreakerCooldown: time.Hour,
	})
	e, err := host.NewEngine(host.Options{Capability: cap, Plugins: builtin.All(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	m.Bind(e.Inspect())
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	// ruled_redis_up follows the active probe, as ruled serve runs it.
	ctx, cancel := context.WithCancel(context.Background())
	probed := make(chan struct{})
	go func() { defer close(probed); cap.Probe(ctx, 20*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-probed })
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return &rig{m: m, e: e, rs: rs, client: client, srv: srv, rules: path}
}

func (r *rig) check(n int) {
	for range n {
		r.e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: subject, Path: "/a"}, Hits: 1})
	}
}

// scrape returns the exposition text and its samples by series name with
// labels as exposed ("name{a=\"1\",b=\"2\"}").
func (r *rig) scrape(t *testing.T) (string, map[string]float64) {
	t.Helper()
	resp, err := http.Get(r.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		samples[line[:i]] = v
	}
	return string(b), samples
}

func want(t *testing.T, samples map[string]float64, series string, v float64) {
	t.Helper()
	got, ok := samples[series]
	if !ok {
		t.Errorf("%s: missing", series)
		return
	}
	if got != v {
		t.Errorf("%s = %v, want %v", series, got, v)
	}
}

func TestScrapeAfterKnownTraffic(t *testing.T) {
	r := newRig(t)
	r.check(8) // limit 5: 5 allowed, 1 denied by Redis, 2 by the deny cache

	body, s := r.scrape(t)
	want(t, s, `ruled_decisions_total{outcome="allowed",rule="x"}`, 5)
	want(t, s, `ruled_decisions_total{outcome="denied",rule="x"}`, 3)
	want(t, s, `ruled_deny_cache_hits_total{rule="x"}`, 2)
	for _, o := range []string{"allowed", "denied", "shadow_denied", "degraded_allow", "degraded_deny", "degraded_local", "bad_request"} {
		want(t, s, `ruled_decisions_total{outcome="`+o+`",rule="y"}`, 0) // loaded, never matched
	}
	want(t, s, `ruled_deny_cache_hits_total{rule="y"}`, 0)
	want(t, s, `ruled_check_duration_seconds_count`, 8)
	want(t, s, `ruled_redis_call_duration_seconds_count{plugin="fixedwindow"}`, 6)
	want(t, s, `ruled_redis_errors_total{class="connection",plugin="fixedwindow"}`, 0)
	want(t, s, `ruled_plugin_errors_total{plugin="fixedwindow"}`, 0)
	want(t, s, `ruled_redis_up`, 1)
	want(t, s, `ruled_instances`, 1)
	want(t, s, `ruled_rule_reloads_total{result="ok"}`, 1)
	want(t, s, `ruled_rule_reloads_total{result="error"}`, 0)
	want(t, s, `ruled_rules_loaded`, 2)
	if ts := s[`ruled_rules_last_reload_success_timestamp_seconds`]; ts < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last reload timestamp %v", ts)
	}
	if !strings.Contains(body, `ruled_build_info{goversion="go`) || !strings.Contains(body, `version="test"} 1`) {
		t.Error("ruled_build_info missing")
	}
	if !strings.Contains(body, "go_goroutines ") || !strings.Contains(body, "process_cpu_seconds_total") {
		t.Error("Go and process collectors missing")
	}

	// Reloads: a bad file counts an error and keeps the rules; a good one
	// counts ok.
	if err := os.WriteFile(r.rules, []byte("rules:\n  - name: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Reload(context.Background(), "test"); err == nil {
		t.Fatal("bad rules reloaded")
	}
	_, s = r.scrape(t)
	want(t, s, `ruled_rule_reloads_total{result="error"}`, 1)
	want(t, s, `ruled_rules_loaded`, 2)
	if err := os.WriteFile(r.rules, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Reload(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	_, s = r.scrape(t)
	want(t, s, `ruled_rule_reloads_total{result="ok"}`, 2)
	want(t, s, `ruled_rule_reloads_total{result="error"}`, 1)

	// Instances: another live instance in Redis.
	var now int64
	if tm, err := r.client.Time(context.Background()).Result(); err != nil {
		t.Fatal(err)
	} else {
		now = tm.UnixMilli()
	}
	if err := r.client.ZAdd(context.Background(), "ruled:instances", redis.Z{Score: float64(now), Member: "instance-zz9"}).Err(); err != nil {
		t.Fatal(err)
	}
	hbCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.e.Run(hbCtx, "instance-me", time.Hour) }()
	for deadline := time.Now().Add(5 * time.Second); r.e.Inspect().ClusterSize() != 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	_, s = r.scrape(t)
	want(t, s, `ruled_instances`, 2)

	// Redis dies: the first calls fail with connection errors until the
	// circuit opens (3 by default); the rest are refused by the open
	// circuit, never reach Redis and are not Redis errors. Every decision is
	// degraded (on_error: allow by default).
	r.rs.Kill()
	for range 5 { // a subject the deny cache does not know
		r.e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "fresh"}, Hits: 1})
	}
	body, s = r.scrape(t)
	errs := s[`ruled_redis_errors_total{class="connection",plugin="fixedwindow"}`] + s[`ruled_redis_errors_total{class="timeout",plugin="fixedwindow"}`]
	if errs != 3 {
		t.Errorf("redis errors after the kill: %v, want 3 (the breaker threshold)\n%s", errs, grep(body, "ruled_redis_errors_total"))
	}
	want(t, s, `ruled_plugin_errors_total{plugin="fixedwindow"}`, 0)
	// The probe, not the calls, finds Redis gone.
	for deadline := time.Now().Add(2 * time.Second); s[`ruled_redis_up`] != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		_, s = r.scrape(t)
	}
	want(t, s, `ruled_redis_up`, 0)
	want(t, s, `ruled_decisions_total{outcome="degraded_allow",rule="x"}`, 5)
	want(t, s, `ruled_decisions_total{outcome="allowed",rule="x"}`, 5)

	for _, secret := range []string{subject, "fresh", "instance-zz9", "instance-me"} {
		if strings.Contains(body, secret) {
			t.Errorf("the exposition holds the subject or instance %q", secret)
		}
	}

	// The snapshot for the status page says the same.
	st := r.m.Snapshot()
	if x := st.Rules["x"]; x.Outcomes["allowed"] != 5 || x.Outcomes["denied"] != 3 || x.Outcomes["degraded_allow"] != 5 || x.DenyCacheHits != 2 {
		t.Errorf("snapshot of x: %+v", x)
	}
	if y, ok := st.Rules["y"]; !ok || y.Outcomes["allowed"] != 0 {
		t.Errorf("snapshot of y: %+v (present %v)", y, ok)
	}
	if st.RedisUp || st.Instances != 2 || st.Checks != 13 || st.Reloads["ok"] != 2 || st.Reloads["error"] != 1 || st.Version != "test" {
		t.Errorf("snapshot: %+v", st)
	}
	if p := st.Plugins["fixedwindow"]; p.Errors["connection"]+p.Errors["timeout"] != 3 {
		t.Errorf("snapshot of fixedwindow: %+v", p)
	}
}

func grep(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestPluginErrorsAndClasses(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.RedisCall("p", "s", "n1", time.Millisecond, nil)
	m.RedisCall("p", "s", "n1", time.Millisecond, &capability.Error{Class: capability.ClassScript, Plugin: "p", Script: "s", Err: errors.New("ERR boom")})
	m.RedisCall("p", "s", "n1", 0, &capability.Error{Class: capability.ClassRefused, Plugin: "p", Script: "s", Err: errors.New("undeclared")})
	m.RedisCall("p", "s", "n1", 250*time.Millisecond, &capability.Error{Class: capability.ClassTimeout, Plugin: "p", Script: "s", Err: context.DeadlineExceeded})
	m.RedisCall("p", "s", "n1", 0, &capability.Error{Class: capability.ClassConnection, Plugin: "p", Script: "s", Err: capability.ErrCircuitOpen})
	m.RedisAvailable(false)
	m.RedisAvailable(true)
	st := m.Snapshot()
	p := st.Plugins["p"]
	if p.Calls != 4 || p.Errors["script"] != 1 || p.Errors["refused"] != 1 || p.Errors["timeout"] != 1 || p.Errors["connection"] != 0 {
		t.Fatalf("plugin stats %+v", p)
	}
	if !st.RedisUp || st.Version != "dev" {
		t.Fatalf("stats %+v", st)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	r := &rig{srv: srv}
	_, s := r.scrape(t)
	want(t, s, `ruled_plugin_errors_total{plugin="p"}`, 2)
	want(t, s, `ruled_redis_errors_total{class="script",plugin="p"}`, 1)
	want(t, s, `ruled_redis_up`, 1)
	// The same calls by the master they went to; the circuit's refusal
	// never reached it.
	want(t, s, `ruled_redis_node_errors_total{node="n1"}`, 3)
	want(t, s, `ruled_redis_node_call_duration_seconds_count{node="n1"}`, 4)
}

func TestRegisterPool(t *testing.T) {
	m := metrics.New(metrics.Options{})
	idle, busy := 3, 1
	m.RegisterPool("gcra", func() (int, int) { return idle, busy })
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	r := &rig{srv: srv}
	_, s := r.scrape(t)
	want(t, s, `ruled_plugin_pool_instances{plugin="gcra",state="idle"}`, 3)
	want(t, s, `ruled_plugin_pool_instances{plugin="gcra",state="busy"}`, 1)
	idle, busy = 0, 4
	_, s = r.scrape(t)
	want(t, s, `ruled_plugin_pool_instances{plugin="gcra",state="busy"}`, 4)
	m.RegisterPool("gcra", nil)
	if _, s = r.scrape(t); len(grepMap(s, "ruled_plugin_pool_instances")) != 0 {
		t.Fatal("pool still reported after removal")
	}
}

func grepMap(s map[string]float64, prefix string) []string {
	var out []string
	for k := range s {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// BenchmarkDecision measures the Observer call every rule decision makes.
func BenchmarkDecision(b *testing.B) {
	m := metrics.New(metrics.Options{})
	rules := []string{"login-per-ip", "api-per-user", "global"}
	outs := []host.Outcome{host.OutcomeAllowed, host.OutcomeAllowed, host.OutcomeAllowed, host.OutcomeDenied}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Decision(rules[i%len(rules)], "fixedwindow", outs[i%len(outs)], i%16 == 0)
			i++
		}
	})
}

// BenchmarkCheckAndRedisCall measures the other two calls on the decision
// path: the check histogram and the Redis call histogram.
func BenchmarkCheckAndRedisCall(b *testing.B) {
	m := metrics.New(metrics.Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Check(300*time.Microsecond, true)
			m.RedisCall("fixedwindow", "hit", "127.0.0.1:6379", 200*time.Microsecond, nil)
		}
	})
}

func TestClientLeaseUnits(t *testing.T) {
	r := newRig(t)
	path := filepath.Join(t.TempDir(), "leased.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: leased\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 100, window: 1h}\n    lease: 30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := host.Request{IP: subject}
	l, err := r.e.ClientLeases().Take(ctx, &host.LeaseRequest{Request: req, Permits: 50})
	if err != nil || l.Permits != 30 {
		t.Fatalf("lease %+v, %v", l, err)
	}
	ret := host.LeaseReturn{Request: req, Permits: 30, Unused: 10, Holds: l.Holds(), ID: l.ID, Deadline: time.Now().Add(time.Second)}
	if _, err := returnLease(ctx, r.e, &ret); err != nil {
		t.Fatal(err)
	}
	ret.Unused, ret.Deadline = 4, time.Now()
	if _, err := returnLease(ctx, r.e, &ret); !errors.Is(err, host.ErrLateReturn) {
		t.Fatalf("late return: %v", err)
	}
	_, samples := r.scrape(t)
	want(t, samples, `ruled_client_lease_units_total{event="taken",rule="leased"}`, 30)
	want(t, samples, `ruled_client_lease_units_total{event="returned",rule="leased"}`, 10)
	want(t, samples, `ruled_client_lease_units_total{event="late",rule="leased"}`, 4)
}

// TestSubjectDecisions: a detailed_metric rule's decisions are counted per
// subject, up to MaxSubjectSeries pairs; later subjects count as _other.
func TestSubjectDecisions(t *testing.T) {
	r := newRig(t)
	path := filepath.Join(t.TempDir(), "detailed.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: per-tenant\n    subject: attrs[\"tenant\"]\n    plugin: fixedwindow\n    config: {limit: 1, window: 1h}\n    detailed_metric: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r.e.Check(context.Background(), &host.CheckRequest{Attrs: map[string]string{"tenant": "acme"}, Hits: 1})
	}
	_, samples := r.scrape(t)
	want(t, samples, `ruled_subject_decisions_total{outcome="allowed",rule="per-tenant",subject="acme"}`, 1)
	want(t, samples, `ruled_subject_decisions_total{outcome="denied",rule="per-tenant",subject="acme"}`, 1)

	for i := range metrics.MaxSubjectSeries + 5 {
		r.m.SubjectDecision("many", strconv.Itoa(i), host.OutcomeAllowed)
	}
	r.m.SubjectDecision("many", "0", host.OutcomeAllowed) // a subject already counted stays itself
	_, samples = r.scrape(t)
	want(t, samples, `ruled_subject_decisions_total{outcome="allowed",rule="many",subject="0"}`, 2)
	// acme took one of the pairs, so 6 of the "many" subjects overflowed.
	want(t, samples, `ruled_subject_decisions_total{outcome="allowed",rule="many",subject="_other"}`, 6)
	if n := len(grepMap(samples, `ruled_subject_decisions_total{outcome="allowed",rule="many"`)); n != metrics.MaxSubjectSeries {
		t.Errorf("%d series for rule many, want %d (MaxSubjectSeries − acme's pair + _other)", n, metrics.MaxSubjectSeries)
	}
}

// BenchmarkSubjectDecision is the per-subject metric of a subject seen
// before: the cost a detailed_metric rule adds to each decision.
func BenchmarkSubjectDecision(b *testing.B) {
	m := metrics.New(metrics.Options{Version: "test"})
	m.SubjectDecision("r", "acme", host.OutcomeAllowed)
	b.ReportAllocs()
	for b.Loop() {
		m.SubjectDecision("r", "acme", host.OutcomeAllowed)
	}
}

// returnLease gives back the unused permits of one lease.
func returnLease(ctx context.Context, e *host.Engine, ret *host.LeaseReturn) (int64, error) {
	r := e.ClientLeases().Return(ctx, []*host.LeaseReturn{ret})[0]
	return r.Returned, r.Err
}

// TestRedisCallAllocatesNothing: observing an answered script call, once
// per decision, costs no allocation once its plugin and node are known.
func TestRedisCallAllocatesNothing(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.RedisCall("fixedwindow", "decide", "127.0.0.1:6379", time.Millisecond, nil)
	if n := testing.AllocsPerRun(100, func() {
		m.RedisCall("fixedwindow", "decide", "127.0.0.1:6379", time.Millisecond, nil)
	}); n != 0 {
		t.Fatalf("%v allocations per answered call", n)
	}
}

// BenchmarkRedisCall is the metrics' share of each script call.
func BenchmarkRedisCall(b *testing.B) {
	m := metrics.New(metrics.Options{})
	b.ReportAllocs()
	for b.Loop() {
		m.RedisCall("fixedwindow", "decide", "127.0.0.1:6379", time.Millisecond, nil)
	}
}

// TestSlotEvents: each release and renewal is counted per rule by what it
// did to the slot.
func TestSlotEvents(t *testing.T) {
	r := newRig(t)
	path := filepath.Join(t.TempDir(), "slots.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: one\n    subject: request.ip\n    plugin: concurrency\n    config: {limit: 1, ttl: 1h}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	slot := func(id string) *host.CheckRequest {
		return &host.CheckRequest{Request: host.Request{IP: subject}, Hits: 1, LeaseID: id}
	}
	if res := r.e.Check(ctx, slot("a")); !res.Allowed {
		t.Fatalf("acquire: %+v", res)
	}
	r.e.Release(ctx, slot("a")) // released
	r.e.Release(ctx, slot("a")) // not_held
	r.e.Renew(ctx, slot("a"))   // renewed: the slot was free
	r.e.Renew(ctx, slot("b"))   // lost: a holds it
	_, samples := r.scrape(t)
	for event, n := range map[string]float64{"released": 1, "not_held": 1, "renewed": 1, "lost": 1} {
		want(t, samples, `ruled_slot_events_total{event="`+event+`",rule="one"}`, n)
	}
}
