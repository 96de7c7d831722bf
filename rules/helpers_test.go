package rules_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// catalog is a fake rules.Catalog over the real built-in plugins that exist.
type catalog map[string]sdk.Algorithm

func (c catalog) Lookup(name string) (sdk.Algorithm, bool) {
	a, ok := c[name]
	return a, ok
}

// Names implements rules.NameLister.
func (c catalog) Names() []string { return slices.Collect(maps.Keys(c)) }

func newCatalog() catalog { return catalog{"fixedwindow": fixedwindow.New()} }

// counting wraps an algorithm and counts Configure calls.
type counting struct {
	sdk.Algorithm
	n atomic.Int64
}

func (c *counting) Configure(raw map[string]any) (sdk.Config, error) {
	c.n.Add(1)
	return c.Algorithm.Configure(raw)
}

// writeFiles writes name→content into a fresh directory and returns it.
func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// load writes content as rules.yaml and loads it.
func load(t testing.TB, content string) (*rules.Set, error) {
	t.Helper()
	dir := writeFiles(t, map[string]string{"rules.yaml": content})
	return rules.Load(filepath.Join(dir, "rules.yaml"), newCatalog())
}

// mustLoad is load that fails the test on error.
func mustLoad(t testing.TB, content string) *rules.Set {
	t.Helper()
	s, err := load(t, content)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return s
}

// errorList returns err as an ErrorList, failing the test otherwise.
func errorList(t testing.TB, err error) rules.ErrorList {
	t.Helper()
	var l rules.ErrorList
	if err == nil {
		t.Fatal("want errors, got none")
	}
	if !asList(err, &l) {
		t.Fatalf("want an ErrorList, got %T: %v", err, err)
	}
	return l
}

func asList(err error, l *rules.ErrorList) bool {
	v, ok := err.(rules.ErrorList)
	*l = v
	return ok
}
