package scaffold

import (
	"go/format"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNewWritesEveryLanguage writes each language's project and checks its
// files: no placeholder left, Go sources formatted, the files its README
// names present, and the bundle beside it.
func TestNewWritesEveryLanguage(t *testing.T) {
	for lk, want := range map[[2]string][]string{
		{LangGo, KindWasm}:             {"my-limit.go", "wasm/main.go", "script.lua", "model_test.go", "conform_test.go", "plugin_test.go", "rules.yaml", "README.md", "go.mod"},
		{LangGo, KindProcess}:          {"my-limit.go", "process/main.go", "script.lua", "model_test.go", "plugin_test.go", "rules.yaml"},
		{LangRust, KindWasm}:           {"Cargo.toml", "src/lib.rs", "src/wire.rs", "script.lua", "build_test.go", "plugin_test.go", "rules.yaml"},
		{LangAssemblyScript, KindWasm}: {"package.json", "package-lock.json", "assembly/index.ts", "script.lua", "build_test.go", "plugin_test.go", "rules.yaml"},
	} {
		t.Run(lk[0]+"-"+lk[1], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "p")
			wrote, err := New(dir, Options{Name: "my-limit", Lang: lk[0], Kind: lk[1], Ruled: "v9.9.9"})
			if err != nil {
				t.Fatal(err)
			}
			if lk[0] == LangGo {
				want = slices.Clone(want)
				want[0] = "mylimit.go" // the Go package's name has no hyphen
			}
			for _, w := range append(want, ".ruled/VERSION", ".ruled/sdk/go.mod", ".ruled/kit/go.mod", ".ruled/kit/plugintest/plugintest.go") {
				if !slices.Contains(wrote, w) {
					t.Errorf("no %s among %v", w, wrote)
				}
			}
			for _, w := range wrote {
				if strings.HasPrefix(w, BundleDir+"/") {
					continue
				}
				b, err := os.ReadFile(filepath.Join(dir, w))
				if err != nil {
					t.Fatal(err)
				}
				for _, ph := range []string{"__NAME__", "__PKG__", "__MODULE__", "__CRATE__"} {
					if strings.Contains(w+string(b), ph) {
						t.Errorf("%s keeps the placeholder %s", w, ph)
					}
				}
				if strings.HasSuffix(w, ".go") {
					if f, err := format.Source(b); err != nil || string(f) != string(b) {
						t.Errorf("%s is not gofmt-formatted (%v)", w, err)
					}
				}
			}
			if v, _ := os.ReadFile(filepath.Join(dir, ".ruled", "VERSION")); string(v) != "ruled v9.9.9\n" {
				t.Errorf("VERSION %q", v)
			}
		})
	}
}

func TestNewGoModNamesTheBundleOrThePublishedSDK(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if _, err := New(dir, Options{Name: "q", Module: "example.org/team/q"}); err != nil {
		t.Fatal(err)
	}
	mod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	for _, want := range []string{"module example.org/team/q\n", "github.com/ruled-dev/ruled/sdk " + SDKVersion + "\n",
		"github.com/ruled-dev/ruled/sdk => ./.ruled/sdk\n", "github.com/ruled-dev/ruled => ./.ruled/kit\n"} {
		if !strings.Contains(string(mod), want) {
			t.Errorf("go.mod lacks %q:\n%s", want, mod)
		}
	}

	dir = filepath.Join(t.TempDir(), "r")
	wrote, err := New(dir, Options{Name: "r", SDKVersion: "v0.3.1"})
	if err != nil {
		t.Fatal(err)
	}
	mod, _ = os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(mod), "github.com/ruled-dev/ruled/sdk v0.3.1\n") || !strings.Contains(string(mod), "github.com/ruled-dev/ruled v0.3.1\n") ||
		strings.Contains(string(mod), "replace") {
		t.Errorf("with a published SDK, go.mod is:\n%s", mod)
	}
	for _, w := range wrote {
		if strings.HasPrefix(w, BundleDir) {
			t.Fatalf("with a published SDK, the bundle is written too: %s", w)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		o    Options
		want string
	}{
		{"", Options{Name: "Quota"}, `plugin name "Quota"`},
		{"", Options{Name: "a--b"}, `plugin name "a--b"`},
		{"", Options{Name: "9lives"}, `plugin name "9lives"`},
		{"", Options{Name: strings.Repeat("a", 41)}, "at most 40"},
		{"", Options{Name: "q", Lang: "python"}, `language "python"`},
		{"", Options{Name: "q", Kind: "native"}, `kind "native"`},
		{"", Options{Name: "q", Lang: LangRust, Kind: KindProcess}, "process plugins are written in Go"},
		{"", Options{Name: "q", Module: "a b"}, "module path"},
		{"", Options{Name: "q", SDKVersion: "latest"}, `SDK version "latest"`},
		{full, Options{Name: "q"}, "is not empty"},
	} {
		dir := tc.dir
		if dir == "" {
			dir = filepath.Join(t.TempDir(), "p")
		}
		_, err := New(dir, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one with %q", tc.o, err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Errorf("a refused project wrote into its directory: %v", entries)
	}
}

func TestWriteBundleReplacesTheBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if _, err := New(dir, Options{Name: "q", Ruled: "v1.0.0"}); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, BundleDir, "sdk", "stale.go")
	if err := os.WriteFile(stale, []byte("package sdk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteBundle(dir, "v1.1.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a file the bundle does not have survived")
	}
	if v, _ := os.ReadFile(filepath.Join(dir, BundleDir, "VERSION")); string(v) != "ruled v1.1.0\n" {
		t.Errorf("VERSION %q", v)
	}
	if _, err := WriteBundle(t.TempDir(), "v1.1.0"); err == nil || !strings.Contains(err.Error(), "not a plugin project") {
		t.Errorf("a directory without go.mod: %v", err)
	}
	published := filepath.Join(t.TempDir(), "r")
	if _, err := New(published, Options{Name: "r", SDKVersion: "v0.3.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteBundle(published, "v1.1.0"); err == nil || !strings.Contains(err.Error(), "does not replace the SDK") {
		t.Errorf("a project on published modules: %v", err)
	}
	if _, err := os.Stat(filepath.Join(published, BundleDir)); err == nil {
		t.Error("a refused project got a bundle")
	}
}
