package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/metrics"
	"github.com/ruled-dev/ruled/host/ui"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// openAPIPath is the document the server is held to.
const openAPIPath = "../../docs/openapi.yaml"

// openAPIMethods are the methods an OpenAPI 3.0 path item can describe.
var openAPIMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodTrace,
}

// loadOpenAPI loads docs/openapi.yaml and validates it as OpenAPI 3.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openAPIPath)
	if err != nil {
		t.Fatalf("load %s: %v", openAPIPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("validate %s: %v", openAPIPath, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") || doc.Paths.Len() == 0 {
		t.Fatalf("%s: openapi %q with %d paths, want an OpenAPI 3 document with paths", openAPIPath, doc.OpenAPI, doc.Paths.Len())
	}
	return doc
}

// TestOpenAPIDocumentIsValid loads docs/openapi.yaml and validates it.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	loadOpenAPI(t)
}

// TestOpenAPIDescribesEveryServedRoute reads the ServeMux patterns the
// package registers and requires each to be documented with its method (a
// pattern without a method with every method OpenAPI can name). It also
// checks that the patterns really are served, and that a documented path
// refuses the methods the document does not give it.
func TestOpenAPIDescribesEveryServedRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	patterns, err := servedPatterns(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(patterns) == 0 {
		t.Fatal("found no ServeMux pattern in the package's sources")
	}
	s := startOpenAPIServers(t)
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		docPath, item := documentedPath(doc, path)
		if item == nil {
			t.Errorf("the server serves %q; %s lacks the path", p, openAPIPath)
			continue
		}
		methods := []string{method}
		if method == "" {
			methods = openAPIMethods
		}
		for _, m := range methods {
			if item.GetOperation(m) == nil {
				t.Errorf("the server serves %q; %s lacks %s %s", p, openAPIPath, m, docPath)
			}
		}
		// The pattern is live: the scan found what the server routes.
		url := path
		if strings.HasSuffix(url, "/") && docPath != path {
			url += "x"
		}
		if method == "" {
			method = http.MethodGet
		}
		if code, _ := rawStatus(t, method, s.up.URL+url, "tok"); code == http.StatusNotFound || code == http.StatusMethodNotAllowed || code/100 == 3 {
			t.Errorf("%s %s: %d, but the sources register %q", method, url, code, p)
		}
	}
	// The reverse: what the document leaves out of a path is not served.
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		url := strings.ReplaceAll(path, "{path}", "x")
		for _, m := range openAPIMethods {
			if item.GetOperation(m) != nil || (m == http.MethodHead && item.Get != nil) {
				continue // ServeMux answers HEAD wherever it answers GET
			}
			code, location := rawStatus(t, m, s.up.URL+url, "tok")
			if code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
				continue
			}
			// ServeMux sends /v1/auth to the subtree /v1/auth/ it serves.
			if code/100 == 3 && location == url+"/" {
				if _, sub := documentedPath(doc, location); sub != nil && sub.GetOperation(m) != nil {
					continue
				}
			}
			t.Errorf("%s %s: %d, but %s does not document it", m, url, code, openAPIPath)
		}
	}
}

// servedPatterns returns the string literals the package's non-test
// sources in dir pass as patterns to Handle or HandleFunc.
func servedPatterns(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		var bad error
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				bad = fmt.Errorf("%s: a route whose pattern is not a string literal", fset.Position(call.Pos()))
				return false
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil {
				bad = fmt.Errorf("%s: pattern %s: %w", fset.Position(lit.Pos()), lit.Value, err)
				return false
			}
			out = append(out, p)
			return true
		})
		if bad != nil {
			return nil, bad
		}
	}
	return out, nil
}

// documentedPath finds the document's path for a ServeMux path: the same
// path, or for a subtree ("/v1/auth/") a path whose rest is one parameter.
func documentedPath(doc *openapi3.T, path string) (string, *openapi3.PathItem) {
	if item := doc.Paths.Value(path); item != nil {
		return path, item
	}
	if !strings.HasSuffix(path, "/") {
		return "", nil
	}
	for _, p := range doc.Paths.InMatchingOrder() {
		rest, ok := strings.CutPrefix(p, path)
		if ok && strings.HasPrefix(rest, "{") && strings.HasSuffix(rest, "}") && strings.Count(rest, "{") == 1 {
			return p, doc.Paths.Value(p)
		}
	}
	return "", nil
}

// noRedirects is a client that answers what the server answered, not
// where a redirect leads.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// rawStatus makes a request without validating it and returns the status
// and the Location header.
func rawStatus(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// leasedRule is a window that leases to clients, for the user "leaser"
// only (and alone: it stops), first in both servers' rules.
const leasedRule = `  - name: leased
    when: request.user == "leaser"
    subject: request.user
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
    lease: 8
    stop: true
`

// The rules of the server that decides: a window that leases to clients,
// for the user "leaser" only (and alone: it stops), a small fixed window per
// IP, and the concurrency plugin, which refuses an acquire without a lease
// id as bad input, for the user "no-lease" only.
const openAPIRules = "rules:\n" + leasedRule + `  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
  - name: inflight
    when: request.user == "no-lease"
    subject: request.user
    plugin: concurrency
    config: {limit: 5, ttl: 1m}
`

// The rules of the server whose Redis is gone: it fails closed, and a lease
// for the user "leaser" fails.
const openAPIDownRules = "rules:\n" + leasedRule + `  - name: closed
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
    on_error: deny
  - name: closed-inflight
    when: request.user == "holder"
    subject: request.user
    plugin: concurrency
    config: {limit: 5}
    on_error: deny
`

// openAPIServers are the servers the document is checked against, each
// serving an engine on a real redis-server.
type openAPIServers struct {
	up    *httptest.Server // admin token "tok", metrics, status page
	loop  *httptest.Server // up's engine, no token, status on loopback
	down  *httptest.Server // admin token "tok"; its Redis is killed
	admin *httptest.Server // up's engine, --client-refunds=admin, admin token "tok"
	rules string           // up's rule file
}

func startOpenAPIServers(t *testing.T) *openAPIServers {
	t.Helper()
	var s openAPIServers
	upEngine, upReady, rules := startOpenAPIEngine(t, redistest.Start(t), openAPIRules)
	s.rules = rules
	m := metrics.New(metrics.Options{Version: "openapi-test"})
	m.Bind(upEngine.Inspect())
	s.up = httptest.NewServer(httpapi.New(httpapi.Options{
		Checker: upEngine, Leases: upEngine.ClientLeases(), Holds: upEngine, Admin: upEngine, AdminToken: "tok", Ready: upReady,
		Metrics: m.Handler(), UI: ui.Handler(), Stats: m.StatusFunc("openapi test redis", upReady),
	}))
	t.Cleanup(s.up.Close)
	s.loop = httptest.NewServer(httpapi.New(httpapi.Options{
		Checker: upEngine, Leases: upEngine.ClientLeases(), Admin: upEngine, LoopbackStatus: true, Ready: upReady,
		Stats: m.StatusFunc("openapi test redis", upReady),
	}))
	t.Cleanup(s.loop.Close)
	s.admin = httptest.NewServer(httpapi.New(httpapi.Options{
		Checker: upEngine, Leases: upEngine.ClientLeases(), Holds: upEngine, Admin: upEngine, AdminToken: "tok", Ready: upReady, Refunds: httpapi.RefundsAdmin,
	}))
	t.Cleanup(s.admin.Close)

	downRedis := redistest.Start(t)
	downEngine, downReady, _ := startOpenAPIEngine(t, downRedis, openAPIDownRules)
	downRedis.Kill()
	s.down = httptest.NewServer(httpapi.New(httpapi.Options{
		Checker: downEngine, Leases: downEngine.ClientLeases(), Holds: downEngine, Admin: downEngine, AdminToken: "tok", Ready: downReady,
	}))
	t.Cleanup(s.down.Close)
	return &s
}

// startOpenAPIEngine returns an engine on rs serving rulesText, its
// readiness as ruled serve computes it (with the health probe running),
// and its rule file.
func startOpenAPIEngine(t *testing.T, rs *redistest.Server, rulesText string) (*host.Engine, func(context.Context) error, string) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	c := capability.New(client, capability.Options{Timeout: 2 * time.Second})
	e, err := host.NewEngine(host.Options{Capability: c, Plugins: builtin.All()})
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesText), 0o600); err != nil {
		t.Fatalf("write rules: %v", err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatalf("load rules: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Probe(ctx, 50*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	ready := func(context.Context) error { return errors.Join(c.ReadyErr(), e.Inspect().PluginsReady()) }
	return e, ready, path
}

// liveCall is one request to a live server and the status it should get.
type liveCall struct {
	base   string            // the server's URL
	method string            // HTTP method
	path   string            // path and query
	token  string            // admin bearer token, if any
	host   string            // Host header, if not the server's
	header map[string]string // more request headers
	body   string            // JSON body, if any
	want   int               // the expected status
}

// openAPIChecker validates live answers against the document and records
// which documented answers (method, path, status) were seen.
type openAPIChecker struct {
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool
}

func newOpenAPIChecker(t *testing.T) *openAPIChecker {
	t.Helper()
	doc := loadOpenAPI(t)
	// Route by path alone: the test servers listen on other ports than
	// the document's example server.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router for %s: %v", openAPIPath, err)
	}
	return &openAPIChecker{doc: doc, router: router, seen: map[string]bool{}}
}

func answerKey(method, path string, status int) string {
	return method + " " + path + " " + strconv.Itoa(status)
}

// call makes c's request, requires its status, and validates the answer's
// status, headers and body against the document's operation for it. A
// request expected to succeed must also be valid by the document.
func (v *openAPIChecker) call(t *testing.T, c liveCall) (http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(c.method, c.base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, val := range c.header {
		req.Header.Set(k, val)
	}
	if c.host != "" {
		req.Host = c.host
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", c.method, c.path, err)
	}
	name := fmt.Sprintf("%s %s (%v)", c.method, c.path, c.header)
	if resp.StatusCode != c.want {
		t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, c.want, body)
	}

	// The request as the router and validator see it: a fresh copy, as
	// validation reads the body.
	vreq, err := http.NewRequest(c.method, c.base+c.path, bytes.NewReader([]byte(c.body)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	vreq.Header = req.Header.Clone()
	route, params, err := v.router.FindRoute(vreq)
	if err != nil {
		t.Errorf("%s: %s has no operation for it: %v", name, openAPIPath, err)
		return resp.Header, body
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	if c.want != http.StatusBadRequest {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s: the server takes a request the document refuses: %v", name, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                opts,
	}
	if c.method == http.MethodHead {
		// kin-openapi skips HEAD answers; check the status and headers of
		// the HEAD operation all the same (a HEAD answer has no body).
		get := vreq.Clone(context.Background())
		get.Method = http.MethodGet
		out.RequestValidationInput = &openapi3filter.RequestValidationInput{Request: get, PathParams: params, Route: route, Options: opts}
		out.Options = &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: true}
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: the answer disagrees with %s: %v\nheaders %v\nbody %s", name, openAPIPath, err, resp.Header, body)
	}
	v.seen[answerKey(route.Method, route.Path, resp.StatusCode)] = true
	return resp.Header, body
}

// unseen lists the documented answers no call got.
func (v *openAPIChecker) unseen() []string {
	var out []string
	for _, path := range v.doc.Paths.InMatchingOrder() {
		for method, op := range v.doc.Paths.Value(path).Operations() {
			for code := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					out = append(out, fmt.Sprintf("%s %s %s (not a status this test can produce)", method, path, code))
					continue
				}
				if !v.seen[answerKey(method, path, status)] {
					out = append(out, answerKey(method, path, status))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIDescribesLiveAnswers gets every answer the document describes
// from live servers on real redis-servers (allowed, denied, bad input,
// failing closed, unauthorized, ...) and validates each against the
// document; a documented answer no call got fails the test.
func TestOpenAPIDescribesLiveAnswers(t *testing.T) {
	openapi3filter.RegisterBodyDecoder("text/plain", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	t.Cleanup(func() {
		openapi3filter.UnregisterBodyDecoder("text/plain")
		openapi3filter.UnregisterBodyDecoder("text/html")
	})
	v := newOpenAPIChecker(t)
	s := startOpenAPIServers(t)
	up, down := s.up.URL, s.down.URL

	// Ready: wait for the first health probe of up's Redis.
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := rawStatus(t, http.MethodGet, up+"/readyz", ""); code != http.StatusOK; code, _ = rawStatus(t, http.MethodGet, up+"/readyz", "") {
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	ip := 0
	nextIP := func() string { ip++; return fmt.Sprintf("198.51.100.%d", ip) }
	// Up to its limit, then denied: per-ip allows 2.
	allowedThenDenied := func(c liveCall) {
		t.Helper()
		for i := range 3 {
			c.want = http.StatusOK
			if i == 2 {
				c.want = http.StatusTooManyRequests
			}
			v.call(t, c)
		}
	}

	// Checks.
	for _, path := range []string{"/v1/check", "/v1/acquire"} {
		ip := nextIP()
		allowedThenDenied(liveCall{base: up, method: "POST", path: path, body: `{"request": {"ip": "` + ip + `"}, "attrs": {"tenant": "acme"}}`})
		v.call(t, liveCall{base: up, method: "POST", path: path, body: `{"hits": 1.5}`, want: http.StatusBadRequest})
		v.call(t, liveCall{base: up, method: "POST", path: path, body: `{"request": {"ip": "` + nextIP() + `", "user": "no-lease"}}`, want: http.StatusBadRequest})
		v.call(t, liveCall{base: down, method: "POST", path: path, body: `{"request": {"ip": "` + nextIP() + `"}}`, want: http.StatusServiceUnavailable})
	}
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/check", body: `{}`, want: http.StatusOK}) // no rule matched
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/check", body: `{"request": {"ip": "` + nextIP() + `"}, "hits": 0, "dedup_id": "d1", "best_effort": true}`, want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/acquire", body: `{"request": {"ip": "` + nextIP() + `"}, "timeout_ms": 100}`, want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/acquire", body: `{"timeout_ms": -1}`, want: http.StatusBadRequest})
	batchIP := nextIP()
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/check/batch", want: http.StatusOK,
		body: `{"checks": [{"request": {"ip": "` + batchIP + `"}}, {"request": {"ip": "` + batchIP + `"}}, {"request": {"ip": "` + batchIP + `"}}, {"request": {"user": "no-lease"}}, {}]}`})
	v.call(t, liveCall{base: down, method: "POST", path: "/v1/check/batch", body: `{"checks": [{"request": {"ip": "` + nextIP() + `"}}]}`, want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/check/batch", body: `{"checks": [{}, {"hits": "1"}]}`, want: http.StatusBadRequest})

	// Client leases: taken, then denied (leased allows 10, 8 per lease), refused
	// by a rule without lease: N, failed, returned.
	leaser := `{"request": {"user": "leaser"}, "attrs": {"tenant": "acme"}, "permits": 8}`
	_, body := v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease", body: leaser, want: http.StatusOK})
	var lease struct {
		Lease string `json:"lease"`
	}
	if err := json.Unmarshal(body, &lease); err != nil || lease.Lease == "" {
		t.Fatalf("/v1/lease answered %s, want a lease", body)
	}
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease", body: leaser, want: http.StatusOK}) // the 2 left
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease", body: leaser, want: http.StatusOK}) // denied
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease", body: `{"request": {"ip": "` + nextIP() + `"}, "permits": 5}`, want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease", body: `{"request": {"user": "leaser"}}`, want: http.StatusBadRequest})
	v.call(t, liveCall{base: down, method: "POST", path: "/v1/lease", body: leaser, want: http.StatusServiceUnavailable})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease/return", want: http.StatusOK,
		body: `{"returns": [{"request": {"user": "leaser"}, "attrs": {"tenant": "acme"}, "lease": "` + lease.Lease + `", "unused": 3}]}`})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease/return", body: `{"returns": [{"lease": "!!.!!", "unused": 1}]}`, want: http.StatusBadRequest})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/lease/return", body: `{"returns": [{"lease": "e30.e30", "unused": 1}]}`, want: http.StatusForbidden})
	v.call(t, liveCall{base: down, method: "POST", path: "/v1/lease/return", want: http.StatusServiceUnavailable, // it never read the lease key
		body: `{"returns": [{"request": {"user": "leaser"}, "attrs": {"tenant": "acme"}, "lease": "` + lease.Lease + `", "unused": 3}]}`})

	// In-flight slots (the user "no-lease", 5 at once): held, renewed,
	// released; a renewal refused when every slot is taken (429) or when
	// the rule fails closed (503); a release refused without the admin
	// token under --client-refunds=admin.
	slot := func(id string) string { return `{"request": {"user": "no-lease"}, "lease_id": "` + id + `"}` }
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/check", body: slot("slot-1"), want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/renew", body: slot("slot-1"), want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/release", body: slot("slot-1"), want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/release", body: `{"request": {"user": "no-lease"}, "dedup_id": "slot-1", "hits": 1}`, want: http.StatusBadRequest})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/renew", body: `{"request": {"user": "no-lease"}}`, want: http.StatusBadRequest})
	for i := range 5 {
		v.call(t, liveCall{base: up, method: "POST", path: "/v1/check", body: slot(fmt.Sprint("full-", i)), want: http.StatusOK})
	}
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/renew", body: slot("slot-late"), want: http.StatusTooManyRequests})
	v.call(t, liveCall{base: s.admin.URL, method: "POST", path: "/v1/release", body: slot("full-0"), want: http.StatusForbidden})
	for i := range 5 {
		v.call(t, liveCall{base: s.admin.URL, method: "POST", path: "/v1/release", token: "tok", body: slot(fmt.Sprint("full-", i)), want: http.StatusOK})
	}
	v.call(t, liveCall{base: down, method: "POST", path: "/v1/renew", body: `{"request": {"user": "holder"}, "dedup_id": "h"}`, want: http.StatusServiceUnavailable})

	// Refunds under --client-refunds=admin: refused without the token.
	refundIP := nextIP()
	for _, path := range []string{"/v1/check", "/v1/acquire"} {
		v.call(t, liveCall{base: s.admin.URL, method: "POST", path: path, body: `{"request": {"ip": "` + refundIP + `"}, "hits": -1}`, want: http.StatusForbidden})
		v.call(t, liveCall{base: s.admin.URL, method: "POST", path: path, token: "tok", body: `{"request": {"ip": "` + refundIP + `"}, "hits": -1}`, want: http.StatusOK})
	}
	v.call(t, liveCall{base: s.admin.URL, method: "POST", path: "/v1/check/batch", want: http.StatusForbidden,
		body: `{"checks": [{"request": {"ip": "` + refundIP + `"}}, {"request": {"ip": "` + refundIP + `"}, "hits": -1}]}`})
	v.call(t, liveCall{base: s.admin.URL, method: "POST", path: "/v1/lease/return", want: http.StatusForbidden,
		body: `{"returns": [{"request": {"user": "leaser"}, "attrs": {"tenant": "acme"}, "lease": "` + lease.Lease + `", "unused": 3}]}`})

	// Forward-auth, from a trusted (loopback) proxy.
	authCalls := []liveCall{{method: "GET", path: "/v1/auth"}}
	for _, m := range openAPIMethods {
		authCalls = append(authCalls, liveCall{method: m, path: "/v1/auth/orders?page=2"})
	}
	for _, c := range authCalls {
		c.base = up
		c.header = map[string]string{"X-Real-IP": nextIP(), "X-Original-URI": "/orders"}
		allowedThenDenied(c)
		c.header = map[string]string{"X-Real-IP": nextIP(), "X-Forwarded-User": "no-lease"}
		c.want = http.StatusBadRequest
		v.call(t, c)
		c.base, c.header, c.want = down, map[string]string{"X-Forwarded-For": nextIP()}, http.StatusServiceUnavailable
		v.call(t, c)
	}

	// Admin: the token, its absence, the loopback status mode.
	port := s.loop.URL[strings.LastIndexByte(s.loop.URL, ':'):]
	for _, path := range []string{"/v1/admin/rules", "/v1/admin/plugins", "/v1/admin/stats", "/v1/admin/counters?rule=per-ip"} {
		v.call(t, liveCall{base: up, method: "GET", path: path, token: "tok", want: http.StatusOK})
		v.call(t, liveCall{base: up, method: "GET", path: path, want: http.StatusUnauthorized})
		v.call(t, liveCall{base: up, method: "GET", path: path, token: "wrong", want: http.StatusUnauthorized})
		v.call(t, liveCall{base: s.loop.URL, method: "GET", path: path, host: "localhost" + port, want: http.StatusOK})
		v.call(t, liveCall{base: s.loop.URL, method: "GET", path: path, host: "evil.example" + port, want: http.StatusForbidden})
	}
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reset", token: "tok", body: `{"rule": "per-ip", "subject": "198.51.100.1"}`, want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reset", token: "tok", body: `{"subject": "198.51.100.1"}`, want: http.StatusBadRequest})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reset", token: "tok", body: `{"rule": "no-such-rule"}`, want: http.StatusNotFound})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reset", body: `{"rule": "per-ip"}`, want: http.StatusUnauthorized})
	v.call(t, liveCall{base: down, method: "POST", path: "/v1/admin/reset", token: "tok", body: `{"rule": "closed", "subject": "198.51.100.1"}`, want: http.StatusServiceUnavailable})
	// Counters: per-ip holds the subjects of the checks above.
	v.call(t, liveCall{base: up, method: "GET", path: "/v1/admin/counters?rule=per-ip&limit=1000&cursor=", token: "tok", want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "GET", path: "/v1/admin/counters?rule=per-ip&limit=0", token: "tok", want: http.StatusBadRequest})
	v.call(t, liveCall{base: up, method: "GET", path: "/v1/admin/counters?rule=no-such-rule", token: "tok", want: http.StatusNotFound})
	v.call(t, liveCall{base: down, method: "GET", path: "/v1/admin/counters?rule=closed", token: "tok", want: http.StatusServiceUnavailable})
	v.call(t, liveCall{base: up, method: "DELETE", path: "/v1/admin/counters?rule=per-ip", token: "tok", want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "DELETE", path: "/v1/admin/counters", token: "tok", want: http.StatusBadRequest})
	v.call(t, liveCall{base: up, method: "DELETE", path: "/v1/admin/counters?rule=no-such-rule", token: "tok", want: http.StatusNotFound})
	v.call(t, liveCall{base: up, method: "DELETE", path: "/v1/admin/counters?rule=per-ip", want: http.StatusUnauthorized})
	v.call(t, liveCall{base: down, method: "DELETE", path: "/v1/admin/counters?rule=closed", token: "tok", want: http.StatusServiceUnavailable})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reload", token: "tok", want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reload", want: http.StatusUnauthorized})
	if err := os.WriteFile(s.rules, []byte("rules:\n  - name: broken\n    plugin: no-such-plugin\n"), 0o600); err != nil {
		t.Fatalf("break the rules: %v", err)
	}
	v.call(t, liveCall{base: up, method: "POST", path: "/v1/admin/reload", token: "tok", want: http.StatusUnprocessableEntity})
	// The failed load now shows in the rules' status.
	v.call(t, liveCall{base: up, method: "GET", path: "/v1/admin/rules", token: "tok", want: http.StatusOK})

	// Health, metrics and the status page.
	v.call(t, liveCall{base: up, method: "GET", path: "/livez", want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "GET", path: "/readyz", want: http.StatusOK})
	v.call(t, liveCall{base: down, method: "GET", path: "/readyz", want: http.StatusServiceUnavailable})
	v.call(t, liveCall{base: up, method: "GET", path: "/metrics", want: http.StatusOK})
	v.call(t, liveCall{base: up, method: "GET", path: "/ui/", want: http.StatusOK})

	for _, a := range v.unseen() {
		t.Errorf("%s documents %s, but no call got that answer", openAPIPath, a)
	}
}
