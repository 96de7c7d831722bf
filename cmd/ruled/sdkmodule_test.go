package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// These tests build plugins the way a third party does: as a module of its
// own, outside ruled's repository, that requires the SDK module(s) and
// nothing else (docs/plugins.md, "The SDK as a Go module"). The plugin is
// testdata/outoftree, the example the docs show; its quota_test.go (the
// conformance kit, which needs ruled's module) stays out of the modules
// built here.

// sdkVersion is the version of the SDK modules (tags sdk/v0.1.0 and
// sdk/process/v0.1.0), which ruled's go.mod requires with a replace
// directive, and the docs' go get lines name.
const sdkVersion = "v0.1.0"

// daemonModules are ruled's own dependencies, which no plugin needs.
var daemonModules = []string{
	"github.com/redis/go-redis/",
	"github.com/tetratelabs/wazero",
	"github.com/prometheus/",
	"github.com/ruled-dev/ruled ", // ruled's own module (go list -m prints a version after it)
}

// processModules are what only process plugins need.
var processModules = []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc"}

// TestOutOfTreeWasmPluginNeedsOnlyTheSDK writes a Wasm plugin module that
// requires github.com/ruled-dev/ruled/sdk alone, tidies it, builds it with
// `ruled plugin build` and checks that its module graph holds none of the
// daemon's dependencies and neither grpc nor go-plugin.
func TestOutOfTreeWasmPluginNeedsOnlyTheSDK(t *testing.T) {
	root := repoRoot(t)
	dir := outOfTreeModule(t, root, "wasm", map[string]string{
		"github.com/ruled-dev/ruled/sdk": filepath.Join(root, "sdk"),
	})
	mods := tidyAndList(t, dir)
	checkModules(t, dir, mods, []string{"github.com/ruled-dev/ruled/sdk "}, append(daemonModules, processModules...))

	out := filepath.Join(t.TempDir(), "quota.wasm")
	var stdout, stderr bytes.Buffer
	if code := pluginCmd(context.Background(), []string{"build", filepath.Join(dir, "wasm"), "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("ruled plugin build: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := pluginCmd(context.Background(), []string{"inspect", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("ruled plugin inspect: exit %d\n%s", code, stderr.String())
	}
	for _, want := range []string{"name     quota\n", "version  0.1.0\n", "steps    yes\n", "decide: HMGET HSET PEXPIRE\n",
		"    returns {allowed, granted, limit, remaining, reset_us, retry_after_us}\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("inspect does not say %q:\n%s", want, stdout.String())
		}
	}
}

// TestOutOfTreeProcessPluginLeavesOutTheDaemon does the same for a process
// plugin: its module graph has go-plugin and grpc (sdk/process needs them)
// but none of the daemon's other dependencies.
func TestOutOfTreeProcessPluginLeavesOutTheDaemon(t *testing.T) {
	root := repoRoot(t)
	dir := outOfTreeModule(t, root, "process", map[string]string{
		"github.com/ruled-dev/ruled/sdk":         filepath.Join(root, "sdk"),
		"github.com/ruled-dev/ruled/sdk/process": filepath.Join(root, "sdk", "process"),
	})
	mods := tidyAndList(t, dir)
	want := append([]string{"github.com/ruled-dev/ruled/sdk ", "github.com/ruled-dev/ruled/sdk/process "}, processModules...)
	checkModules(t, dir, mods, want, daemonModules)
	exe := filepath.Join(t.TempDir(), "quota")
	if out, err := goCmd(dir, nil, "build", "-o", exe, "./process"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if fi, err := os.Stat(exe); err != nil || fi.Size() == 0 {
		t.Fatalf("no executable: %v", err)
	}
}

// TestMakefileListsEveryModule keeps the Makefile's MODULES, which `make
// test` and `make lint` iterate because ./... stops at a nested go.mod,
// in step with the go.mod files in the repository.
func TestMakefileListsEveryModule(t *testing.T) {
	root := repoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MODULES\s*:=\s*(.*)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("no MODULES in the Makefile")
	}
	listed := strings.Fields(string(m[1]))
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if name == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			found = append(found, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	slices.Sort(found)
	if !slices.Equal(listed, found) || len(found) < 3 {
		t.Fatalf("Makefile MODULES %q, go.mod files in %q", listed, found)
	}
}

// TestMakeTestReportsEveryFailure: make test, lint and fuzz run their steps
// through scripts/keepgoing.sh, which runs every step past a failure, then
// lists the failed ones and exits 1 (README, "make test").
func TestMakeTestReportsEveryFailure(t *testing.T) {
	root := repoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"test", "lint", "fuzz"} {
		recipe := regexp.MustCompile(`(?ms)^` + target + `:\n(.*?)\n\n`).FindSubmatch(makefile)
		if recipe == nil || !strings.Contains(string(recipe[1]), "./scripts/keepgoing.sh") || strings.Contains(string(recipe[1]), "|| exit 1") {
			t.Errorf("make %s does not run its steps through scripts/keepgoing.sh:\n%s", target, recipe)
		}
	}
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command(filepath.Join(root, "scripts", "keepgoing.sh"), "exit 3", "touch "+marker, "false")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("keepgoing.sh with failing steps: %v, want exit status 1\n%s", err, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the step after a failed one did not run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "FAILED: 2 of 3 steps:\n  exit 3\n  false\n") {
		t.Fatalf("keepgoing.sh does not list the failed steps:\n%s", out)
	}
}

// ruled's module and sdk/process require the SDK modules at sdkVersion, and
// the docs' go get lines name it: a new tag moves all of them at once.
func TestTheSDKVersionIsOneEverywhere(t *testing.T) {
	root := repoRoot(t)
	for file, mods := range map[string][]string{
		"go.mod":             {"github.com/ruled-dev/ruled/sdk", "github.com/ruled-dev/ruled/sdk/process"},
		"sdk/process/go.mod": {"github.com/ruled-dev/ruled/sdk"},
		"docs/plugins.md":    {"go get github.com/ruled-dev/ruled/sdk@", "go get github.com/ruled-dev/ruled/sdk/process@"},
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mods {
			sep := " "
			if strings.HasSuffix(m, "@") {
				sep = ""
			}
			if !strings.Contains(string(b), m+sep+sdkVersion) {
				t.Errorf("%s does not name %s at %s", file, strings.TrimSuffix(m, "@"), sdkVersion)
			}
		}
	}
}

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "sdk", "go.mod")); err != nil {
		t.Fatal(err)
	}
	return root
}

// outOfTreeModule writes example.com/quota into a temporary directory: the
// plugin package and the main package of kind (wasm or process) from
// testdata/outoftree, and a go.mod requiring the modules of replace at
// sdkVersion, replaced by the local directories. It seeds go.sum with the
// last module's go.sum, whose requirements it shares, so that tidying checks
// every download against checksums the repository holds. It sets the
// environment of every go command the test runs, ruled plugin build's
// included: no workspace and no toolchain switch. The module proxy stays
// the one configured: a module cache that only ever built ruled lacks the
// go.mod files of the SDK's own test dependencies, which tidying reads.
func outOfTreeModule(t *testing.T, root, kind string, replace map[string]string) string {
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOTOOLCHAIN", "local")
	dir := t.TempDir()
	src := filepath.Join(root, "cmd", "ruled", "testdata", "outoftree")
	for _, f := range []string{"quota.go", filepath.Join(kind, "main.go")} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths := slices.Sorted(maps.Keys(replace))
	var mod strings.Builder
	mod.WriteString("module example.com/quota\n\ngo 1.26.0\n\n")
	for _, p := range paths {
		mod.WriteString("require " + p + " " + sdkVersion + "\n")
	}
	for _, p := range paths {
		mod.WriteString("\nreplace " + p + " => " + filepath.ToSlash(replace[p]) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(replace[paths[len(paths)-1]], "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tidyAndList runs go mod tidy in dir and returns `go list -m all`, one
// module a line. Both may download what the module cache lacks; when they
// cannot, the failure names the proxy they tried.
func tidyAndList(t *testing.T, dir string) string {
	t.Helper()
	if out, err := goCmd(dir, nil, "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy: %v%s\n%s", err, proxyHint(out), out)
	}
	list, err := goCmd(dir, nil, "list", "-m", "all")
	if err != nil {
		t.Fatalf("go list -m all: %v%s\n%s", err, proxyHint(list), list)
	}
	return string(list)
}

// proxyHint explains a go command's failure to download a module: the
// module cache lacks part of the plugin's module graph, and the module
// proxy named by GOPROXY could not supply it. It is "" for other failures.
func proxyHint(out []byte) string {
	s := string(out)
	if !strings.Contains(s, "GOPROXY=off") && !strings.Contains(s, "dial tcp") &&
		!strings.Contains(s, "no such host") && !strings.Contains(s, "reading http") {
		return ""
	}
	proxy, _ := exec.Command("go", "env", "GOPROXY").Output()
	return fmt.Sprintf(" (the module cache lacks part of the plugin's module graph and the module proxy, GOPROXY=%s, "+
		"could not supply it: this test needs the proxy or a module cache that has built the SDK modules' tests)",
		strings.TrimSpace(string(proxy)))
}

// checkModules checks that `go list -m all` (mods) and go.mod name every
// prefix of want and none of refuse.
func checkModules(t *testing.T, dir, mods string, want, refuse []string) {
	t.Helper()
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// has reports whether a line of text, past a leading "require", starts
	// with prefix.
	has := func(text, prefix string) bool {
		for l := range strings.Lines(text) {
			l = strings.TrimPrefix(strings.TrimSpace(l), "require ")
			if strings.HasPrefix(l+" ", prefix) {
				return true
			}
		}
		return false
	}
	for _, p := range want {
		if !has(mods, p) {
			t.Errorf("go list -m all lacks %s:\n%s", p, mods)
		}
	}
	for _, p := range refuse {
		if has(mods, p) || has(string(goMod), p) {
			t.Errorf("the plugin's module graph has %s:\ngo.mod:\n%s\ngo list -m all:\n%s", p, goMod, mods)
		}
	}
}

// goCmd runs the go command in dir with the test's environment plus env.
func goCmd(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}
