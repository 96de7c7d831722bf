package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/metrics"
	"github.com/ruled-dev/ruled/host/ui"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// rulesYAML is the rule file of the tests. Its daily windows turn over 12 h
// from the test's start, so that the counts of the traffic a test makes are
// still the window's when the page reads them, whenever the test runs (a
// window of a minute turned over between the two now and then).
var rulesYAML = strings.ReplaceAll(`rules:
  - name: login-per-ip
    when: request.path == "/login"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 24h, offset: OFFSET}
  - name: api-per-user
    when: request.user != ""
    subject: request.user
    plugin: fixedwindow
    config: {limit: 1000, window: 24h, offset: OFFSET}
    on_error: local
  - name: quiet
    when: request.path == "/never"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 24h, offset: OFFSET}
`, "OFFSET", halfADayAgo(time.Now()))

// halfADayAgo is the offset of the daily windows that began 12 h before now.
func halfADayAgo(now time.Time) string {
	day := 24 * time.Hour
	return ((now.Sub(now.Truncate(day)) + day/2) % day).Truncate(time.Second).String()
}

const token = "ui-test-token"

// page is ruled's handler for one test, with a hook run before each
// /v1/admin/stats answer.
type page struct {
	srv    *httptest.Server
	engine *host.Engine
	rules  string
	redis  string // the Redis master's address
	polls  atomic.Int64
	onPoll atomic.Pointer[func(n int64)]
}

func newPage(t *testing.T, adminToken string, loopback bool) *page {
	t.Helper()
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	m := metrics.New(metrics.Options{Version: "e2e"})
	cap := capability.New(client, capability.Options{Timeout: 2 * time.Second, Observe: m.RedisCall, OnAvailability: m.RedisAvailable})
	e, err := host.NewEngine(host.Options{Capability: cap, Plugins: builtin.All(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	m.Bind(e.Inspect())
	probing, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { cap.Probe(probing, time.Second); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	p := &page{engine: e, rules: filepath.Join(t.TempDir(), "rules.yaml"), redis: rs.Addr()}
	if err := os.WriteFile(p.rules, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), p.rules); err != nil {
		t.Fatal(err)
	}
	ping := func(ctx context.Context) error { return client.Ping(ctx).Err() }
	api := httpapi.New(httpapi.Options{
		Checker: e, Leases: e.ClientLeases(), Admin: e, AdminToken: adminToken, LoopbackStatus: loopback,
		Metrics: m.Handler(), UI: ui.Handler(), Stats: m.StatusFunc("redis://"+rs.Addr(), ping),
	})
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/admin/stats" {
			n := p.polls.Add(1)
			if f := p.onPoll.Load(); f != nil {
				(*f)(n)
			}
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *page) traffic(path, ip, user string, n int) {
	for range n {
		p.engine.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: ip, Path: path, User: user}, Hits: 1})
	}
}

func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	t.Fatal("chromium not found on PATH: run scripts/deps.sh (Debian: apt-get install chromium)")
	return ""
}

// browse loads url in headless Chromium, lets the page run for budget of
// virtual time (its timers run fast; network fetches are waited for) and
// returns the DOM. extra flags replace --dump-dom (a screenshot, say).
func browse(t *testing.T, url string, budget time.Duration, extra ...string) string {
	t.Helper()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=" + strconv.Itoa(int(budget.Milliseconds())),
	}
	if len(extra) == 0 {
		extra = []string{"--dump-dom"}
	}
	args = append(append(args, extra...), url)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return string(out)
}

var chartRE = regexp.MustCompile(`<svg [^>]*class="chart"[^>]*>`)
var attrRE = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)

// charts returns each chart's data attributes by rule.
func charts(dom string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, tag := range chartRE.FindAllString(dom, -1) {
		attrs := map[string]string{}
		for _, m := range attrRE.FindAllStringSubmatch(tag, -1) {
			attrs[m[1]] = m[2]
		}
		out[attrs["data-rule"]] = attrs
	}
	return out
}

var counterRowRE = regexp.MustCompile(`<tr data-counter-rule="[^>]*>`)

// counterRows returns the attributes of the rows of subjects nearest their
// limit, by rule.
func counterRows(dom string) map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for _, tag := range counterRowRE.FindAllString(dom, -1) {
		attrs := map[string]string{}
		for _, m := range attrRE.FindAllStringSubmatch(tag, -1) {
			attrs[m[1]] = m[2]
		}
		if attrs["data-subject"] != "" {
			out[attrs["data-counter-rule"]] = append(out[attrs["data-counter-rule"]], attrs)
		}
	}
	return out
}

func polls(t *testing.T, dom string) int {
	t.Helper()
	m := regexp.MustCompile(`<body data-polls="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page never rendered stats:\n%s", dom)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestStatusPageInChromium loads /ui/ in headless Chromium with the admin
// token in the URL fragment, before and during traffic, and reads the
// rendered DOM: the rules are listed and their charts follow the counters.
func TestStatusPageInChromium(t *testing.T) {
	p := newPage(t, token, false)
	url := p.srv.URL + "/ui/#token=" + token

	before := browse(t, url, 4*time.Second)
	if n := polls(t, before); n < 3 {
		t.Fatalf("%d polls in 4 s of virtual time, want 3 or more", n)
	}
	for _, want := range []string{"login-per-ip", "api-per-user", "quiet", "fixedwindow", "Redis up", "version e2e"} {
		if !strings.Contains(before, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	c := charts(before)
	if len(c) != 3 {
		t.Fatalf("charts %v", c)
	}
	if x := c["login-per-ip"]; x["data-allowed-total"] != "0" || x["data-denied-total"] != "0" || x["data-peak-rate"] != "0.00" {
		t.Fatalf("chart before traffic: %v", x)
	}

	// Traffic arrives between the page's first and second polls.
	hook := func(n int64) {
		if n == 2 {
			p.traffic("/login", "198.51.100.7", "", 8) // 5 allowed, 3 denied
			p.traffic("/api", "198.51.100.8", "alice", 4)
		}
	}
	p.polls.Store(0)
	p.onPoll.Store(&hook)
	after := browse(t, url, 4*time.Second)
	if n := polls(t, after); n < 3 {
		t.Fatalf("%d polls", n)
	}
	c = charts(after)
	x := c["login-per-ip"]
	if x["data-allowed-total"] != "5" || x["data-denied-total"] != "3" {
		t.Fatalf("login-per-ip chart after traffic: %v", x)
	}
	if peak, _ := strconv.ParseFloat(x["data-peak-rate"], 64); peak <= 0 {
		t.Fatalf("login-per-ip chart shows no rate after traffic: %v", x)
	}
	if a := c["api-per-user"]; a["data-allowed-total"] != "4" {
		t.Fatalf("api-per-user chart: %v", a)
	}
	if q := c["quiet"]; q["data-allowed-total"] != "0" || q["data-peak-rate"] != "0.00" {
		t.Fatalf("quiet chart: %v", q)
	}
	// The Redis master, up, with the calls of the traffic (12 decisions,
	// less the two denials the deny cache answered) and no error.
	node := regexp.MustCompile(`<tr data-node="` + regexp.QuoteMeta(p.redis) + `">(.*?)</tr>`).FindStringSubmatch(after)
	if node == nil || !strings.Contains(node[1], ">up<") || !strings.Contains(node[1], `<td class="num">10</td><td class="num">0</td>`) {
		t.Fatalf("the page's Redis node row: %q, want %s up with 10 calls and 0 errors", node, p.redis)
	}

	// A page opened after the traffic shows the subjects nearest their
	// limit: its first poll reads each rule's first page of counters.
	dom := browse(t, url, 4*time.Second)
	if !regexp.MustCompile(`<body [^>]*data-counter-rounds="[1-9]`).MatchString(dom) {
		t.Fatalf("no round of counters in 4 s of virtual time:\n%s", dom)
	}
	rows := counterRows(dom)
	if r := rows["login-per-ip"]; len(r) != 1 || r[0]["data-subject"] != "198.51.100.7" || r[0]["data-used"] != "5" ||
		r[0]["data-limit"] != "5" || r[0]["data-limited"] != "true" {
		t.Fatalf("login-per-ip's subjects on the page: %v\n%s", r, regexp.MustCompile(`(?s)<table id="counters">.*?</table>`).FindString(dom))
	}
	if r := rows["api-per-user"]; len(r) != 1 || r[0]["data-subject"] != "alice" || r[0]["data-used"] != "4" || r[0]["data-limited"] != "false" {
		t.Fatalf("api-per-user's subjects on the page: %v", r)
	}
	if r := rows["quiet"]; len(r) != 0 {
		t.Fatalf("quiet has no subject, the page shows %v", r)
	}

	// A failed reload is listed with its position.
	if err := os.WriteFile(p.rules, []byte(rulesYAML+"  - name: broken\n    subject: request.ipp\n    plugin: fixedwindow\n    config: {limit: 1, window: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.engine.Reload(context.Background(), "test"); err == nil {
		t.Fatal("bad rules reloaded")
	}
	failed := browse(t, url, 2*time.Second)
	if !strings.Contains(failed, "last reload failed") || !regexp.MustCompile(`rules\.yaml:19:\d+: </code>rule broken: `).MatchString(failed) {
		t.Fatalf("the page does not show the reload error with its position:\n%s", failed)
	}
}

// TestStatusPageAuth: without the token the page asks for it; with no
// token configured on a loopback listener it works without one.
func TestStatusPageAuth(t *testing.T) {
	p := newPage(t, token, false)
	dom := browse(t, p.srv.URL+"/ui/", 2*time.Second)
	if !strings.Contains(dom, "This page needs the admin token") || !regexp.MustCompile(`<form id="login" class="login">`).MatchString(dom) {
		t.Fatalf("no token prompt:\n%s", dom)
	}
	if strings.Contains(dom, "data-polls") {
		t.Fatal("stats rendered without the token")
	}
	dom = browse(t, p.srv.URL+"/ui/#token=wrong", 2*time.Second)
	if !strings.Contains(dom, "The admin token was refused.") {
		t.Fatalf("a wrong token is not reported:\n%s", dom)
	}

	open := newPage(t, "", true)
	dom = browse(t, open.srv.URL+"/ui/", 2*time.Second)
	if polls(t, dom) < 1 || !strings.Contains(dom, "login-per-ip") {
		t.Fatalf("loopback without a token:\n%s", dom)
	}

	off := newPage(t, "", false)
	dom = browse(t, off.srv.URL+"/ui/", 2*time.Second)
	if !strings.Contains(dom, "The admin endpoints are off") {
		t.Fatalf("no message when the admin endpoints are off:\n%s", dom)
	}
}

// TestStatusPageScreenshot writes docs/status-page.png when
// RULED_UI_SCREENSHOT is set to its path (go test ./host/ui -run
// Screenshot with RULED_UI_SCREENSHOT=$PWD/docs/status-page.png).
func TestStatusPageScreenshot(t *testing.T) {
	out := os.Getenv("RULED_UI_SCREENSHOT")
	if out == "" {
		t.Skip("set RULED_UI_SCREENSHOT=/abs/path.png to write a screenshot")
	}
	p := newPage(t, token, false)
	// Varying traffic on every poll, so that the charts have a shape.
	hook := func(n int64) {
		time.Sleep(200 * time.Millisecond) // a gentler pace than virtual time's
		login := int(n%5) + 1
		p.traffic("/login", "198.51.100."+strconv.Itoa(int(n%3)), "", login)
		p.traffic("/api", "198.51.100.9", "user-"+strconv.Itoa(int(n%4)), 3+int(n%7))
	}
	p.onPoll.Store(&hook)
	if err := os.WriteFile(p.rules, []byte(rulesYAML+"  - name: broken\n    subject: request.ipp\n    plugin: fixedwindow\n    config: {limit: 1, window: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _ = p.engine.Reload(context.Background(), "test")
	browse(t, p.srv.URL+"/ui/#token="+token, 45*time.Second, "--screenshot="+out, "--window-size=1200,800")
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
}
