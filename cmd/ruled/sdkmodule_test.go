package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/internal/scaffold"
)

// These tests build plugins the way a third party does: as a module of its
// own, outside ruled's repository, written by `ruled plugin new` with the
// SDK and the conformance kit in its .ruled/ (docs/plugins.md, "The SDK as
// a Go module"). The project's tests import the kit, so its module graph
// holds ruled's module and go-redis; the plugin's own packages, which are
// what the .wasm or the executable is built from, must hold the SDK alone.

// sdkVersion is the version of the SDK modules (tags sdk/v0.1.0 and
// sdk/process/v0.1.0), which ruled's go.mod requires with a replace
// directive, and a project written by ruled plugin new too.
const sdkVersion = scaffold.SDKVersion

// daemonModules are ruled's own dependencies, which no plugin needs.
var daemonModules = []string{
	"github.com/redis/go-redis/",
	"github.com/tetratelabs/wazero",
	"github.com/prometheus/",
	"github.com/ruled-dev/ruled ", // ruled's own module (go list -deps prints a version after it)
}

// processModules are what only process plugins need.
var processModules = []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc"}

// TestOutOfTreeWasmPluginNeedsOnlyTheSDK writes a Wasm plugin project
// with ruled plugin new, builds it with `ruled plugin build` and checks
// that the packages the module is built from come from the SDK alone:
// none of the daemon's dependencies, and neither grpc nor go-plugin.
func TestOutOfTreeWasmPluginNeedsOnlyTheSDK(t *testing.T) {
	dir := newProject(t, "quota", "wasm")
	mods := depModules(t, dir, "./wasm", "GOOS=wasip1", "GOARCH=wasm")
	checkModules(t, mods, []string{"github.com/ruled-dev/ruled/sdk "}, append(daemonModules, processModules...))

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
// plugin: its executable's packages come from the SDK modules, go-plugin
// and grpc (sdk/process needs them), and none of the daemon's other
// dependencies.
func TestOutOfTreeProcessPluginLeavesOutTheDaemon(t *testing.T) {
	dir := newProject(t, "quota", "process")
	mods := depModules(t, dir, "./process")
	want := append([]string{"github.com/ruled-dev/ruled/sdk ", "github.com/ruled-dev/ruled/sdk/process "}, processModules...)
	checkModules(t, mods, want, daemonModules)
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
// the docs' require lines name it: a new tag moves all of them at once.
func TestTheSDKVersionIsOneEverywhere(t *testing.T) {
	root := repoRoot(t)
	for file, mods := range map[string][]string{
		"go.mod":             {"github.com/ruled-dev/ruled/sdk", "github.com/ruled-dev/ruled/sdk/process"},
		"sdk/process/go.mod": {"github.com/ruled-dev/ruled/sdk"},
		"docs/plugins.md":    {"github.com/ruled-dev/ruled/sdk"},
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

// newProject runs `ruled plugin new name --kind kind` (Go) in a temporary
// directory and returns the project's directory. It sets the environment
// of every go command the test runs, ruled plugin build's included: no
// workspace and no toolchain switch. The module proxy stays the one
// configured: go mod tidy may download what the module cache lacks, and a
// failure then names the proxy.
func newProject(t *testing.T, name, kind string) string {
	t.Helper()
	t.Setenv("GOWORK", "off")
	t.Setenv("GOTOOLCHAIN", "local")
	dir := filepath.Join(t.TempDir(), name)
	var stdout, stderr bytes.Buffer
	if code := pluginCmd(context.Background(), []string{"new", name, "--kind", kind, "--dir", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("ruled plugin new: exit %d%s\n%s%s", code, proxyHint(stderr.Bytes()), stdout.String(), stderr.String())
	}
	return dir
}

// depModules returns the modules of the packages pkg is built from (go
// list -deps with env), one "path version" a line.
func depModules(t *testing.T, dir, pkg string, env ...string) string {
	t.Helper()
	out, err := goCmd(dir, env, "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", pkg)
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return string(out)
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

// checkModules checks that mods names every prefix of want and none of
// refuse.
func checkModules(t *testing.T, mods string, want, refuse []string) {
	t.Helper()
	has := func(prefix string) bool {
		for l := range strings.Lines(mods) {
			if strings.HasPrefix(strings.TrimSpace(l)+" ", prefix) {
				return true
			}
		}
		return false
	}
	for _, p := range want {
		if !has(p) {
			t.Errorf("the plugin's packages lack %s:\n%s", p, mods)
		}
	}
	for _, p := range refuse {
		if has(p) {
			t.Errorf("the plugin's packages come from %s too:\n%s", p, mods)
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

// TestPluginSDKRewritesTheBundle runs `ruled plugin sdk` on a project
// whose bundle another ruled wrote: the bundle becomes this ruled's, a
// file it does not have is gone, and the project still builds.
func TestPluginSDKRewritesTheBundle(t *testing.T) {
	dir := newProject(t, "quota", "wasm")
	bundle := filepath.Join(dir, scaffold.BundleDir)
	if err := os.WriteFile(filepath.Join(bundle, "VERSION"), []byte("ruled v0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(bundle, "sdk", "stale.go")
	if err := os.WriteFile(stale, []byte("package sdk\n\nfunc Stale() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := pluginCmd(context.Background(), []string{"sdk", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("ruled plugin sdk: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if v, _ := os.ReadFile(filepath.Join(bundle, "VERSION")); string(v) != "ruled "+version+"\n" {
		t.Errorf("VERSION %q after ruled plugin sdk, want this ruled's (%s)", v, version)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a file the bundle does not have survived ruled plugin sdk")
	}
	if out, err := goCmd(dir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-o", os.DevNull, "./wasm"); err != nil {
		t.Fatalf("the project does not build after ruled plugin sdk: %v\n%s", err, out)
	}
	if code := pluginCmd(context.Background(), []string{"sdk", t.TempDir()}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "not a plugin project") {
		t.Errorf("ruled plugin sdk in a directory without go.mod: exit %d, %s", code, stderr.String())
	}
}
