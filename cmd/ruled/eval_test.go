package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestEvalGolden")

// TestEvalGolden traces the cookbook rules for each input in
// testdata/eval and compares with the golden output next to it.
func TestEvalGolden(t *testing.T) {
	inputs, _ := filepath.Glob("testdata/eval/*.json")
	if len(inputs) < 4 {
		t.Fatalf("found %d inputs", len(inputs))
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(context.Background(), []string{"eval", "--rules", "../../examples/rules/cookbook", "--input", in, "--format", "json"}, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			golden := strings.TrimSuffix(in, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/ruled -run TestEvalGolden -update)", err)
			}
			if out.String() != string(want) {
				t.Fatalf("eval output differs from %s:\n%s", golden, out.String())
			}
		})
	}
}

func TestEvalBadInput(t *testing.T) {
	path := writeFile(t, t.TempDir(), "in.json", `{"request": {"ip": 7}}`)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"eval", "--rules", "../../examples/rules", "--input", path}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "not a /v1/check body") {
		t.Fatalf("stderr %q", errOut.String())
	}
}

// TestEvalText traces a login for people: one line a rule, in rule order,
// then the rules applied.
func TestEvalText(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"eval", "--rules", "../../examples/rules/cookbook", "--input", "testdata/eval/login.json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var trace evalOutput
	var js bytes.Buffer
	if code := run(context.Background(), []string{"eval", "--rules", "../../examples/rules/cookbook", "--input", "testdata/eval/login.json", "--format", "json"}, &js, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if err := json.Unmarshal(js.Bytes(), &trace); err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(trace.Rules)+1 {
		t.Fatalf("%d lines for %d rules:\n%s", len(lines), len(trace.Rules), out.String())
	}
	for _, want := range []string{
		`api.yaml:14: exempt-internal (fixedwindow): no match [stop]`,
		`api.yaml:23: login-per-ip (fixedwindow): match, subject "203.0.113.7", config {"limit":5,"window":"1m"}`,
		`applied (hits 1): ` + strings.Join(trace.Applied, ", "),
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
}

// TestEvalExitCodes: 3 when a rule fails to evaluate for the input (the
// trace still printed, with the error), 1 when the rules do not load (as
// check's report with --format json), 2 for a bad --format.
func TestEvalExitCodes(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `rules:
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
`)
	noUser := writeFile(t, dir, "in.json", `{"request": {"ip": "203.0.113.7"}}`)
	withUser := writeFile(t, dir, "user.json", `{"request": {"user": "u"}}`)
	eval := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"eval"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := eval("--rules", rules, "--input", withUser); code != 0 || !strings.Contains(out, `per-user (fixedwindow): match, subject "u"`) {
		t.Fatalf("a rule that evaluates: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := eval("--rules", rules, "--input", noUser)
	if code != 3 || !strings.Contains(out, "per-user (fixedwindow): error, on_error allow: ") || !strings.Contains(out, "empty") {
		t.Fatalf("a rule that errors: exit %d, want 3\n%s%s", code, out, errOut)
	}
	code, out, _ = eval("--rules", rules, "--input", noUser, "--format", "json")
	var trace evalOutput
	if err := json.Unmarshal([]byte(out), &trace); err != nil || code != 3 || len(trace.Rules) != 1 || trace.Rules[0].Error == "" || len(trace.Applied) != 0 {
		t.Fatalf("a rule that errors, json: exit %d, err %v\n%s", code, err, out)
	}

	bad := writeFile(t, dir, "bad.yaml", badRules)
	if code, _, errOut := eval("--rules", bad, "--input", withUser); code != 1 || !strings.Contains(errOut, "4 error(s)") {
		t.Fatalf("invalid rules: exit %d, want 1\n%s", code, errOut)
	}
	code, out, _ = eval("--rules", bad, "--input", withUser, "--format", "json")
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK || len(rep.Errors) != 4 {
		t.Fatalf("invalid rules, json: exit %d, err %v\n%s", code, err, out)
	}
	if code, _, errOut := eval("--rules", rules, "--input", withUser, "--format", "yaml"); code != 2 || !strings.Contains(errOut, "want text or json") {
		t.Fatalf("--format yaml: exit %d, want 2\n%s", code, errOut)
	}
}
