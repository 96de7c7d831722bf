package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/internal/redistest"
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
