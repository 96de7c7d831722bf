package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckStartsNoPluginUnlessAsked: validating a rule file must not run
// the executables it names. The "plugin" here is a shell script that leaves
// a marker when it runs: plain ruled check checks the file, its pin and the
// rules that use it, and runs nothing; --start-plugins runs it.
func TestCheckStartsNoPluginUnlessAsked(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	script := filepath.Join(dir, "plug")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran >> '"+marker+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := fileSHA256(t, script)
	rulesFile := func(name, pin, subject string) string {
		return writeFile(t, dir, name, `plugins:
  sh: {process: ./plug, sha256: "`+pin+`"}
rules:
  - name: by-script
    subject: `+subject+`
    plugin: sh
    config: {whatever: 1, only: the plugin knows}
  - name: builtin
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
`)
	}
	good := rulesFile("good.yaml", sum, "request.user")
	ran := func() bool {
		_, err := os.Stat(marker)
		return err == nil
	}
	check := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"check"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := check(good)
	if code != 0 || !strings.Contains(out, "ok: 2 rules") ||
		!strings.Contains(out, `good.yaml:2:3: note: plugin "sh" was not started`) {
		t.Fatalf("check: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	// The rules that name the plugin are checked all the same.
	code, _, errOut = check(rulesFile("typo.yaml", sum, "request.usr"))
	if code != 1 || !strings.Contains(errOut, "typo.yaml:5:22:") || !strings.Contains(errOut, "usr") {
		t.Fatalf("a typo in a rule of the plugin: exit %d\n%s", code, errOut)
	}
	// So is the file: its pin, that it is an executable.
	code, _, errOut = check(rulesFile("pin.yaml", strings.Repeat("0", 64), "request.user"))
	if code != 1 || !strings.Contains(errOut, "pin.yaml:2:3:") || !strings.Contains(errOut, "sha256 mismatch") {
		t.Fatalf("wrong pin: exit %d\n%s", code, errOut)
	}
	if err := os.Chmod(script, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = check(good)
	if code != 1 || !strings.Contains(errOut, "not an executable file") {
		t.Fatalf("not executable: exit %d\n%s", code, errOut)
	}
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	if ran() {
		t.Fatal("ruled check ran the plugin's executable")
	}

	// --start-plugins (after PATH too) runs it; it is no plugin, so the
	// load fails.
	code, out, errOut = check(good, "--start-plugins")
	if !ran() {
		t.Fatalf("ruled check --start-plugins did not run the plugin: exit %d\n%s%s", code, out, errOut)
	}
	if code != 1 || !strings.Contains(errOut, `plugin "sh"`) || strings.Contains(out, "note:") {
		t.Fatalf("check --start-plugins: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}

// TestCheckJSON: --format json prints one object on stdout, with every
// error positioned and coded, or the rule count and the notes.
func TestCheckJSON(t *testing.T) {
	dir := t.TempDir()
	check := func(args ...string) (int, checkReport, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"check", "--format", "json"}, args...), &out, &errOut)
		var rep checkReport
		dec := json.NewDecoder(&out)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("stdout is not one report: %v\n%s", err, out.String())
		}
		if dec.More() {
			t.Fatalf("more than one JSON value on stdout")
		}
		return code, rep, errOut.String()
	}

	bad := writeFile(t, dir, "bad.yaml", badRules)
	code, rep, _ := check(bad)
	want := []reportError{
		{File: bad, Line: 3, Col: 22, Rule: "typo", Code: "expr", Message: "subject: request has no field ipp"},
		{File: bad, Line: 9, Col: 5, Rule: "unknown-field", Code: "unknown-field", Message: `unknown field "limt"`},
		{File: bad, Line: 15, Col: 11, Rule: "dup", Code: "duplicate-rule", Message: "duplicate rule name (first defined at line 11)"},
		{File: bad, Line: 18, Col: 32, Rule: "dup", Code: "bad-config", Message: `config: window: want a duration such as "500ms", "10s" or "1m", got 10x`},
	}
	if code != 1 || rep.OK || rep.Path != bad || rep.Rules != 0 || !slices.Equal(rep.Errors, want) {
		t.Fatalf("bad rules: exit %d, report %+v\nwant errors %+v", code, rep, want)
	}

	good := writeFile(t, dir, "good.yaml", "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n")
	code, rep, _ = check(good)
	if code != 0 || !rep.OK || rep.Rules != 1 || rep.Errors == nil || len(rep.Errors) != 0 || rep.Notes == nil || len(rep.Notes) != 0 {
		t.Fatalf("good rules: exit %d, report %+v", code, rep)
	}

	code, rep, _ = check(filepath.Join(dir, "missing.yaml"))
	if code != 1 || rep.OK || len(rep.Errors) != 1 || rep.Errors[0].Code != "read" || !strings.Contains(rep.Errors[0].Message, "missing.yaml") {
		t.Fatalf("missing file: exit %d, report %+v", code, rep)
	}
}

// TestCheckJSONNotes: a declared plugin that check does not start is a
// positioned note of the JSON report.
func TestCheckJSONNotes(t *testing.T) {
	dir := t.TempDir()
	script := writeFile(t, dir, "plug", "#!/bin/sh\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, dir, "rules.yaml", "plugins:\n  sh: {process: ./plug}\nrules:\n  - {name: a, subject: request.ip, plugin: sh}\n")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"check", path, "--format", "json"}, &out, &errOut)
	var rep checkReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 || !rep.OK || len(rep.Notes) != 1 {
		t.Fatalf("exit %d, err %v\n%s%s", code, err, out.String(), errOut.String())
	}
	if n := rep.Notes[0]; n.File != path || n.Line != 2 || n.Col != 3 || !strings.HasPrefix(n.Message, `plugin "sh" was not started`) {
		t.Fatalf("note %+v", n)
	}
}
