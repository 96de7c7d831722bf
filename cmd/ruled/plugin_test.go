package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// buildPlugin runs `ruled plugin build pkg -o out` and fails the test on error.
func buildPlugin(t *testing.T, pkg, out string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"plugin", "build", pkg, "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("ruled plugin build %s: exit %d\n%s", pkg, code, stderr.String())
	}
	return stdout.String()
}

func TestPluginBuildAndInspect(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "gcra.wasm")
	built := buildPlugin(t, "../../examples/plugins/gcra/wasm", out)
	sum := fileSHA256(t, out)
	if !strings.Contains(built, "wrote "+out) || !strings.Contains(built, "sha256 "+sum) {
		t.Fatalf("build output:\n%s\nwant the file and its sha256 %s", built, sum)
	}

	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"plugin", "inspect", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("inspect: exit %d\n%s", code, stderr.String())
	}
	got := stdout.String()
	for _, want := range []string{
		"file     " + out + "\n",
		"sha256   " + sum + "\n",
		"name     gcra\n",
		"version  1.0.0\n",
		"traits   firm_denials leasable refunds\n",
		"steps    yes\n",
		"  decide: HMGET HSET PEXPIRE DEL\n    returns {allowed, granted, limit, remaining, reset_us, retry_after_us}\n",
		`gcra: {wasm: gcra.wasm, sha256: "` + sum + `"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, got)
		}
	}
	t.Log(got)
}

func TestPluginCommandErrors(t *testing.T) {
	dir := t.TempDir()
	notModule := writeFile(t, dir, "x.wasm", "not a module")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plugin"}, 2, "ruled plugin build DIR"},
		{[]string{"plugin", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"plugin", "build"}, 2, "want exactly one package directory"},
		{[]string{"plugin", "build", filepath.Join(dir, "nowhere"), "-o", filepath.Join(dir, "y.wasm")}, 1, "is not a directory"},
		{[]string{"plugin", "build", dir, "-o", filepath.Join(dir, "y.wasm")}, 1, "go build in " + dir},
		{[]string{"plugin", "inspect"}, 2, "want exactly one module"},
		{[]string{"plugin", "inspect", filepath.Join(dir, "missing.wasm")}, 1, "no such file"},
		{[]string{"plugin", "inspect", notModule}, 1, "x.wasm"},
		{[]string{"plugin", "inspect", "/dev/zero"}, 1, "/dev/zero: not a regular file (it is a character device)"},
		{[]string{"plugin", "new"}, 2, "want exactly one plugin name"},
		{[]string{"plugin", "new", "My_Limit", "--dir", filepath.Join(dir, "p1")}, 1, `plugin name "My_Limit"`},
		{[]string{"plugin", "new", "q", "--lang", "rust", "--kind", "process", "--dir", filepath.Join(dir, "p2")}, 1, "process plugins are written in Go"},
		{[]string{"plugin", "new", "q", "--dir", dir}, 1, "is not empty"},
		{[]string{"plugin", "sdk", dir, "other"}, 2, "want at most one project directory"},
		{[]string{"plugin", "sdk", filepath.Join(dir, "nowhere")}, 1, "not a plugin project"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
	if got := defaultModuleName("../../examples/plugins/gcra/wasm"); got != "gcra.wasm" {
		t.Errorf("default module name %q, want gcra.wasm", got)
	}
}

// server is a `ruled serve` running in-process.
type server struct {
	base    string
	dataDir string
	logs    *lockedBuffer
	stop    func() int // stops it and returns its exit code
}

// startServe runs `ruled serve` with args plus a free --listen and a
// --data-dir in dir, and waits until it is ready.
func startServe(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	s := &server{dataDir: filepath.Join(dir, "data"), logs: &lockedBuffer{}}
	addr := freePort(t)
	s.base = "http://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	args = append([]string{"serve", "--listen", addr, "--data-dir", s.dataDir}, args...)
	go func() { done <- run(ctx, args, io.Discard, s.logs) }()
	code, stopped := 0, false
	s.stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Error("serve did not stop within 20s")
				code = -1
			}
		}
		return code
	}
	t.Cleanup(func() {
		if c := s.stop(); c != 0 {
			t.Errorf("serve exited %d\n%s", c, s.logs.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		if resp, err := http.Get(s.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case code = <-done:
			stopped = true
			t.Fatalf("serve exited %d before it was ready:\n%s", code, s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 60s:\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkResult is the part of a /v1/check answer the tests look at.
type checkResult struct {
	status     int
	retryAfter string
	Allowed    bool `json:"allowed"`
	Results    []struct {
		Rule         string `json:"rule"`
		Plugin       string `json:"plugin"`
		Allowed      bool   `json:"allowed"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		ResetMS      int64  `json:"reset_ms"`
		RetryAfterMS int64  `json:"retry_after_ms"`
		Degraded     string `json:"degraded"`
		Error        string `json:"error"`
	} `json:"results"`
}

func (s *server) check(t *testing.T, body string) checkResult {
	t.Helper()
	resp, err := http.Post(s.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := checkResult{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("check answer: %v", err)
	}
	return r
}

// TestServeBuiltinsWasm runs the built-ins through the Wasm driver from a
// directory that `ruled plugin build` filled as `make plugins` does. Only
// the built-ins the rules use are loaded, so fixedwindow is enough here.
func TestServeBuiltinsWasm(t *testing.T) {
	dir := t.TempDir()
	mods := filepath.Join(dir, "plugins")
	buildPlugin(t, "../../plugins/fixedwindow/wasm", filepath.Join(mods, "fixedwindow.wasm"))
	rules := writeFile(t, dir, "rules.yaml", `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 10s}
`)
	s := startServe(t, dir, "--rules", rules, "--builtins", "wasm", "--plugins-dir", mods)
	var codes []int
	for range 4 {
		codes = append(codes, s.check(t, `{"request": {"ip": "203.0.113.7"}}`).status)
	}
	if !slices.Equal(codes, []int{200, 200, 200, 429}) {
		t.Fatalf("status codes %v, want 3 × 200 then 429", codes)
	}
	logs := s.logs.String()
	for _, alg := range builtin.All() {
		if want := `msg="plugin started" plugin=` + alg.Info().Name + " version=" + alg.Info().Version + " driver=wasm"; !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if n := strings.Count(logs, `msg="built-in loaded as Wasm"`); n != 1 || !strings.Contains(logs, `msg="built-in loaded as Wasm" plugin=fixedwindow`) {
		t.Errorf("%d built-ins loaded as Wasm, want fixedwindow alone:\n%s", n, logs)
	}
	s.waitIdle(t, "fixedwindow") // its module's pool, in /metrics
	if _, ok := s.poolInstances(t, "tokenbucket", "idle"); ok {
		t.Error("/metrics reports the pool of tokenbucket, whose module no rule loaded")
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, s.logs.String())
	}
}

// TestServeBuiltinsWasmNeedsItsModules refuses to start without the module
// of a built-in the rules use, or with one that is not that built-in, and
// says how to build it.
func TestServeBuiltinsWasmNeedsItsModules(t *testing.T) {
	dir := t.TempDir()
	mods := filepath.Join(dir, "plugins")
	buildPlugin(t, "../../plugins/fixedwindow/wasm", filepath.Join(mods, "fixedwindow.wasm"))
	rules := writeFile(t, dir, "rules.yaml", `rules:
  - name: bucket
    subject: request.ip
    plugin: tokenbucket
    config: {rate: 5}
`)
	serve := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var stderr bytes.Buffer
		args = append([]string{"serve", "--rules", rules, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}, args...)
		code := run(ctx, args, io.Discard, &stderr)
		return code, stderr.String()
	}
	missing := filepath.Join(mods, "tokenbucket.wasm")
	if code, got := serve("--builtins", "wasm", "--plugins-dir", mods); code != 1 || !strings.Contains(got, "rules.yaml:5:13:") ||
		!strings.Contains(got, missing+" is missing") || !strings.Contains(got, "make plugins") {
		t.Errorf("missing module: exit %d, want 1 and the rule's position, the file and make plugins:\n%s", code, got)
	}
	// A rule whose config is all dynamic: no Configure at load, but the
	// module must still be there at start.
	dynamic := writeFile(t, dir, "dynamic.yaml", `rules:
  - name: queue
    subject: request.ip
    plugin: leaky
    config: {capacity: '=len(request.ip)', rate: 1}
`)
	if code, got := serve("--builtins", "wasm", "--plugins-dir", mods, "--rules", dynamic); code != 1 ||
		!strings.Contains(got, `the built-in leaky runs as Wasm`) || !strings.Contains(got, filepath.Join(mods, "leaky.wasm")+" is missing") {
		t.Errorf("missing module of a dynamic rule: exit %d:\n%s", code, got)
	}
	if code, got := serve("--builtins", "wasm", "--plugins-dir", filepath.Join(dir, "nowhere")); code != 1 ||
		!strings.Contains(got, "nowhere is not a directory") || !strings.Contains(got, "make plugins") {
		t.Errorf("missing directory: exit %d:\n%s", code, got)
	}
	if code, got := serve("--builtins", "fast"); code != 2 || !strings.Contains(got, `--builtins "fast": want native or wasm`) {
		t.Errorf("--builtins fast: exit %d:\n%s", code, got)
	}
	// Another built-in's module under tokenbucket's name.
	b, err := os.ReadFile(filepath.Join(mods, "fixedwindow.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(missing, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, got := serve("--builtins", "wasm", "--plugins-dir", mods); code != 1 ||
		!strings.Contains(got, "is not the tokenbucket linked into this ruled") {
		t.Errorf("wrong module: exit %d:\n%s", code, got)
	}
}

// gcraRules is examples/plugins/gcra/rules.yaml, to be written next to the
// module: the declaration pinned to sum, and one more rule that limits each
// user to 3 at once, then one per 10s.
func gcraRules(t *testing.T, sum string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/plugins/gcra/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const decl = "  gcra: {wasm: ./gcra.wasm}\n"
	if !strings.Contains(string(b), decl) {
		t.Fatalf("the example's rule file lacks %q", decl)
	}
	return strings.Replace(string(b), decl, `  gcra: {wasm: ./gcra.wasm, sha256: "`+sum+`"}`+"\n", 1) + `  - name: per-user
    when: request.user != ""
    subject: request.user
    plugin: gcra
    config: {rate: 1, per: 10s, burst: 2}
`
}

// TestServeWasmPlugin is the walkthrough of docs/plugins.md end to end:
// build the gcra example, pin it, serve it with the managed Redis and its
// per-plugin ACL user, and get GCRA decisions over HTTP.
func TestServeWasmPlugin(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "gcra.wasm")
	buildPlugin(t, "../../examples/plugins/gcra/wasm", mod)
	rules := writeFile(t, dir, "rules.yaml", gcraRules(t, fileSHA256(t, mod)))
	s := startServe(t, dir, "--rules", rules) // --redis-acl=true by default

	var got []string
	for range 4 {
		r := s.check(t, `{"request": {"user": "alice"}}`)
		if len(r.Results) != 1 || r.Results[0].Plugin != "gcra" || r.Results[0].Limit != 3 || r.Results[0].Degraded != "" {
			t.Fatalf("answer %+v, want one gcra result with limit 3, not degraded", r)
		}
		res := r.Results[0]
		got = append(got, fmt.Sprintf("%d remaining=%d", r.status, res.Remaining))
		if r.status == http.StatusTooManyRequests {
			// TAT is 30s ahead; the next request fits in τ = 30s at 10s
			// from the first: a little under 10s from now.
			if res.RetryAfterMS < 9000 || res.RetryAfterMS > 10000 || res.ResetMS < 29000 || res.ResetMS > 30000 {
				t.Errorf("denial: retry_after %dms, reset %dms; want about 10s and 30s", res.RetryAfterMS, res.ResetMS)
			}
			if ra, err := strconv.Atoi(r.retryAfter); err != nil || ra != 10 {
				t.Errorf("Retry-After %q, want 10", r.retryAfter)
			}
		}
	}
	if want := []string{"200 remaining=2", "200 remaining=1", "200 remaining=0", "429 remaining=0"}; !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if r := s.check(t, `{"request": {"user": "bob"}}`); r.status != 200 || r.Results[0].Remaining != 2 {
		t.Fatalf("another user: %+v", r)
	}
	// The example's own rule: 21 at once.
	if r := s.check(t, `{"request": {"headers": {"x-api-key": "k1"}}}`); r.status != 200 || len(r.Results) != 1 ||
		r.Results[0].Rule != "api-per-key" || r.Results[0].Limit != 21 || r.Results[0].Remaining != 20 {
		t.Fatalf("the example's rule: %+v", r)
	}

	// Isolation: the plugin runs as its own ACL user with exactly the
	// commands it declared, and its keys live under ruled:gcra:.
	logs := s.logs.String()
	if strings.Contains(logs, "isolation off") || !strings.Contains(logs, `msg="plugin started" plugin=gcra`) {
		t.Fatalf("log shows isolation off, or no gcra start:\n%s", logs)
	}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(s.dataDir, "redis.sock")})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "ruled:gcra:*").Result()
	slices.Sort(keys)
	want := []string{"ruled:gcra:api-per-key:{k1}:tat", "ruled:gcra:per-user:{alice}:tat", "ruled:gcra:per-user:{bob}:tat"}
	if err != nil || !slices.Equal(keys, want) {
		t.Fatalf("gcra keys %v (%v), want one per user under ruled:gcra:", keys, err)
	}
	acl, err := rdb.Do(ctx, "ACL", "GETUSER", capability.ACLUser("gcra")).Result()
	if err != nil {
		t.Fatalf("ACL GETUSER: %v", err)
	}
	user := fmt.Sprint(acl)
	for _, want := range []string{"~ruled:gcra:*", "+hmget", "+hset", "+pexpire", "+del", "-@all"} {
		if !strings.Contains(user, want) {
			t.Errorf("ACL user of gcra lacks %s: %s", want, user)
		}
	}
}

// TestPluginLoadErrorsArePositioned: a module whose digest is not the pinned
// one does not load, and neither check nor serve accepts the rules, with the
// declaration's position; with the right pin, check compiles the module and
// notes that the configs are not validated, and check --start-plugins loads
// it and has it validate the rules' configs.
func TestPluginLoadErrorsArePositioned(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "gcra.wasm")
	buildPlugin(t, "../../examples/plugins/gcra/wasm", mod)
	wrong := strings.Repeat("0", 64)
	rules := writeFile(t, dir, "rules.yaml", gcraRules(t, wrong))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"check", rules},
		{"serve", "--rules", rules, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")},
	} {
		var stderr bytes.Buffer
		code := run(ctx, args, io.Discard, &stderr)
		got := stderr.String()
		for _, want := range []string{"rules.yaml:11:3:", `plugin "gcra"`, "sha256 mismatch", wrong, fileSHA256(t, mod), "refusing to load it"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: output lacks %q:\n%s", args[0], want, got)
			}
		}
		if code != 1 {
			t.Errorf("%s: exit %d, want 1", args[0], code)
		}
	}

	// The right pin: the module loads and its Configure finds the one bad
	// config, at its position (compiling a module takes seconds, so this is
	// the only check that loads one).
	bad := strings.Replace(gcraRules(t, fileSHA256(t, mod)), "{rate: 1, per: 10s, burst: 2}", "{rate: 1, per: 10s, burst: -2}", 1)
	badPath := writeFile(t, dir, "bad.yaml", bad)
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"check", badPath}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), `bad.yaml:11:3: note: plugin "gcra" was not started`) {
		t.Errorf("check without --start-plugins: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := run(ctx, []string{"check", "--start-plugins", badPath}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `bad.yaml:22:40: rule "per-user": config: burst: must be at least 0, got -2`) ||
		!strings.Contains(stderr.String(), "1 error(s)") {
		t.Errorf("check, bad config: exit %d\n%s", code, stderr.String())
	}
}

// TestServeReloadRefusesAModuleThatMissesItsPin: with ruled serving a
// pinned Wasm plugin, the module is rebuilt on disk without the pin being
// updated. The watcher reloads, the reload fails with a plugin-load error
// at the declaration, which the log and GET /v1/admin/rules show, and the
// old rules and module keep deciding. A log file written next to the rules
// reloads nothing.
func TestServeReloadRefusesAModuleThatMissesItsPin(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "gcra.wasm")
	buildPlugin(t, "../../examples/plugins/gcra/wasm", mod)
	rules := writeFile(t, dir, "rules.yaml", gcraRules(t, fileSHA256(t, mod)))
	s := startServe(t, dir, "--rules", rules)
	type answer struct {
		Status struct {
			Loads     int `json:"loads"`
			Failures  int `json:"failures"`
			LastError []struct {
				File    string `json:"file"`
				Line    int    `json:"line"`
				Column  int    `json:"column"`
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"last_error"`
		} `json:"status"`
	}
	status := func() answer {
		t.Helper()
		code, body := httpGet(t, s.base+"/v1/admin/rules")
		var a answer
		if err := json.Unmarshal([]byte(body), &a); code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/admin/rules: %d %v\n%s", code, err, body)
		}
		return a
	}
	if err := os.WriteFile(filepath.Join(dir, "ruled.log"), []byte("a log line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mod+".tmp", []byte("a rebuilt module"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(mod+".tmp", mod); err != nil {
		t.Fatal(err)
	}
	var st answer
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st = status(); st.Status.Failures > 0 || time.Now().After(deadline) {
			break
		}
	}
	if st.Status.Failures != 1 || st.Status.Loads != 1 || len(st.Status.LastError) == 0 {
		t.Fatalf("status %+v: want one failed reload and the first load serving\n%s", st.Status, s.logs.String())
	}
	le := st.Status.LastError[0]
	if le.File != rules || le.Line != 11 || le.Column != 3 || le.Code != "plugin-load" ||
		!strings.Contains(le.Message, "sha256 mismatch") || !strings.Contains(le.Message, fileSHA256(t, mod)) {
		t.Fatalf("last error %+v, want the pin mismatch at %s:11:3", le, rules)
	}
	// The status is set before the line is logged, and the line crosses
	// a pipe: wait for it.
	logged := func() bool {
		logs := s.logs.String()
		return strings.Contains(logs, `msg="rules reload failed; the previous rules keep serving" trigger="file change"`) &&
			strings.Contains(logs, "sha256 mismatch")
	}
	for deadline := time.Now().Add(10 * time.Second); !logged(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the failed reload is not logged:\n%s", s.logs.String())
		}
	}
	if r := s.check(t, `{"request": {"user": "alice"}}`); r.status != 200 || len(r.Results) != 1 || r.Results[0].Plugin != "gcra" ||
		r.Results[0].Degraded != "" || r.Results[0].Remaining != 2 {
		t.Fatalf("the old module does not decide: %+v", r)
	}
}
