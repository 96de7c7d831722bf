package rules_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// summary renders selections as "rule=subject" (or "rule!error"), space separated.
func summary(sels []rules.Selection) string {
	var parts []string
	for _, s := range sels {
		if s.Err != nil {
			parts = append(parts, s.Rule.Name+"!"+s.Err.Error())
			continue
		}
		parts = append(parts, s.Rule.Name+"="+s.Subject)
	}
	return strings.Join(parts, " ")
}

func TestMatch(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: exempt-office
    when: cidr(request.ip, "10.0.0.0/8")
    subject: '"office"'
    plugin: fixedwindow
    config: {limit: 1000, window: 1s}
    stop: true
  - name: login
    when: request.method == "POST" && request.path == "/login"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
    on_error: deny
  - name: per-user
    when: request.user != ""
    subject: '"u:" + request.user'
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
    shadow: true
  - name: tenant
    when: attrs["tenant"] in ["acme", "globex"] && request.query["debug"] == ""
    subject: attrs["tenant"]
    plugin: fixedwindow
    config: {limit: 50, window: 1s}
  - name: api
    when: glob(request.path, "/api/**") && request.method in ["GET", "HEAD"]
    subject: request.host + request.path
    plugin: fixedwindow
    config: {limit: 10, window: 1s}
    stop: true
  - name: everyone
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`)
	cases := []struct {
		name string
		in   rules.Input
		want string
	}{
		{"only the catch-all", rules.Input{Request: rules.Request{IP: "192.0.2.1", Method: "GET", Path: "/"}},
			"everyone=192.0.2.1"},
		{"stop on exemption", rules.Input{Request: rules.Request{IP: "10.1.2.3", Method: "POST", Path: "/login"}},
			"exempt-office=office"},
		{"login and catch-all", rules.Input{Request: rules.Request{IP: "192.0.2.1", Method: "POST", Path: "/login"}},
			"login=192.0.2.1 everyone=192.0.2.1"},
		{"user and tenant", rules.Input{Request: rules.Request{IP: "192.0.2.1", User: "alice", Path: "/"}, Attrs: map[string]string{"tenant": "acme"}},
			"per-user=u:alice tenant=acme everyone=192.0.2.1"},
		{"tenant excluded by query", rules.Input{Request: rules.Request{IP: "192.0.2.1", Query: map[string]string{"debug": "1"}}, Attrs: map[string]string{"tenant": "acme"}},
			"everyone=192.0.2.1"},
		{"stop on api", rules.Input{Request: rules.Request{IP: "192.0.2.1", Method: "HEAD", Host: "h", Path: "/api/v1/x"}},
			"api=h/api/v1/x"},
		{"api needs the method", rules.Input{Request: rules.Request{IP: "192.0.2.1", Method: "POST", Path: "/api/v1/x"}},
			"everyone=192.0.2.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := summary(s.Match(&tc.in)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	login, _ := s.Rule("login")
	user, _ := s.Rule("per-user")
	if login.OnError != rules.OnErrorDeny || login.Shadow || !user.Shadow || user.OnError != rules.OnErrorAllow ||
		!s.Rules()[0].Stop || login.Stop || login.Algorithm() == nil || login.Algorithm().Info().Name != "fixedwindow" {
		t.Errorf("flags: login %+v, per-user %+v", login, user)
	}
	sel := s.Match(&rules.Input{Request: rules.Request{IP: "192.0.2.1", Method: "POST", Path: "/login"}})
	if want := (fixedwindow.Config{Limit: 5, Window: time.Minute}); sel[0].Config != want {
		t.Errorf("login config %+v", sel[0].Config)
	}
	// AppendMatch reuses the caller's slice.
	buf := make([]rules.Selection, 0, 8)
	out := s.AppendMatch(buf, &rules.Input{Request: rules.Request{IP: "192.0.2.1"}})
	if len(out) != 1 || &out[:1][0] != &buf[:1][0] {
		t.Errorf("AppendMatch did not reuse the slice")
	}
}

func TestFunctions(t *testing.T) {
	s := mustLoad(t, `rules:
  - {name: v4, when: 'cidr(request.ip, "192.0.2.0/24")', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: v6, when: 'cidr(request.ip, "2001:db8::/32")', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: single, when: 'cidr(request.ip, "198.51.100.7")', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: from-attr, when: 'cidr(request.ip, attrs["net"])', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: glob-star, when: 'glob(request.path, "/users/*/posts")', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: glob-deep, when: 'glob(request.path, "/static/**/*.png")', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: header, when: 'header("X-API-Key") != "" && header("x-api-key") == request.headers["x-api-key"]', subject: 'header("X-Api-Key")', plugin: fixedwindow, config: {limit: 1, window: 1s}}
  - {name: builtins, when: 'lower(request.method) == "get" && upper(trim("  a ")) == "A"', subject: '"x"', plugin: fixedwindow, config: {limit: 1, window: 1s}}
`)
	cases := []struct {
		name string
		in   rules.Input
		want string
	}{
		{"ipv4 in", rules.Input{Request: rules.Request{IP: "192.0.2.200"}}, "v4"},
		{"ipv4 out", rules.Input{Request: rules.Request{IP: "192.0.3.1"}}, ""},
		{"ipv4-mapped ipv6", rules.Input{Request: rules.Request{IP: "::ffff:192.0.2.9"}}, "v4"},
		{"ipv6 in", rules.Input{Request: rules.Request{IP: "2001:db8:1::5"}}, "v6"},
		{"ipv6 with zone", rules.Input{Request: rules.Request{IP: "2001:db8::1%eth0"}}, "v6"},
		{"ipv6 out", rules.Input{Request: rules.Request{IP: "2001:db9::1"}}, ""},
		{"single address", rules.Input{Request: rules.Request{IP: "198.51.100.7"}}, "single"},
		{"not an address", rules.Input{Request: rules.Request{IP: "nope"}}, ""},
		{"empty address", rules.Input{}, ""},
		{"network from attrs", rules.Input{Request: rules.Request{IP: "203.0.113.9"}, Attrs: map[string]string{"net": "203.0.113.0/28"}}, "from-attr"},
		{"glob star", rules.Input{Request: rules.Request{Path: "/users/42/posts"}}, "glob-star"},
		{"glob star one segment", rules.Input{Request: rules.Request{Path: "/users/4/2/posts"}}, ""},
		{"glob double star", rules.Input{Request: rules.Request{Path: "/static/a/b/c.png"}}, "glob-deep"},
		{"glob double star none", rules.Input{Request: rules.Request{Path: "/static/c.png"}}, "glob-deep"},
		{"glob double star miss", rules.Input{Request: rules.Request{Path: "/static/a/c.jpg"}}, ""},
		{"header case-insensitive", rules.Input{Request: rules.Request{Headers: map[string]string{"x-api-key": "k1"}}}, "header=k1"},
		{"headers normalised by Match", rules.Input{Request: rules.Request{Headers: map[string]string{"X-Api-KEY": "k2"}}}, "header=k2"},
		{"builtins", rules.Input{Request: rules.Request{Method: "GET"}}, "builtins"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in.Attrs == nil {
				in.Attrs = map[string]string{"net": "0.0.0.0/32"}
			}
			var names []string
			for _, sel := range s.Match(&in) {
				if sel.Err != nil {
					t.Fatalf("%s: %v", sel.Rule.Name, sel.Err)
				}
				if sel.Subject != "x" {
					names = append(names, sel.Rule.Name+"="+sel.Subject)
				} else {
					names = append(names, sel.Rule.Name)
				}
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRuntimeErrorsBecomeSelectionErr(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: bad-when
    when: int(request.headers["x-n"]) > 3
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
    stop: true
  - name: empty-subject
    subject: request.user
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
  - name: bad-network
    when: cidr(request.ip, attrs["net"])
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
  - name: bad-dynamic-value
    subject: request.ip
    plugin: fixedwindow
    config: {limit: '=request.headers["x-limit"]', window: 1s}
  - name: bad-dynamic-type
    subject: request.ip
    plugin: fixedwindow
    config: {limit: '=request.headers["x-t"] == "" ? 5 : [1]', window: 1s}
`)
	sels := s.Match(&rules.Input{
		Request: rules.Request{IP: "192.0.2.1", Headers: map[string]string{"x-n": "many", "x-limit": "lots", "x-t": "t"}},
		Attrs:   map[string]string{"net": "10.0.0.0/99"},
	})
	wants := []struct {
		rule, field, msg string
		line, col        int
	}{
		{"bad-when", "when", "invalid operation: int(many)", 3, 11},
		{"empty-subject", "subject", "subject evaluated to an empty string", 9, 14},
		{"bad-network", "when", `cidr: bad network "10.0.0.0/99"`, 13, 11},
		{"bad-dynamic-value", "config", "limit: want a whole number, got lots", 20, 13},
		{"bad-dynamic-type", "config.limit", "want a number, string, boolean or duration, got []interface {}", 24, 23},
	}
	if len(sels) != len(wants) {
		t.Fatalf("got %s", summary(sels))
	}
	for i, w := range wants {
		var ee *rules.EvalError
		if !errors.As(sels[i].Err, &ee) {
			t.Fatalf("%s: error %v is not an EvalError", w.rule, sels[i].Err)
		}
		if ee.Rule != w.rule || ee.Field != w.field || !strings.Contains(ee.Err.Error(), w.msg) ||
			ee.Pos.Line != w.line || ee.Pos.Column != w.col {
			t.Errorf("got  %s (field %s)\nwant rule %s, field %s, %d:%d, %s", ee, ee.Field, w.rule, w.field, w.line, w.col, w.msg)
		}
	}
	if !errors.Is(sels[1].Err, rules.ErrEmptySubject) {
		t.Errorf("empty subject error %v does not match ErrEmptySubject", sels[1].Err)
	}
}

func TestDynamicConfigByTier(t *testing.T) {
	alg := &counting{Algorithm: fixedwindow.New()}
	dir := writeFiles(t, map[string]string{"r.yaml": `rules:
  - name: per-user
    when: request.user != ""
    subject: request.user
    plugin: fixedwindow
    config:
      limit: '=request.headers["x-tier"] == "pro" ? 1000 : 200'
      window: '=header("x-tier") == "pro" ? "1m" : "10s"'
      offset: ==not-an-expression
`})
	s, err := rules.Load(dir, catalog{"fixedwindow": alg})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rules()[0]
	if !r.Dynamic() || r.RawConfig()["limit"] != `=request.headers["x-tier"] == "pro" ? 1000 : 200` || r.RawConfig()["offset"] != "==not-an-expression" {
		t.Fatalf("raw config %v", r.RawConfig())
	}
	if n := alg.n.Load(); n != 0 {
		t.Fatalf("Configure called %d times at load for a dynamic config", n)
	}
	in := func(tier string) *rules.Input {
		return &rules.Input{Request: rules.Request{User: "u", Headers: map[string]string{"x-tier": tier}}}
	}
	// "==..." escapes a literal string that starts with "=": fixedwindow
	// rejects it as an offset, so this input's config is an error.
	sel := s.Match(in("pro"))
	if sel[0].Err == nil || !strings.Contains(sel[0].Err.Error(), `offset: want a duration such as "500ms", "10s" or "1m", got =not-an-expression`) {
		t.Fatalf("want the literal =not-an-expression reported, got %v", sel[0].Err)
	}

	dir = writeFiles(t, map[string]string{"r.yaml": `rules:
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config:
      limit: '=request.headers["x-tier"] == "pro" ? 1000 : 200'
      window: '=header("x-tier") == "pro" ? "1m" : "10s"'
`})
	alg.n.Store(0)
	s, err = rules.Load(dir, catalog{"fixedwindow": alg})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tier string
		want fixedwindow.Config
	}{
		{"pro", fixedwindow.Config{Limit: 1000, Window: time.Minute}},
		{"free", fixedwindow.Config{Limit: 200, Window: 10 * time.Second}},
		{"", fixedwindow.Config{Limit: 200, Window: 10 * time.Second}},
	}
	for range 3 {
		for _, tc := range cases {
			sel := s.Match(in(tc.tier))
			if len(sel) != 1 || sel[0].Err != nil || sel[0].Config != tc.want {
				t.Fatalf("tier %q: got %+v, want %+v", tc.tier, sel, tc.want)
			}
		}
	}
	// Two distinct resolved configs (free and "" resolve alike): two Configure calls.
	if n := alg.n.Load(); n != 2 {
		t.Errorf("Configure called %d times, want 2 (one per distinct resolved config)", n)
	}
}

func TestDynamicConfigCacheIsBounded(t *testing.T) {
	alg := &counting{Algorithm: fixedwindow.New()}
	dir := writeFiles(t, map[string]string{"r.yaml": `rules:
  - {name: a, subject: request.ip, plugin: fixedwindow, config: {limit: '=int(request.headers["x-n"])', window: 1s}}
`})
	s, err := rules.Load(dir, catalog{"fixedwindow": alg})
	if err != nil {
		t.Fatal(err)
	}
	const distinct = 3000
	for i := 1; i <= distinct; i++ {
		in := &rules.Input{Request: rules.Request{IP: "192.0.2.1", Headers: map[string]string{"x-n": fmt.Sprint(i)}}}
		if sel := s.Match(in); sel[0].Err != nil || sel[0].Config.(fixedwindow.Config).Limit != int64(i) {
			t.Fatalf("n=%d: %+v", i, sel)
		}
	}
	if n := alg.n.Load(); n != distinct {
		t.Fatalf("Configure called %d times, want %d", n, distinct)
	}
	// The cache holds at most 1024 entries, so replaying the first values
	// calls Configure again for most of them, and always answers correctly.
	for i := 1; i <= distinct; i++ {
		in := &rules.Input{Request: rules.Request{IP: "192.0.2.1", Headers: map[string]string{"x-n": fmt.Sprint(i)}}}
		if sel := s.Match(in); sel[0].Config.(fixedwindow.Config).Limit != int64(i) {
			t.Fatalf("replay n=%d: %+v", i, sel)
		}
	}
	if n := alg.n.Load(); n < 2*distinct-1024 {
		t.Errorf("Configure called %d times in all: more than 1024 configs cached?", n)
	}
}

// TestMatchConcurrent hammers one Set from many goroutines (run with -race).
func TestMatchConcurrent(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: exempt
    when: cidr(request.ip, "10.0.0.0/8")
    subject: '"internal"'
    plugin: fixedwindow
    config: {limit: 1000, window: 1s}
    stop: true
  - name: tier
    when: request.user != ""
    subject: request.user + "@" + attrs["tenant"]
    plugin: fixedwindow
    config: {limit: '=header("X-Tier") == "pro" ? 1000 : 10 + len(request.user)', window: 1s}
  - name: ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
`)
	const workers, iters = 8, 2000
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				user := fmt.Sprintf("user%d", i%37)
				ip := fmt.Sprintf("192.0.2.%d", i%250)
				if i%5 == 0 {
					ip = "10.0.0.1"
				}
				tier := []string{"pro", "free"}[(i+w)%2]
				in := &rules.Input{
					Request: rules.Request{IP: ip, User: user, Headers: map[string]string{"X-Tier": tier}},
					Attrs:   map[string]string{"tenant": "t"},
				}
				got := s.Match(in)
				var want string
				var limit int64 = 1000
				if tier != "pro" {
					limit = int64(10 + len(user))
				}
				if ip == "10.0.0.1" {
					want = "exempt=internal"
				} else {
					want = "tier=" + user + "@t ip=" + ip
				}
				if g := summary(got); g != want {
					errs <- fmt.Errorf("worker %d iteration %d: got %s, want %s", w, i, g, want)
					return
				}
				if ip != "10.0.0.1" && got[0].Config.(fixedwindow.Config).Limit != limit {
					errs <- fmt.Errorf("worker %d iteration %d: limit %v, want %d", w, i, got[0].Config, limit)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNormalizeHeaders(t *testing.T) {
	lower := map[string]string{"x-a": "1"}
	if got := rules.NormalizeHeaders(lower); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", lower) {
		t.Error("an already lower-case map was copied")
	}
	got := rules.NormalizeHeaders(map[string]string{"X-A": "1", "Content-Type": "t"})
	if len(got) != 2 || got["x-a"] != "1" || got["content-type"] != "t" {
		t.Errorf("got %v", got)
	}
}

// A configure error that is a plain error (as from a Wasm or process plugin)
// is reported at the config mapping.
type strictAlg struct{ sdk.Algorithm }

func (strictAlg) Configure(map[string]any) (sdk.Config, error) {
	return nil, errors.New("the plugin said no")
}

func TestConfigErrorWithoutKey(t *testing.T) {
	dir := writeFiles(t, map[string]string{"r.yaml": "rules:\n  - name: a\n    subject: request.ip\n    plugin: strict\n    config: {x: 1}\n"})
	_, err := rules.Load(dir, catalog{"strict": strictAlg{fixedwindow.New()}})
	checkErrors(t, err, "r.yaml", []want{{5, 13, rules.CodeBadConfig, "a", "config: the plugin said no"}})
}

type panicAlg struct{ sdk.Algorithm }

func (panicAlg) Configure(map[string]any) (sdk.Config, error) { panic("boom") }

func TestConfigurePanicIsAnError(t *testing.T) {
	dir := writeFiles(t, map[string]string{"r.yaml": "rules:\n  - {name: a, subject: request.ip, plugin: p, config: {limit: 1}}\n  - {name: b, subject: request.ip, plugin: p, config: {limit: '=1'}}\n"})
	_, err := rules.Load(dir, catalog{"p": panicAlg{fixedwindow.New()}})
	checkErrors(t, err, "r.yaml", []want{{2, 55, rules.CodeBadConfig, "a", "panicked in Configure: boom"}})
}

// echoAlg returns its raw config as the parsed config, and rejects a
// "limit" below 1 anywhere, naming the nested key as sdk.ConfigReader
// users do ("also[1].limit: ...").
type echoAlg struct{ sdk.Algorithm }

func (echoAlg) Configure(raw map[string]any) (sdk.Config, error) {
	var errs []error
	if also, ok := raw["also"].([]any); ok {
		for i, a := range also {
			if m, ok := a.(map[string]any); ok {
				if n, ok := m["limit"].(int); ok && n < 1 {
					errs = append(errs, fmt.Errorf("also[%d].limit: must be at least 1", i))
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return raw, nil
}

func TestNestedConfig(t *testing.T) {
	cat := catalog{"echo": echoAlg{fixedwindow.New()}}
	dir := writeFiles(t, map[string]string{"r.yaml": `rules:
  - name: nested
    subject: lower(request.user)
    plugin: echo
    config:
      limit: 5
      also:
        - {limit: '=request.query["n"] == "" ? 3 : int(request.query["n"])', window: 1h}
        - {limit: 7, window: '=duration("1m")', tags: [a, '==b']}
`})
	s, err := rules.Load(dir, cat)
	if err != nil {
		t.Fatal(err)
	}
	sel := s.Match(&rules.Input{Request: rules.Request{User: "Bob", Query: map[string]string{"n": "9"}}})
	if len(sel) != 1 || sel[0].Err != nil || sel[0].Subject != "bob" {
		t.Fatalf("%+v", sel)
	}
	got := fmt.Sprint(sel[0].Config)
	wantCfg := "map[also:[map[limit:9 window:1h] map[limit:7 tags:[a =b] window:1m0s]] limit:5]"
	if got != wantCfg {
		t.Errorf("config\n got  %s\n want %s", got, wantCfg)
	}
	// A dynamic value the plugin rejects is this request's error.
	sel = s.Match(&rules.Input{Request: rules.Request{User: "Bob", Query: map[string]string{"n": "-1"}}})
	if sel[0].Err == nil || !strings.Contains(sel[0].Err.Error(), "also[0].limit: must be at least 1") {
		t.Errorf("got %v", sel[0].Err)
	}

	// Static nested errors point at the nested value.
	dir = writeFiles(t, map[string]string{"r.yaml": `rules:
  - name: nested
    subject: request.user
    plugin: echo
    config:
      also:
        - {limit: 1, window: 1h}
        - {limit: 0, window: 1h}
`})
	_, err = rules.Load(dir, cat)
	checkErrors(t, err, "r.yaml", []want{{8, 19, rules.CodeBadConfig, "nested", "config: also[1].limit: must be at least 1"}})
	var e *rules.Error
	if !errors.As(err, &e) || e.Code != rules.CodeBadConfig {
		t.Errorf("errors.As through the ErrorList: %v", e)
	}
}
