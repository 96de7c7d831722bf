// Package layout holds the tests that keep the repository's layout as
// docs/architecture.md describes it: which package may import which, and
// that the document names every package of the three modules.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the root module's path; the SDK modules live under it.
const module = "github.com/ruled-dev/ruled"

// rule is one import rule: a package matching pkgs (and none of except)
// imports, in its non-test files, none of forbid, and when only is
// non-nil, nothing of this repository outside only. Patterns are paths
// relative to the module, a trailing "/..." matching the path and every
// path below it.
type rule struct {
	pkgs   []string
	except []string
	forbid []string
	only   []string
	why    string
}

// frontEnds are the packages that serve clients; none imports another.
var frontEnds = []string{"host/httpapi", "host/grpcapi"}

// rules are the import rules of docs/architecture.md, "Packages".
var rules = []rule{
	{pkgs: []string{"sdk/..."}, only: []string{"sdk/..."},
		why: "the SDK modules import nothing of the daemon"},
	{pkgs: []string{"sdk/..."}, except: []string{"sdk/process/..."}, forbid: []string{"sdk/process/..."},
		why: "the sdk module does not need the process module"},
	{pkgs: []string{"rules"}, forbid: []string{"host/...", "plugins/...", "cmd/...", "internal/offline/...", "client/...", "plugintest/...", "bench/..."},
		why: "rule files are read without the engine"},
	{pkgs: []string{"host"}, forbid: append([]string{"host/metrics", "host/ui", "host/store", "host/wasm/...", "host/process/...", "plugins/...", "cmd/...", "client/...", "plugintest/...", "bench/..."}, frontEnds...),
		why: "the engine knows no front end, driver or plugin"},
	{pkgs: []string{"host/capability"}, only: []string{"sdk"},
		why: "the capability serves every plugin and knows no engine"},
	{pkgs: []string{"host/wasm/...", "host/process/..."}, forbid: append([]string{"host", "host/metrics"}, frontEnds...),
		why: "a driver makes a plugin an sdk.Algorithm and knows no engine"},
	{pkgs: []string{"plugins/..."}, only: []string{"plugins/...", "sdk/..."},
		why: "a built-in is written against the SDK alone"},
	{pkgs: []string{"client/..."}, only: []string{},
		why: "the Go client imports nothing of the daemon"},
	{pkgs: []string{"..."}, except: []string{"cmd/...", "internal/offline/...", "internal/testkit/...", "plugintest/...", "bench/...", "examples/..."},
		forbid: []string{"internal/offline/...", "internal/testkit/..."},
		why:    "the request path uses neither the offline commands' packages nor the test kit"},
	{pkgs: []string{"..."}, except: []string{"internal/testkit/...", "plugintest/..."}, forbid: []string{"internal/testkit/..."},
		why: "only tests use the test kit"},
}

func init() {
	for _, fe := range frontEnds {
		var others []string
		for _, o := range frontEnds {
			if o != fe {
				others = append(others, o+"/...")
			}
		}
		rules = append(rules, rule{pkgs: []string{fe + "/..."}, forbid: others, why: "a front end does not import another"})
	}
}

// matches reports whether path matches pattern.
func matches(pattern, path string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func matchesAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, path) })
}

// pkg is one package of the repository: its path relative to the
// module and what its non-test files import from the repository.
type pkg struct {
	path    string
	imports []string
}

// root returns the repository's root, three levels up from this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the repository root %s: %v", dir, err)
	}
	return dir
}

// packages reads the import clauses of every Go package of the three
// modules (testdata, hidden directories and nested modules of others left
// out): the packages with only test files are listed too, importing
// nothing.
func packages(t *testing.T, dir string) []pkg {
	t.Helper()
	byPath := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (name == "testdata" || strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(dir, filepath.Dir(p))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pk := byPath[rel]
		if pk == nil {
			pk = &pkg{path: rel}
			byPath[rel] = pk
		}
		if strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && !slices.Contains(pk.imports, rel) {
				pk.imports = append(pk.imports, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []pkg
	for _, pk := range byPath {
		if pk.path != "." {
			out = append(out, *pk)
		}
	}
	slices.SortFunc(out, func(a, b pkg) int { return strings.Compare(a.path, b.path) })
	if len(out) < 40 {
		t.Fatalf("found %d packages under %s: the walk is broken", len(out), dir)
	}
	return out
}

// violations returns one line for each import of pkgs that breaks rules.
func violations(pkgs []pkg, rules []rule) []string {
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			if !matchesAny(r.pkgs, p.path) || matchesAny(r.except, p.path) {
				continue
			}
			for _, imp := range p.imports {
				if matchesAny(r.forbid, imp) || (r.only != nil && !matchesAny(r.only, imp)) {
					out = append(out, p.path+" imports "+imp+": "+r.why)
				}
			}
		}
	}
	return out
}

// TestImportRules checks the import rules of docs/architecture.md on every
// package's non-test files.
func TestImportRules(t *testing.T) {
	for _, v := range violations(packages(t, root(t)), rules) {
		t.Error(v)
	}
}

// TestImportRulesCatchForbiddenImports shows that the rules bite: a front
// end importing another, rules importing the engine, the SDK importing the
// daemon, the engine importing a driver and the request path importing
// the test kit are each reported.
func TestImportRulesCatchForbiddenImports(t *testing.T) {
	bad := []pkg{
		{path: "host/grpcapi", imports: []string{"host/httpapi"}},
		{path: "rules", imports: []string{"host"}},
		{path: "sdk/guest", imports: []string{"host/capability"}},
		{path: "sdk", imports: []string{"sdk/process/pluginrpc"}},
		{path: "host", imports: []string{"host/wasm"}},
		{path: "host/capability", imports: []string{"host"}},
		{path: "plugins/leaky", imports: []string{"rules"}},
		{path: "client", imports: []string{"sdk"}},
		{path: "host/local", imports: []string{"internal/testkit/redistest"}},
	}
	got := violations(bad, rules)
	for _, p := range bad {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, p.path+" imports "+p.imports[0]+":") }) {
			t.Errorf("%s importing %s is not reported; got %q", p.path, p.imports[0], got)
		}
	}
	fine := []pkg{
		{path: "host/grpcapi", imports: []string{"host", "host/ratelimitheader"}},
		{path: "sdk/process", imports: []string{"sdk", "sdk/abi"}},
		{path: "plugins/leaky/wasm", imports: []string{"plugins/leaky", "sdk/guest"}},
		{path: "plugintest", imports: []string{"internal/testkit/redistest", "host/capability"}},
	}
	if v := violations(fine, rules); len(v) > 0 {
		t.Errorf("allowed imports reported: %q", v)
	}
}

// TestArchitectureNamesEveryPackage checks that docs/architecture.md names
// every package of the three modules, as `path` in code quotes, and no
// package that does not exist.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	dir := root(t)
	doc, err := os.ReadFile(filepath.Join(dir, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, p := range packages(t, dir) {
		named[p.path] = true
		if !strings.Contains(string(doc), "`"+p.path+"`") {
			t.Errorf("docs/architecture.md does not name package %s", p.path)
		}
	}
	// A table row's first cell names packages: each must exist.
	for _, line := range strings.Split(string(doc), "\n") {
		cell, ok := strings.CutPrefix(line, "| `")
		if !ok {
			continue
		}
		cell, _, _ = strings.Cut(cell, " |")
		for _, name := range strings.Split(cell, ", ") {
			name = strings.Trim(name, "`")
			if strings.ContainsAny(name, " ") || !strings.Contains(name, "/") && name != "host" && name != "rules" && name != "client" && name != "plugintest" && name != "bench" {
				continue
			}
			if !named[name] {
				t.Errorf("docs/architecture.md names package %s, which does not exist", name)
			}
		}
	}
}
