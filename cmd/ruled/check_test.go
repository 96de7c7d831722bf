package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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
