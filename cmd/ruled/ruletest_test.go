package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// runTest runs ruled test with args and returns its exit code and output.
func runTest(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"test"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// The examples ship tests; this runs them as CI does, on the models.
func TestRuleTestRunsTheShippedExamples(t *testing.T) {
	code, out, errOut := runTest(t, "../../examples/rules/...")
	if code != 0 || !strings.HasSuffix(out, "ok: 10 passed, 0 failed\n") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "ok   ../../examples/rules/cookbook/api_test.yaml:13: five logins a minute per IP (7 checks)\n") {
		t.Errorf("output lacks the login case's line:\n%s", out)
	}
	// A directory alone holds basic_test.yaml, not the cookbook's.
	if code, out, _ := runTest(t, "../../examples/rules"); code != 0 || !strings.HasSuffix(out, "ok: 2 passed, 0 failed\n") {
		t.Errorf("examples/rules: exit %d\n%s", code, out)
	}
}

const failingTest = `tests:
  - name: passes
    steps:
      - request: {ip: 192.0.2.1}
        hits: 2
        expect: {allowed: true, rules: {per-ip: {remaining: 1}}}
  - name: fails
    steps:
      - request: {ip: 192.0.2.1}
        hits: 3
      - at: 1500ms
        request: {ip: 192.0.2.1}
        expect:
          allowed: true
          rules: {per-ip: {retry_after: {value: 8s, tolerance: 100ms}}}
`

func writeRuleTest(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml",
		"rules:\n  - {name: per-ip, subject: request.ip, plugin: fixedwindow, config: {limit: 3, window: 10s}}\n")
	writeFile(t, dir, "rules_test.yaml", failingTest)
	return dir
}

func TestRuleTestReportsFailuresWhereTheyAre(t *testing.T) {
	dir := writeRuleTest(t)
	file := filepath.Join(dir, "rules_test.yaml")
	code, out, _ := runTest(t, dir)
	want := "ok   " + file + ":2: passes (1 checks)\n" +
		"FAIL " + file + ":7: fails (2 checks)\n" +
		"    " + file + ":14:20: step 2 (at 1.5s): allowed: want true, got false\n" +
		"    " + file + ":15:49: step 2 (at 1.5s): rule per-ip: retry_after: want 8s ± 100ms, got 8.5s\n" +
		"FAIL: 1 passed, 1 failed\n"
	if code != 1 || out != want {
		t.Errorf("exit %d, output\n%s\nwant\n%s", code, out, want)
	}

	code, out, _ = runTest(t, "--format", "json", "--run", "^fails$", dir)
	var rep testReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if code != 1 || rep.OK || rep.Passed != 0 || rep.Failed != 1 || len(rep.Files) != 1 || len(rep.Files[0].Cases) != 1 {
		t.Fatalf("exit %d, report %+v", code, rep)
	}
	f := rep.Files[0].Cases[0].Failures[1]
	if f.File != file || f.Line != 15 || f.Col != 49 || f.Step != 2 || f.Check != 1 || f.At != "1.5s" ||
		f.Rule != "per-ip" || f.Field != "retry_after" || f.Want != "8s ± 100ms" || f.Got != "8.5s" {
		t.Errorf("failure %+v", f)
	}
}

// --redis runs the same cases on Redis, with the same outcome, and leaves
// no key behind.
func TestRuleTestOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	code, out, errOut := runTest(t, "--redis", srv.Addr(), "../../examples/rules/...")
	if code != 0 || !strings.HasSuffix(out, "ok: 10 passed, 0 failed\n") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	dir := writeRuleTest(t)
	code, out, _ = runTest(t, "--redis", srv.Addr(), dir)
	if code != 1 || !strings.Contains(out, "rule per-ip: retry_after: want 8s ± 100ms, got 8.5s\n") ||
		!strings.HasSuffix(out, "FAIL: 1 passed, 1 failed\n") {
		t.Errorf("exit %d\n%s", code, out)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	keys, err := client.Keys(context.Background(), "ruled-test:*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys left behind: %v %v", keys, err)
	}
}

func TestRuleTestRefusals(t *testing.T) {
	dir := writeRuleTest(t)
	empty := t.TempDir()
	bad := t.TempDir()
	writeFile(t, bad, "rules.yaml", "rules:\n  - {name: per-ip, subject: request.ip, plugin: fixedwindow, config: {limit: 3, window: 10s}}\n")
	writeFile(t, bad, "bad_test.yaml", "tests:\n  - name: a\n    steps:\n      - expect: {rules: {per_ip: {allowed: true}}}\n")
	third := t.TempDir()
	exe := writeFile(t, third, "gcra", "#!/bin/sh\nexit 1\n")
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, third, "rules.yaml", "plugins:\n  gcra: {process: ./gcra}\nrules:\n  - {name: g, subject: request.ip, plugin: gcra, config: {}}\n")
	writeFile(t, third, "g_test.yaml", "tests:\n  - name: a\n    steps:\n      - expect: {allowed: true}\n")
	for _, c := range []struct {
		args    []string
		code    int
		message string
	}{
		{nil, 2, "Usage: ruled test"},
		{[]string{empty}, 2, "no *_test.yaml files"},
		{[]string{empty + "/..."}, 2, "no *_test.yaml files"},
		{[]string{"--run", "(", dir}, 2, "--run"},
		{[]string{"--redis", "127.0.0.1:1", dir}, 2, "--redis"},
		{[]string{bad}, 1, "FAIL: 0 passed, 0 failed, 1 file did not load\n"},
		{[]string{bad}, 1, `bad_test.yaml:4:26: expect.rules: no rule "per_ip" in ` + bad + ` (did you mean "per-ip"?)`},
		{[]string{third}, 1, "only Redis can decide them (ruled test --redis URL)"},
	} {
		code, out, errOut := runTest(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.message) {
			t.Errorf("ruled test %v: exit %d, want %d with %q\n%s%s", c.args, code, c.code, c.message, out, errOut)
		}
	}
}

// ruled serve's RULED_REDIS never sends tests to Redis; RULED_TEST_REDIS
// does; a password in the URL is never printed.
func TestRuleTestRedisFromTheEnvironment(t *testing.T) {
	t.Setenv("RULED_REDIS", "127.0.0.1:1")
	if code, out, errOut := runTest(t, "../../examples/rules"); code != 0 {
		t.Errorf("RULED_REDIS reached ruled test: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("RULED_TEST_REDIS", "redis://ann:s3cret@127.0.0.1:1/0")
	code, out, errOut := runTest(t, "../../examples/rules")
	if code != 2 || !strings.Contains(errOut, "--redis") || strings.Contains(out+errOut, "s3cret") {
		t.Errorf("RULED_TEST_REDIS: exit %d\n%s%s", code, out, errOut)
	}
}

// The deny cache and leases are off on Redis: a denial reports the
// remaining its plugin does, as on the models, not the cached denial's.
func TestRuleTestOnRedisHasNoShortcuts(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", "rules:\n  - {name: bucket, subject: request.ip, plugin: tokenbucket, lease: 2, config: {rate: 1, per: 1s, burst: 2}}\n")
	writeFile(t, dir, "b_test.yaml", `tests:
  - name: a refilled bucket still too low
    steps:
      - request: {ip: 192.0.2.1}
        hits: 2
        expect: {allowed: true}
      - request: {ip: 192.0.2.1}
        hits: 2
        expect: {allowed: false, rules: {bucket: {remaining: 0, retry_after: 2s}}}
      - at: 1500ms
        request: {ip: 192.0.2.1}
        hits: 2
        expect: {allowed: false, rules: {bucket: {remaining: 1, retry_after: 500ms}}}
`)
	for _, args := range [][]string{{dir}, {"--redis", srv.Addr(), dir}} {
		if code, out, _ := runTest(t, args...); code != 0 {
			t.Errorf("ruled test %v: exit %d\n%s", args, code, out)
		}
	}
}

// A Redis that fails in the middle of a case stops it, says where, and
// exits 2; the run still deletes what it wrote.
func TestRuleTestStopsWhenRedisFails(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", "rules:\n  - {name: per-ip, subject: request.ip, plugin: fixedwindow, config: {limit: 5, window: 1s}}\n")
	file := writeFile(t, dir, "k_test.yaml", `tests:
  - name: many checks
    steps:
      - request: {ip: 192.0.2.1}
        repeat: 1000000
`)
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Kill()
	}()
	code, out, _ := runTest(t, "--redis", srv.Addr(), dir)
	if code != 2 || !strings.Contains(out, "    stopped: "+file+":4:9: step 1 (at 0s, check ") ||
		!strings.Contains(out, "Redis failed, so the case cannot go on") || !strings.Contains(out, "FAIL: 0 passed, 1 failed (1 could not run to the end)\n") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

func TestRuleTestFindsOnlyTestFiles(t *testing.T) {
	dir := writeRuleTest(t)
	writeFile(t, dir, ".#rules_test.yaml", "not: [yaml")
	sub, other := filepath.Join(dir, "sub"), t.TempDir()
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, sub, "empty_test.yaml", "tests:\n  - name: a\n    steps:\n      - expect: {allowed: true}\n")
	notes := writeFile(t, other, "notes.yaml", "tests: []\n")
	nowhere := writeFile(t, other, "nowhere_test.yml", "rules: nowhere\ntests:\n  - name: a\n    steps:\n      - expect: {allowed: true}\n")
	for _, c := range []struct {
		args    []string
		code    int
		message string
	}{
		// Dot files are skipped, paths cleaned: one file, once.
		{[]string{"--run", "passes", dir, dir + "/./rules_test.yaml"}, 0, "ok: 1 passed, 0 failed\n"},
		{[]string{"--run", "nothing", dir}, 2, `--run "nothing" matches no case`},
		{[]string{notes}, 2, "not a test file: their names end in _test.yaml or _test.yml"},
		{[]string{sub}, 1, "rules: no rule files in " + sub},
		{[]string{nowhere}, 1, nowhere + ":1:8: rules: stat " + filepath.Join(other, "nowhere") + ": no such file or directory"},
	} {
		code, out, errOut := runTest(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.message) {
			t.Errorf("ruled test %v: exit %d, want %d with %q\n%s%s", c.args, code, c.code, c.message, out, errOut)
		}
	}
}

// A third-party plugin has no model: its rules are tested on Redis, where
// each case's engine loads the module (compiled once for the run).
func TestRuleTestThirdPartyPluginOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	buildPlugin(t, "../../examples/plugins/gcra/wasm", filepath.Join(dir, "gcra.wasm"))
	writeFile(t, dir, "rules.yaml", "plugins:\n  gcra: {wasm: ./gcra.wasm}\nrules:\n"+
		"  - {name: per-key, subject: request.user, plugin: gcra, config: {rate: 10, per: 1s, burst: 20}}\n")
	var cases strings.Builder
	cases.WriteString("tests:\n")
	for i := range 3 {
		fmt.Fprintf(&cases, `  - name: burst %d
    steps:
      - request: {user: ann}
        repeat: 21
        expect: {allowed: true}
      - request: {user: ann}
        expect: {allowed: false, rules: {per-key: {retry_after: 100ms}}}
      - at: 100ms
        request: {user: ann}
        expect: {allowed: true}
`, i)
	}
	writeFile(t, dir, "gcra_test.yaml", cases.String())
	if code, out, errOut := runTest(t, "--redis", srv.Addr(), dir); code != 0 || !strings.HasSuffix(out, "ok: 3 passed, 0 failed\n") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runTest(t, dir); code != 1 || !strings.Contains(out, "only Redis can decide them") {
		t.Errorf("on the models: exit %d\n%s", code, out)
	}
}

// Interrupted (Ctrl-C cancels the context), a run on Redis stops its case
// and still deletes every key it wrote.
func TestRuleTestInterruptedDeletesItsKeys(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", "rules:\n  - {name: per-ip, subject: request.ip, plugin: fixedwindow, config: {limit: 5, window: 1s}}\n")
	writeFile(t, dir, "k_test.yaml", "tests:\n  - name: many checks\n    steps:\n      - request: {ip: 192.0.2.1}\n        repeat: 1000000\n")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"test", "--redis", srv.Addr(), dir}, &out, &errOut)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	keys, err := client.Keys(context.Background(), "ruled-test:*").Result()
	if code != 2 || !strings.Contains(out.String(), "context canceled") || err != nil || len(keys) != 0 {
		t.Errorf("exit %d, keys left %v (%v)\n%s%s", code, keys, err, out.String(), errOut.String())
	}
}
