package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newProjects are the projects `ruled plugin new` writes, each with the
// commands its README gives to build it (run in the project's directory;
// "ruled" is the binary under test).
var newProjects = []struct {
	lang, kind string
	build      [][]string
}{
	{"go", "wasm", [][]string{{"ruled", "plugin", "build", "./wasm", "-o", "NAME.wasm"}}},
	{"go", "process", [][]string{{"go", "build", "-o", "NAME", "./process"}}},
	{"rust", "wasm", [][]string{{"cargo", "build", "--release", "--target", "wasm32-unknown-unknown"}, {"cargo", "test"}}},
	{"assemblyscript", "wasm", [][]string{{"npm", "ci", "--no-audit", "--no-fund"}, {"npm", "run", "build"}}},
}

// TestPluginNewProjectsPassTheirTestsAndServe does what docs/plugins.md
// tells a plugin author, with the real binary, from an empty directory and
// an empty Go module cache that only published modules can fill: `ruled
// plugin new` in each language, the project's own tests (the conformance
// kit against a real redis-server), its build, and `ruled serve` with the
// project's rules.yaml, which must limit with the plugin.
func TestPluginNewProjectsPassTheirTestsAndServe(t *testing.T) {
	bin := buildRuled(t)
	env := freshModuleCache(t)
	for i, p := range newProjects {
		t.Run(p.lang+"-"+p.kind, func(t *testing.T) {
			name := fmt.Sprintf("limit%d", i)
			penv, cargo := env, ""
			if p.lang == "rust" {
				var renv []string
				cargo, renv = rustWasmToolchain(t)
				penv = slices.Concat(env, renv)
			}
			dir := filepath.Join(t.TempDir(), name)
			runIn(t, filepath.Dir(dir), penv, bin, "plugin", "new", name, "--lang", p.lang, "--kind", p.kind)
			runIn(t, dir, penv, "go", "test", "-count=1", "./...")
			for _, cmd := range p.build {
				args := make([]string, len(cmd))
				for j, a := range cmd {
					args[j] = strings.ReplaceAll(a, "NAME", name)
				}
				switch args[0] {
				case "ruled":
					args[0] = bin
				case "cargo":
					args[0] = cargo
				}
				runIn(t, dir, penv, args[0], args[1:]...)
			}
			d := spawnDaemonAt(t, filepath.Join(dir, "rules.yaml"))
			d.waitReady(time.Minute)
			var got []int
			for range 6 {
				got = append(got, checkAPIKey(t, d.base, "k1", name))
			}
			if fmt.Sprint(got) != "[200 200 200 200 200 429]" {
				t.Fatalf("statuses %v for six requests of one key, want five allowed (the rule's limit) and one denied\n%s", got, tail(d.log.String(), 20))
			}
			if s := checkAPIKey(t, d.base, "k2", name); s != http.StatusOK {
				t.Fatalf("another key: %d, want 200", s)
			}
		})
	}
}

// checkAPIKey asks about a request with header x-api-key: key, checks that
// the one rule that answered ran plugin, and returns the status.
func checkAPIKey(t *testing.T, base, key, plugin string) int {
	t.Helper()
	body := fmt.Sprintf(`{"request": {"headers": {"x-api-key": %q}}}`, key)
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r checkResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("check answer: %v", err)
	}
	if len(r.Results) != 1 || r.Results[0].Plugin != plugin || r.Results[0].Limit != 5 || r.Results[0].Error != "" {
		t.Fatalf("answer %+v, want one result of plugin %s with limit 5", r, plugin)
	}
	return resp.StatusCode
}

// runIn runs a command in dir with env added and fails the test with its
// output when it fails.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, tail(string(out), 40))
	}
}

// freshModuleCache returns the environment of a Go toolchain whose module
// cache is empty and whose module proxy serves published modules only:
// this machine's download cache (what the proxy served it), then the
// proxy itself. A module that is published nowhere fails to resolve.
func freshModuleCache(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("go env printed %q", out)
	}
	proxy := "file://" + filepath.Join(lines[0], "cache", "download")
	if lines[1] != "" && lines[1] != "off" {
		proxy += "," + lines[1]
	}
	cache := filepath.Join(t.TempDir(), "gomodcache")
	// -modcacherw: the cache's files are writable, so that the test can
	// remove it; the flags the environment set stay.
	return []string{"GOMODCACHE=" + cache, "GOPROXY=" + proxy, "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -modcacherw")}
}

// rustWasmToolchain returns a cargo whose rustc has the
// wasm32-unknown-unknown target, and the environment that makes the
// project's tests use it: the first cargo on PATH if it has the target,
// else Debian's (cargo, libstd-rust-dev-wasm32 and lld, which
// scripts/deps.sh test installs).
func rustWasmToolchain(t *testing.T) (string, []string) {
	t.Helper()
	var candidates []string
	if c, err := exec.LookPath("cargo"); err == nil {
		candidates = append(candidates, c)
	}
	candidates = append(candidates, "/usr/bin/cargo")
	for _, cargo := range candidates {
		rustc := filepath.Join(filepath.Dir(cargo), "rustc")
		sysroot, err := exec.Command(rustc, "--print", "sysroot").Output()
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(sysroot)), "lib", "rustlib", "wasm32-unknown-unknown")); err == nil {
			return cargo, []string{"CARGO=" + cargo, "RUSTC=" + rustc, "PATH=" + filepath.Dir(cargo) + string(os.PathListSeparator) + os.Getenv("PATH")}
		}
	}
	t.Fatalf("no cargo whose rustc has the wasm32-unknown-unknown target among %v: run scripts/deps.sh test (Debian's cargo, libstd-rust-dev-wasm32 and lld) or rustup target add wasm32-unknown-unknown", candidates)
	return "", nil
}
