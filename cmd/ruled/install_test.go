package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstall: `make install`, as the README has it, installs a ruled
// that runs into GOBIN, stamped with the version the Makefile computes
// (git describe, or "dev" outside a git checkout).
func TestMakeInstall(t *testing.T) {
	root := repoRoot(t)
	gobin := t.TempDir()
	cmd := exec.Command("make", "-s", "install")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "ruled"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("ruled version, as installed: %v\n%s", err, out)
	}
	want := "dev"
	describe := exec.Command("git", "describe", "--always", "--dirty")
	describe.Dir = root
	if v, err := describe.Output(); err == nil {
		want = strings.TrimSpace(string(v))
	}
	if got := strings.TrimSpace(string(out)); got != "ruled "+want {
		t.Fatalf("ruled version printed %q, want %q", got, "ruled "+want)
	}
}
