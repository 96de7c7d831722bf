package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The shortcuts of the engine (deny cache, leases, refunds) tried through
// the binary with default rule settings, as issue 17 found them.

// answer is one /v1/check answer, decoded.
type answer struct {
	status  int
	Allowed bool `json:"allowed"`
	Error   struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Results []struct {
		Rule      string `json:"rule"`
		Allowed   bool   `json:"allowed"`
		Granted   int64  `json:"granted"`
		Remaining int64  `json:"remaining"`
		Degraded  string `json:"degraded"`
	} `json:"results"`
}

// post sends a check body and decodes the answer.
func (d *daemon) post(body string) answer {
	d.t.Helper()
	resp, err := http.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode}
	if err := json.Unmarshal(b, &a); err != nil {
		d.t.Fatalf("answer %d %s: %v", resp.StatusCode, b, err)
	}
	return a
}

func (d *daemon) statuses(bodies ...string) []int {
	d.t.Helper()
	var codes []int
	for _, b := range bodies {
		codes = append(codes, d.post(b).status)
	}
	return codes
}

// TestRetriedRequestsStayIdempotent: limit 2, a and b granted, c denied;
// a retried with its dedup_id is granted again (the plugin knows it), not
// denied from the deny cache.
func TestRetriedRequestsStayIdempotent(t *testing.T) {
	d := spawnDaemon(t, `rules:
  - name: two
    subject: request.user
    plugin: fixedwindow
    config: {limit: 2, window: 1h}
`)
	d.waitReady(15e9)
	req := func(id string) string { return `{"request": {"user": "u"}, "dedup_id": "` + id + `"}` }
	got := d.statuses(req("a"), req("b"), req("c"), req("c"), req("a"), req("b"))
	if want := []int{200, 200, 429, 429, 200, 200}; !slices.Equal(got, want) {
		t.Fatalf("status codes %v, want %v", got, want)
	}
	// A request without dedup_id may be denied from the cache: the limit holds.
	if a := d.post(`{"request": {"user": "u"}}`); a.status != 429 {
		t.Fatalf("a new request after the limit: %d", a.status)
	}
}

// TestConcurrencyLimiterWithDefaultSettings runs the built-in concurrency
// plugin (which declares no firm denials) with default rule settings: a
// release frees a slot at once, and an acquire without a lease id is the
// client's error (400), not the rule's on_error: allow.
func TestConcurrencyLimiterWithDefaultSettings(t *testing.T) {
	d := spawnDaemon(t, `rules:
  - name: inflight
    subject: request.user
    plugin: concurrency
    config: {limit: 2, ttl: 30s}
    on_error: allow
`)
	d.waitReady(15e9)
	op := func(hits, id string) string {
		return `{"request": {"user": "u"}, "hits": ` + hits + `, "dedup_id": "` + id + `"}`
	}
	got := d.statuses(op("1", "a"), op("1", "b"), op("1", "c"), op("-1", "a"), op("1", "d"), op("1", "e"))
	if want := []int{200, 200, 429, 200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("status codes %v, want %v\n%s", got, want, tail(d.log.String(), 20))
	}
	a := d.post(`{"request": {"user": "u"}, "hits": 1}`)
	if a.status != http.StatusBadRequest || a.Error.Code != "invalid_request" ||
		!strings.Contains(a.Error.Message, "must name the slot") || !strings.Contains(a.Error.Message, "rule inflight") {
		t.Fatalf("acquire without a lease id: %d %+v", a.status, a.Error)
	}
}

// TestRefundedResultsSayWhatStands: when a later rule denies, the earlier
// rule's units are refunded and its result says so.
func TestRefundedResultsSayWhatStands(t *testing.T) {
	d := spawnDaemon(t, `rules:
  - name: wide
    subject: request.user
    plugin: fixedwindow
    config: {limit: 10, window: 1h}
  - name: narrow
    subject: request.user
    plugin: fixedwindow
    config: {limit: 1, window: 1h}
`)
	d.waitReady(15e9)
	if a := d.post(`{"request": {"user": "u"}}`); a.status != 200 || a.Results[0].Remaining != 9 {
		t.Fatalf("first request: %d %+v", a.status, a.Results)
	}
	for i := 0; i < 3; i++ {
		a := d.post(`{"request": {"user": "u"}}`)
		if a.status != 429 || len(a.Results) != 2 {
			t.Fatalf("request %d: %d %+v", i, a.status, a.Results)
		}
		if w := a.Results[0]; !w.Allowed || w.Granted != 0 || w.Remaining != 9 {
			t.Fatalf("request %d: the refunded rule reports %+v, want granted 0, remaining 9", i, w)
		}
	}
}

// TestLeaseOnAPluginThatCannotTakeOne: sortedset (min_gap) and leaky (shape)
// do not declare leasable grants, so a lease on them is a positioned load
// error, from `ruled check` and from `ruled serve`.
func TestLeaseOnAPluginThatCannotTakeOne(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", `rules:
  - name: gap
    subject: request.user
    plugin: sortedset
    config: {limit: 50, window: 1s, min_gap: 100ms}
    lease: 10
  - name: shaped
    subject: request.user
    plugin: leaky
    config: {capacity: 10, rate: 10, mode: shape}
    lease: 10
  - name: fine
    subject: request.user
    plugin: tokenbucket
    config: {rate: 10, burst: 10}
    lease: 10
`)
	out, err := exec.Command(buildRuled(t), "check", path).CombinedOutput()
	text := string(out)
	if err == nil || !strings.Contains(text, "rules.yaml:6:12:") || !strings.Contains(text, "rules.yaml:11:12:") ||
		!strings.Contains(text, `plugin "sortedset" does not declare leasable grants`) ||
		strings.Contains(text, ":16:") || !strings.Contains(text, "2 error(s)") {
		t.Fatalf("check: %v\n%s", err, text)
	}
}

// TestRunawayExpressionIsBounded: a `when` that would run for seconds on a
// crafted request ends at its time budget with an error decision for its
// rule (on_error: allow by default), and the other rule still decides.
func TestRunawayExpressionIsBounded(t *testing.T) {
	d := spawnDaemon(t, `rules:
  - name: runaway
    when: 'len(reduce(1..int(attrs["n"]), #acc + attrs["s"], "")) > 0'
    subject: request.user
    plugin: fixedwindow
    config: {limit: 5, window: 1h}
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config: {limit: 5, window: 1h}
`)
	d.waitReady(15e9)
	body := `{"request": {"user": "u"}, "attrs": {"n": "6000", "s": "` + strings.Repeat("s", 1000) + `"}}`
	start := time.Now()
	resp, err := http.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var a struct {
		Results []struct {
			Rule, Degraded, Error string
			Remaining             int64
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &a); err != nil || resp.StatusCode != 200 || len(a.Results) != 2 {
		t.Fatalf("answer %d %s", resp.StatusCode, b)
	}
	if r := a.Results[0]; r.Degraded != "allow" || !strings.Contains(r.Error, "exceeded its evaluation budget") {
		t.Fatalf("the runaway rule: %+v", r)
	}
	if r := a.Results[1]; r.Degraded != "" || r.Remaining != 4 {
		t.Fatalf("the other rule: %+v", r)
	}
	// 20 ms of budget; the seconds the expression would take are the bug.
	if took > time.Second {
		t.Fatalf("the check took %v", took)
	}
	t.Logf("answered in %v", took)
}
