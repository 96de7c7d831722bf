package ratelimitheader_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/ratelimitheader"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/sdk"
)

// sfItem is one member of a structured-field List whose items are Strings
// with Integer parameters: the only shape RateLimit and RateLimit-Policy
// take.
type sfItem struct {
	name   string
	params map[string]int64
	order  []string
}

// parseSFList parses a List of String items with Integer parameters
// strictly by RFC 9651 §4.2, refusing anything else: what a client
// library of the draft would accept.
func parseSFList(v string) ([]sfItem, error) {
	var out []sfItem
	s := strings.TrimLeft(v, " ")
	for {
		if len(s) == 0 || s[0] != '"' {
			return nil, fmt.Errorf("item must be a String at %q", s)
		}
		var name strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			c := s[i]
			if c == '\\' {
				i++
				if i == len(s) || (s[i] != '"' && s[i] != '\\') {
					return nil, fmt.Errorf("bad escape in %q", v)
				}
				c = s[i]
			} else if c < 0x20 || c > 0x7e {
				return nil, fmt.Errorf("bad character %q in %q", c, v)
			}
			name.WriteByte(c)
		}
		if i == len(s) {
			return nil, fmt.Errorf("unterminated String in %q", v)
		}
		it := sfItem{name: name.String(), params: map[string]int64{}}
		s = s[i+1:]
		for len(s) > 0 && s[0] == ';' {
			s = strings.TrimLeft(s[1:], " ")
			k := 0
			for k < len(s) && (s[k] >= 'a' && s[k] <= 'z' || k > 0 && (s[k] >= '0' && s[k] <= '9' || strings.IndexByte("_-.*", s[k]) >= 0)) {
				k++
			}
			if k == 0 || k == len(s) || s[k] != '=' {
				return nil, fmt.Errorf("parameter must be key=Integer at %q", s)
			}
			key := s[:k]
			s = s[k+1:]
			d := 0
			for d < len(s) && d < 16 && (s[d] >= '0' && s[d] <= '9' || d == 0 && s[d] == '-') {
				d++
			}
			n, err := strconv.ParseInt(s[:d], 10, 64)
			if err != nil || d == 16 && d < len(s) && s[d] >= '0' && s[d] <= '9' {
				return nil, fmt.Errorf("parameter %s must be an Integer of at most 15 digits at %q", key, s)
			}
			if _, dup := it.params[key]; dup {
				return nil, fmt.Errorf("parameter %s twice in %q", key, v)
			}
			it.params[key] = n
			it.order = append(it.order, key)
			s = s[d:]
		}
		out = append(out, it)
		s = strings.TrimLeft(s, " \t")
		if len(s) == 0 {
			return out, nil
		}
		if s[0] != ',' {
			return nil, fmt.Errorf("want , between items at %q", s)
		}
		s = strings.TrimLeft(s[1:], " \t")
		if len(s) == 0 {
			return nil, fmt.Errorf("trailing comma in %q", v)
		}
	}
}

// checkRateLimitFields checks the fields Set set for res
// against draft-ietf-httpapi-ratelimit-headers-11 and against the
// decision itself.
func checkRateLimitFields(t *testing.T, h http.Header, res *host.Result) {
	t.Helper()
	var reporting, denying []string // rules each field must list, in order
	for _, rr := range res.Results {
		// A limit: a positive one, or a block (limit 0) over a window.
		if rr.Shadow || rr.Limit < 0 || (rr.Limit == 0 && rr.Window <= 0) {
			continue
		}
		reporting = append(reporting, rr.Rule)
		if !rr.Allowed {
			denying = append(denying, rr.Rule)
		}
	}
	byName := map[string]host.RuleResult{}
	for _, rr := range res.Results {
		byName[rr.Rule] = rr
	}
	names := func(items []sfItem) []string {
		var ns []string
		for _, it := range items {
			ns = append(ns, it.name)
		}
		return ns
	}

	policy, err := parseSFList(h.Get("RateLimit-Policy"))
	if len(reporting) == 0 {
		if len(h.Values("RateLimit-Policy")) != 0 || len(h.Values("RateLimit")) != 0 {
			t.Fatalf("no rule reports a limit, yet headers %v", h)
		}
	} else {
		if err != nil || len(h.Values("RateLimit-Policy")) != 1 {
			t.Fatalf("RateLimit-Policy %q: %v", h.Values("RateLimit-Policy"), err)
		}
		if got := names(policy); !slices.Equal(got, reporting) {
			t.Fatalf("RateLimit-Policy lists %q, want every enforcing rule with a limit %q", got, reporting)
		}
		for _, p := range policy {
			rr := byName[p.name]
			if p.order[0] != "q" || p.params["q"] != rr.Limit {
				t.Fatalf("policy %q: q=%d first, want %d", p.name, p.params["q"], rr.Limit)
			}
			w, hasW := p.params["w"]
			if hasW != (rr.Window > 0) || hasW && (w < 1 || time.Duration(w)*time.Second < rr.Window ||
				time.Duration(w-1)*time.Second >= rr.Window) {
				t.Fatalf("policy %q: w=%d (present %v) for a window of %s", p.name, w, hasW, rr.Window)
			}
		}
	}

	want := reporting
	if !res.Allowed {
		want = denying
	}
	if len(want) == 0 {
		if len(h.Values("RateLimit")) != 0 {
			t.Fatalf("RateLimit %q with no rule to report", h.Values("RateLimit"))
		}
	} else {
		items, err := parseSFList(h.Get("RateLimit"))
		if err != nil || len(h.Values("RateLimit")) != 1 {
			t.Fatalf("RateLimit %q: %v", h.Values("RateLimit"), err)
		}
		if got := names(items); !slices.Equal(got, want) {
			t.Fatalf("RateLimit lists %q, want %q (allowed %v)", got, want, res.Allowed)
		}
		for _, it := range items {
			rr := byName[it.name]
			r, t2 := it.params["r"], it.params["t"]
			if !slices.Equal(it.order, []string{"r", "t"}) || r < 0 || t2 < 0 {
				t.Fatalf("RateLimit item %q: params %v", it.name, it.params)
			}
			switch {
			case rr.Allowed && (r != max(rr.Remaining, 0) || time.Duration(t2)*time.Second < rr.Reset ||
				t2 > 0 && time.Duration(t2-1)*time.Second >= rr.Reset):
				t.Fatalf("allowed %q: r=%d t=%d for remaining %d, reset %s", it.name, r, t2, rr.Remaining, rr.Reset)
			case !rr.Allowed && (r != 0 || t2 < 1 || time.Duration(t2)*time.Second < rr.RetryAfter):
				t.Fatalf("denied %q: r=%d t=%d: a denial has no quota left until its retry-after %s", it.name, r, t2, rr.RetryAfter)
			}
		}
	}

	ra := h.Values("Retry-After")
	if res.Allowed {
		if len(ra) != 0 {
			t.Fatalf("allowed, yet Retry-After %q", ra)
		}
		return
	}
	if len(ra) != 1 {
		t.Fatalf("denied: Retry-After %q", ra)
	}
	secs, err := strconv.ParseInt(ra[0], 10, 64)
	if err != nil || secs < 1 || time.Duration(secs)*time.Second < res.RetryAfter {
		t.Fatalf("Retry-After %q for a retry-after of %s", ra[0], res.RetryAfter)
	}
	// The draft's §6: Retry-After is never earlier than the end of an
	// effective window the response reports.
	items, _ := parseSFList(h.Get("RateLimit"))
	for _, it := range items {
		if it.params["t"] > secs {
			t.Fatalf("RateLimit %q: t=%d ends after Retry-After %d", it.name, it.params["t"], secs)
		}
	}
}

func TestRateLimitFieldsFollowTheDraft(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 11))
	dur := func() time.Duration {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return time.Duration(rng.Int64N(int64(3 * time.Second)))
		case 2:
			return time.Duration(rng.IntN(120)) * time.Second
		}
		return time.Duration(rng.Int64N(int64(48 * time.Hour)))
	}
	for i := range 5000 {
		res := host.Result{Allowed: true}
		for j := range rng.IntN(5) {
			rr := host.RuleResult{Rule: fmt.Sprintf("rule-%d", j), Shadow: rng.IntN(6) == 0,
				Decision: sdk.Decision{Allowed: rng.IntN(3) != 0, Limit: rng.Int64N(20) - 2, Remaining: rng.Int64N(25) - 3,
					Window: dur(), Reset: dur(), RetryAfter: dur()}}
			if !rr.Allowed && !rr.Shadow {
				res.Allowed = false
				res.RetryAfter = max(res.RetryAfter, rr.RetryAfter)
			}
			res.Results = append(res.Results, rr)
		}
		if rng.IntN(20) == 0 { // denied by on_error: deny, with no limit to report
			res.Allowed, res.FailClosed = false, true
		}
		h := http.Header{"X-Kept": {"1"}}
		ratelimitheader.Set(h, &res)
		t.Run(strconv.Itoa(i), func(t *testing.T) { checkRateLimitFields(t, h, &res) })
		if h.Get("X-Kept") != "1" {
			t.Fatalf("result %d: an unrelated header was lost", i)
		}
		if t.Failed() {
			t.Fatalf("result %d: %+v", i, res)
		}
	}
}

// TestRateLimitFieldsOfKnownDecisions pins the exact fields of decisions
// whose headers once contradicted them.
func TestRateLimitFieldsOfKnownDecisions(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		res                        host.Result
		policy, rateLimit, retryAt string
	}{
		{"min_gap denial with quota unspent",
			host.Result{RetryAfter: 400 * time.Millisecond, Results: []host.RuleResult{{Rule: "login-per-ip",
				Decision: sdk.Decision{Limit: 5, Remaining: 1, Window: time.Minute, Reset: time.Minute, RetryAfter: 400 * time.Millisecond}}}},
			`"login-per-ip";q=5;w=60`, `"login-per-ip";r=0;t=1`, "1"},
		{"tokenbucket denial refilling for longer than a token takes",
			host.Result{RetryAfter: 500 * time.Millisecond, Results: []host.RuleResult{{Rule: "api",
				Decision: sdk.Decision{Limit: 10, Window: time.Second, Reset: 1900 * time.Millisecond, RetryAfter: 500 * time.Millisecond}}}},
			`"api";q=10;w=1`, `"api";r=0;t=1`, "1"},
		{"two rules allowed",
			host.Result{Allowed: true, Results: []host.RuleResult{
				{Rule: "burst", Decision: sdk.Decision{Allowed: true, Limit: 100, Remaining: 42, Window: time.Minute, Reset: 30*time.Second + 1}},
				{Rule: "shadowed", Shadow: true, Decision: sdk.Decision{Allowed: false, Limit: 1}},
				{Rule: "daily", Decision: sdk.Decision{Allowed: true, Limit: 1000, Remaining: 999, Window: 24 * time.Hour, Reset: 3 * time.Hour}}}},
			`"burst";q=100;w=60, "daily";q=1000;w=86400`, `"burst";r=42;t=31, "daily";r=999;t=10800`, ""},
		{"one of two rules denies",
			host.Result{RetryAfter: 2500 * time.Millisecond, Results: []host.RuleResult{
				{Rule: "burst", Decision: sdk.Decision{Allowed: true, Limit: 100, Remaining: 42, Window: time.Minute, Reset: time.Minute}},
				{Rule: "daily", Decision: sdk.Decision{Limit: 3, Window: 24 * time.Hour, Reset: 3 * time.Hour, RetryAfter: 2500 * time.Millisecond}}}},
			`"burst";q=100;w=60, "daily";q=3;w=86400`, `"daily";r=0;t=3`, "3"},
		{"fail-closed with no limit", host.Result{FailClosed: true, Results: []host.RuleResult{{Rule: "down"}}}, "", "", "1"},
		{"no rule", host.Result{Allowed: true}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			ratelimitheader.Set(h, &tc.res)
			if h.Get("RateLimit-Policy") != tc.policy || h.Get("RateLimit") != tc.rateLimit || h.Get("Retry-After") != tc.retryAt {
				t.Fatalf("RateLimit-Policy %q, RateLimit %q, Retry-After %q\nwant %q, %q, %q", h.Get("RateLimit-Policy"),
					h.Get("RateLimit"), h.Get("Retry-After"), tc.policy, tc.rateLimit, tc.retryAt)
			}
			checkRateLimitFields(t, h, &tc.res)
		})
	}
}

// TestRateLimitFieldsOfRealDenials drives the plugins whose denials once
// sent fields that contradicted them (a min_gap denial said quota
// remained; a token bucket's t outlasted Retry-After) through the engine
// on a real Redis, and checks the fields of every decision against the
// draft.
func TestRateLimitFieldsOfRealDenials(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: 2 * time.Second}), Plugins: builtin.All()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(`rules:
  - name: login-gap
    when: request.path == "/login"
    subject: request.ip
    plugin: sortedset
    config: {limit: 5, window: 1m, min_gap: 10s}
  - name: api-bucket
    when: request.path == "/api"
    subject: request.ip
    plugin: tokenbucket
    config: {rate: 1, per: 2s, burst: 2}
  - name: api-daily
    when: request.path == "/api"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000, window: 24h}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		denyAt  int
		nPolicy int
	}{{"/login", 1, 1}, {"/api", 2, 2}} {
		for i := 0; i <= tc.denyAt; i++ {
			res := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "192.0.2.9", Path: tc.path}, Hits: 1})
			h := http.Header{}
			ratelimitheader.Set(h, &res)
			checkRateLimitFields(t, h, &res)
			if res.Allowed != (i < tc.denyAt) {
				t.Fatalf("%s call %d: allowed %v", tc.path, i, res.Allowed)
			}
			// A denial ends the check at the denying rule, so only an
			// allowed answer reports every rule the path matches.
			if got := strings.Count(h.Get("RateLimit-Policy"), `;q=`); i < tc.denyAt && got != tc.nPolicy {
				t.Fatalf("%s call %d: RateLimit-Policy %q, want %d policies", tc.path, i, h.Get("RateLimit-Policy"), tc.nPolicy)
			}
			if i == tc.denyAt && (h.Get("RateLimit") == "" || !strings.Contains(h.Get("RateLimit"), ";r=0;")) {
				t.Fatalf("%s denial: RateLimit %q", tc.path, h.Get("RateLimit"))
			}
		}
	}
}

// TestSetAllocatesTwice holds the doc comment's promise:
// one string for the three values and one array to hold them, however
// many rules the fields list.
func TestSetAllocatesTwice(t *testing.T) {
	res := host.Result{RetryAfter: 2500 * time.Millisecond, Results: []host.RuleResult{
		{Rule: "burst", Decision: sdk.Decision{Allowed: true, Limit: 100, Remaining: 42, Window: time.Minute, Reset: time.Minute}},
		{Rule: "hourly", Decision: sdk.Decision{Allowed: true, Limit: 500, Remaining: 7, Window: time.Hour, Reset: time.Hour}},
		{Rule: "daily", Decision: sdk.Decision{Limit: 3, Window: 24 * time.Hour, Reset: 3 * time.Hour, RetryAfter: 2500 * time.Millisecond}}}}
	h := http.Header{}
	for _, allowed := range []bool{true, false} {
		res.Allowed = allowed
		if n := testing.AllocsPerRun(100, func() { ratelimitheader.Set(h, &res) }); n > 2 {
			t.Fatalf("allowed %v: %v allocations, want at most 2", allowed, n)
		}
	}
}
