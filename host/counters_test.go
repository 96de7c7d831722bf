package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

const counterRules = `
rules:
  - name: per-ip
    when: request.path == "/ip"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1h}
  - name: per-user
    when: request.path == "/user"
    subject: request.user
    plugin: tokenbucket
    config: {rate: 1, per: 1h, burst: '=request.headers["x-tier"] == "pro" ? 10 : 4'}
  - name: per-limit-header
    when: request.path == "/header"
    subject: request.user
    plugin: fixedwindow
    config: {limit: '=int(request.headers["x-limit"])', window: 1h}
  - name: other
    when: request.path == "/ip"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000, window: 1h}
  - name: free
    when: request.path == "/free"
    exempt: true
`

func hit(t *testing.T, e *host.Engine, req host.Request, n int) {
	t.Helper()
	for range n {
		res := e.Check(context.Background(), &host.CheckRequest{Request: req, Hits: 1})
		for _, rr := range res.Results {
			if rr.Err != nil {
				t.Fatalf("rule %s: %v", rr.Rule, rr.Err)
			}
		}
	}
}

// allCounters pages through a rule's counters, limit at a time, checking
// each page's order, and returns them by subject.
func allCounters(t *testing.T, e *host.Engine, rule string, limit int) (map[string]host.Counter, int) {
	t.Helper()
	out := map[string]host.Counter{}
	cursor, pages := "", 0
	for {
		page, err := e.Counters().Page(context.Background(), rule, cursor, limit)
		if err != nil {
			t.Fatalf("rule %s, page %d: %v", rule, pages+1, err)
		}
		pages++
		if page.Rule != rule {
			t.Fatalf("page of rule %q, want %q", page.Rule, rule)
		}
		checkOrder(t, page.Counters)
		for _, c := range page.Counters {
			out[c.Subject] = c
		}
		if page.Next == "" {
			return out, pages
		}
		cursor = page.Next
	}
}

// checkOrder requires the subjects nearest to or over their limit first:
// limited ones, then by the share of the limit used; unread ones last.
func checkOrder(t *testing.T, cs []host.Counter) {
	t.Helper()
	rank := func(c host.Counter) (int, float64) {
		switch {
		case c.Err != nil || c.Limit == 0:
			return 2, 0
		case c.Limited:
			return 0, -float64(c.Used) / float64(c.Limit)
		}
		return 1, -float64(c.Used) / float64(c.Limit)
	}
	for i := 1; i < len(cs); i++ {
		ga, ra := rank(cs[i-1])
		gb, rb := rank(cs[i])
		if ga > gb || (ga == gb && ra > rb) {
			t.Fatalf("counters out of order at %d: %+v before %+v", i, cs[i-1], cs[i])
		}
	}
}

// TestCountersPagesAndPeeks lists a rule's subjects in pages smaller than
// their number, each read with a peek (nothing consumed), the ones at
// their limit first; then clears the rule, and only that rule.
func TestCountersPagesAndPeeks(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, counterRules, 2*time.Second)
	ctx := context.Background()
	const subjects = 230
	used := map[string]int64{}
	for i := range subjects {
		ip := fmt.Sprintf("198.51.100.%d", i)
		if i >= 200 {
			ip = fmt.Sprintf("2001:db8::%x", i) // escaped in keys
		}
		n := i%7 + 1 // 1 to 7 hits, limit 5
		hit(t, e, host.Request{IP: ip, Path: "/ip"}, n)
		used[ip] = int64(min(n, 5))
	}

	got, pages := allCounters(t, e, "per-ip", 60)
	if pages < 2 {
		t.Fatalf("%d subjects in %d page(s) of 60", len(got), pages)
	}
	if len(got) != subjects {
		t.Fatalf("%d subjects, want %d", len(got), subjects)
	}
	for ip, u := range used {
		c, ok := got[ip]
		switch {
		case !ok:
			t.Fatalf("subject %s not listed", ip)
		case c.Err != nil || c.Hashed:
			t.Fatalf("subject %s: %+v", ip, c)
		case c.Limit != 5 || c.Used != u || c.Remaining != 5-u || c.Limited != (u == 5):
			t.Fatalf("subject %s: %+v, want %d used of 5", ip, c, u)
		case c.Reset <= 0 || c.Reset > time.Hour:
			t.Fatalf("subject %s: reset %v", ip, c.Reset)
		}
	}
	// Listing consumed nothing: a second listing reads the same.
	again, _ := allCounters(t, e, "per-ip", 1000)
	for ip, c := range again {
		if c.Used != used[ip] {
			t.Fatalf("subject %s: %d used after listing, want %d", ip, c.Used, used[ip])
		}
	}
	// The first page of all the subjects starts with the limited ones.
	first, err := e.Counters().Page(ctx, "per-ip", "", 0)
	if err != nil || len(first.Counters) == 0 || !first.Counters[0].Limited {
		t.Fatalf("first page: %+v, %v", first.Counters[:min(3, len(first.Counters))], err)
	}

	if _, err := e.Counters().Page(ctx, "no-such-rule", "", 10); !errors.Is(err, host.ErrNoRule) {
		t.Fatalf("unknown rule: %v", err)
	}
	if _, err := e.Counters().Page(ctx, "per-ip", "garbage!", 10); !errors.Is(err, host.ErrBadCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
	if _, err := e.Counters().Clear(ctx, "no-such-rule"); !errors.Is(err, host.ErrNoRule) {
		t.Fatalf("clear an unknown rule: %v", err)
	}
	// An exempt rule has no plugin and nothing to list or clear.
	if page, err := e.Counters().Page(ctx, "free", "", 10); err != nil || len(page.Counters) != 0 || page.Next != "" {
		t.Fatalf("an exempt rule: %+v, %v", page, err)
	}
	if n, err := e.Counters().Clear(ctx, "free"); err != nil || n != 0 {
		t.Fatalf("clear an exempt rule: %d, %v", n, err)
	}

	// Clear: per-ip's subjects start afresh, other keeps its counts. A
	// subject denied before (and in the deny cache) is allowed again.
	limited := "198.51.100.6" // 7 hits
	if res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: limited, Path: "/ip"}, Hits: 1}); res.Allowed {
		t.Fatal("a subject over its limit was allowed")
	}
	n, err := e.Counters().Clear(ctx, "per-ip")
	if err != nil || n < subjects {
		t.Fatalf("ClearCounters: %d keys, %v; want one or more per subject", n, err)
	}
	if page, err := e.Counters().Page(ctx, "per-ip", "", 1000); err != nil || len(page.Counters) != 0 || page.Next != "" {
		t.Fatalf("after clearing: %d counters, next %q, %v", len(page.Counters), page.Next, err)
	}
	others, _ := allCounters(t, e, "other", 1000)
	if len(others) != subjects || others[limited].Used != 5 { // per-ip, first, denied the rest
		t.Fatalf("rule other after clearing per-ip: %d subjects, %s %+v", len(others), limited, others[limited])
	}
	res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: limited, Path: "/ip"}, Hits: 1})
	if !res.Allowed || res.Results[0].Remaining != 4 {
		t.Fatalf("after clearing, %s: %+v", limited, res)
	}
}

// TestCountersOfDynamicConfigs: a rule's dynamic config is evaluated for
// an empty request; when it cannot be, every subject is listed with the
// error and no limit.
func TestCountersOfDynamicConfigs(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, counterRules, 2*time.Second)
	ctx := context.Background()
	hit(t, e, host.Request{User: "alice", Path: "/user", Headers: map[string]string{"x-tier": "pro"}}, 8)
	hit(t, e, host.Request{User: "bob", Path: "/user"}, 4)
	got, _ := allCounters(t, e, "per-user", 10)
	// The empty request's burst is 4: bob used it all; alice, a pro with
	// a burst of 10, has 2 left, which is 2 used of 4.
	if c := got["bob"]; c.Err != nil || c.Limit != 4 || c.Used != 4 || !c.Limited {
		t.Fatalf("bob: %+v", c)
	}
	if c := got["alice"]; c.Err != nil || c.Limit != 4 || c.Used != 2 || c.Limited {
		t.Fatalf("alice: %+v", c)
	}

	hit(t, e, host.Request{User: "carol", Path: "/header", Headers: map[string]string{"x-limit": "7"}}, 2)
	page, err := e.Counters().Page(ctx, "per-limit-header", "", 10)
	if err != nil || len(page.Counters) != 1 {
		t.Fatalf("per-limit-header: %+v, %v", page, err)
	}
	if c := page.Counters[0]; c.Subject != "carol" || c.Err == nil || c.Limit != 0 {
		t.Fatalf("a config an empty request cannot evaluate: %+v, want carol with an error", c)
	}

	// A subject too long for keys is listed (and read) by its hash.
	long := strings.Repeat("x", 200)
	hit(t, e, host.Request{IP: long, Path: "/ip"}, 2)
	page, err = e.Counters().Page(ctx, "per-ip", "", 10)
	if err != nil || len(page.Counters) != 1 {
		t.Fatalf("per-ip: %+v, %v", page, err)
	}
	if c := page.Counters[0]; !c.Hashed || c.Subject != capability.EscapeSubject(long) || c.Err != nil || c.Used != 2 || c.Limit != 5 {
		t.Fatalf("a hashed subject: %+v", c)
	}
}

// TestClusterCountersThroughTheEngine lists and clears a rule's subjects
// on a 3-master Cluster.
func TestClusterCountersThroughTheEngine(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	e := newClusterEngine(t, cl.URL(), counterRules, nil)
	ctx := context.Background()
	const subjects = 120
	for i := range subjects {
		hit(t, e, host.Request{IP: fmt.Sprintf("203.0.113.%d", i), Path: "/ip"}, i%6+1)
	}
	got, pages := allCounters(t, e, "per-ip", 25)
	if len(got) != subjects || pages < 3 {
		t.Fatalf("%d subjects in %d pages, want %d in 3 or more", len(got), pages, subjects)
	}
	for i := range subjects {
		ip := fmt.Sprintf("203.0.113.%d", i)
		if c := got[ip]; c.Err != nil || c.Used != int64(min(i%6+1, 5)) {
			t.Fatalf("subject %s: %+v", ip, c)
		}
	}
	n, err := e.Counters().Clear(ctx, "per-ip")
	if err != nil || n < subjects {
		t.Fatalf("ClearCounters: %d, %v", n, err)
	}
	if got, _ := allCounters(t, e, "per-ip", 1000); len(got) != 0 {
		t.Fatalf("after clearing: %d subjects", len(got))
	}
	if got, _ := allCounters(t, e, "other", 1000); len(got) != subjects {
		t.Fatalf("rule other after clearing per-ip: %d subjects, want %d", len(got), subjects)
	}
}

// TestCountersAcrossRuleChanges checks what docs/rules.md ("Counters")
// says happens to a rule's counters when the rule is removed, restored,
// changed, renamed, or given another subject or plugin.
func TestCountersAcrossRuleChanges(t *testing.T) {
	srv := redistest.Start(t)
	const base = `
rules:
  - name: keep
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
`
	login := func(name, subject, plugin, config string) string {
		return base + "  - name: " + name + "\n    subject: " + subject + "\n    plugin: " + plugin + "\n    config: " + config + "\n"
	}
	e := newEngine(t, srv, login("login", "request.ip", "fixedwindow", "{limit: 5, window: 1h}"), 2*time.Second)
	ctx := context.Background()
	path := e.Status().Path
	reload := func(rulesText string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(rulesText), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reload(context.Background(), "test"); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	used := func(rule string) map[string]int64 {
		t.Helper()
		got, _ := allCounters(t, e, rule, 100)
		out := map[string]int64{}
		for s, c := range got {
			if c.Err != nil {
				t.Fatalf("rule %s, subject %s: %v", rule, s, c.Err)
			}
			out[s] = c.Used
		}
		return out
	}
	admin := srv.Client()
	ttl := func(key string) time.Duration {
		t.Helper()
		d, err := admin.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const ip = "192.0.2.1"
	req := host.Request{IP: ip, User: "alice"}
	hit(t, e, req, 3)
	key := "ruled:fixedwindow:login:{" + ip + "}:c"
	if d := ttl(key); d <= 0 || d > time.Hour+time.Second {
		t.Fatalf("TTL of %s: %v, want the window's end and a second at most", key, d)
	}

	// Removed: the keys stay, with their TTL; restored: the count resumes.
	reload(base)
	if d := ttl(key); d <= 0 {
		t.Fatalf("the rule removed, its key %s has TTL %v", key, d)
	}
	reload(login("login", "request.ip", "fixedwindow", "{limit: 5, window: 1h}"))
	if u := used("login"); u[ip] != 3 {
		t.Fatalf("the rule restored: %v, want 3 used by %s", u, ip)
	}

	// Config changed: the same keys, read with the new limit.
	reload(login("login", "request.ip", "fixedwindow", "{limit: 10, window: 1h}"))
	if got, _ := allCounters(t, e, "login", 100); got[ip].Used != 3 || got[ip].Limit != 10 {
		t.Fatalf("the config changed: %+v", got[ip])
	}

	// Renamed: new keys, from nothing; the old ones are left to expire.
	reload(login("login2", "request.ip", "fixedwindow", "{limit: 10, window: 1h}"))
	if u := used("login2"); len(u) != 0 {
		t.Fatalf("the renamed rule starts with %v", u)
	}
	hit(t, e, req, 1)
	if u := used("login2"); u[ip] != 1 {
		t.Fatalf("the renamed rule: %v, want 1 used by %s", u, ip)
	}
	if d := ttl(key); d <= 0 {
		t.Fatalf("the old name's key %s: TTL %v", key, d)
	}

	// Another subject expression: new subjects, new keys; the old
	// subjects' keys stay (listed) until they expire.
	reload(login("login2", "request.user", "fixedwindow", "{limit: 10, window: 1h}"))
	hit(t, e, req, 2)
	if u := used("login2"); u["alice"] != 2 || u[ip] != 1 {
		t.Fatalf("the subject changed: %v, want alice 2 and %s 1", u, ip)
	}

	// Another plugin: its own keys; the old plugin's are neither listed
	// nor cleared, and expire.
	reload(login("login2", "request.user", "sortedset", "{limit: 10, window: 1h}"))
	if u := used("login2"); len(u) != 0 {
		t.Fatalf("the plugin changed: %v listed", u)
	}
	hit(t, e, req, 1)
	if n, err := e.Counters().Clear(ctx, "login2"); err != nil || n != 2 { // sortedset's log and meta
		t.Fatalf("ClearCounters: %d, %v", n, err)
	}
	if d := ttl("ruled:fixedwindow:login2:{alice}:c"); d <= 0 {
		t.Fatalf("the old plugin's key: TTL %v", d)
	}
}
