package yamlnode_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/internal/yamlnode"
)

// TestDecodeAliasBudget: aliases that expand within MaxAliasNodes decode;
// the first alias past it is refused with its position, whether it nests
// or is merely repeated, in a sequence or as a merge key.
func TestDecodeAliasBudget(t *testing.T) {
	// 1,000 rules merging one 5-key default: 11,000 nodes from aliases.
	var shared strings.Builder
	shared.WriteString("x-d: &d {a: 1, b: 2, c: 3, d: 4, e: 5}\nrules:\n")
	for i := range 1000 {
		fmt.Fprintf(&shared, "  - {<<: *d, name: r%d}\n", i)
	}
	if d, err := yamlnode.Decode([]byte(shared.String())); err != nil || d.Root == nil {
		t.Fatalf("shared defaults: %v", err)
	}

	nested := "x:\n  - &a0 [a, b]\n"
	for i := 1; i <= 20; i++ {
		nested += fmt.Sprintf("  - &a%d [*a%d, *a%d]\n", i, i-1, i-1)
	}
	merged := "x:\n  - &m0 {k: v}\n"
	for i := 1; i <= 20; i++ {
		merged += fmt.Sprintf("  - &m%d {<<: [*m%d, *m%d]}\n", i, i-1, i-1)
	}
	flat := "x: &x [" + strings.Repeat("a, ", 99) + "a]\ny: [" + strings.Repeat("*x, ", 1009) + "*x]\n"
	for _, tc := range []struct {
		name, src    string
		line, column int
		anchor       string
	}{
		// a_i is 2^(i+2)-1 nodes, and the aliases of lines a1 to a13 add
		// 98,269 of them: the second *a13 passes 100,000.
		{"nested", nested, 16, 17, "a13"},
		// m_i is 6*2^i-3 nodes, lines m1 to m13 add 98,214.
		{"merge keys", merged, 16, 16, "m13"},
		// 101 nodes a time: the 991st *x passes.
		{"repeated", flat, 2, 5 + 4*990, "x"},
	} {
		_, err := yamlnode.Decode([]byte(tc.src))
		var be *yamlnode.AliasBudgetError
		if !errors.As(err, &be) {
			t.Errorf("%s: %v, want an AliasBudgetError", tc.name, err)
			continue
		}
		if be.Line != tc.line || be.Column != tc.column || be.Anchor != tc.anchor {
			t.Errorf("%s: refused at %d:%d *%s, want %d:%d *%s", tc.name, be.Line, be.Column, be.Anchor, tc.line, tc.column, tc.anchor)
		}
		p := yamlnode.Problems(err)
		if len(p) != 1 || p[0].Line != tc.line || p[0].Column != tc.column || !strings.Contains(p[0].Message, "past 100000 nodes") {
			t.Errorf("%s: problems %+v", tc.name, p)
		}
	}
}

// TestDecodeDocuments: an empty file has no root; a second document is
// pointed at; a syntax error in it comes with the first.
func TestDecodeDocuments(t *testing.T) {
	if d, err := yamlnode.Decode([]byte("# nothing\n")); err != nil || d.Root != nil {
		t.Errorf("empty: %+v, %v", d, err)
	}
	d, err := yamlnode.Decode([]byte("a: 1\n---\nb: 2\n"))
	if err != nil || d.Root == nil || d.Extra == nil {
		t.Errorf("two documents: %+v, %v", d, err)
	}
	d, err = yamlnode.Decode([]byte("a: 1\n---\nb: [\n"))
	if err == nil || d.Root == nil || d.Extra != nil {
		t.Errorf("a bad second document: %+v, %v", d, err)
	}
}

// TestReadFileBound: a file up to MaxFileSize is read; a larger one is
// refused with the bound named.
func TestReadFileBound(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, make([]byte, yamlnode.MaxFileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := yamlnode.ReadFile(ok); err != nil || len(b) != yamlnode.MaxFileSize {
		t.Errorf("at the bound: %d bytes, %v", len(b), err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, yamlnode.MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := yamlnode.ReadFile(big); err == nil || !strings.Contains(err.Error(), "larger than 4 MiB") {
		t.Errorf("past the bound: %v", err)
	}
}
