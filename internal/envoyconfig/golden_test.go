package envoyconfig

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// caseDirs lists the case directories under root.
func caseDirs(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("no cases in %s", root)
	}
	return out
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestTranslateGolden translates each testdata/translate/CASE/envoy and
// compares the rule files with CASE/ruled/ and the notes with
// CASE/notes.txt.
func TestTranslateGolden(t *testing.T) {
	root := filepath.Join("testdata", "translate")
	for _, c := range caseDirs(t, root) {
		t.Run(c, func(t *testing.T) {
			dir := filepath.Join(root, c)
			srcs, err := ReadSources(filepath.Join(dir, "envoy"))
			if err != nil {
				t.Fatal(err)
			}
			files, notes, err := Translate(srcs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "ruled")
			if *update {
				if err := os.RemoveAll(out); err != nil {
					t.Fatal(err)
				}
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				golden(t, filepath.Join(out, f.Name), f.Content)
				if n := strings.Count(string(f.Content), "\n  - name: "); n != f.Rules {
					t.Errorf("%s: Rules = %d, the file has %d", f.Name, f.Rules, n)
				}
			}
			entries, err := os.ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if !slices.Contains(names, e.Name()) {
					t.Errorf("%s: no longer generated (go test -update removes it)", filepath.Join(out, e.Name()))
				}
			}
			var b strings.Builder
			for _, n := range notes {
				fmt.Fprintln(&b, n)
			}
			golden(t, filepath.Join(dir, "notes.txt"), []byte(b.String()))
		})
	}
}

// TestTranslateErrors translates each testdata/errors/CASE directory and
// compares the errors, one a line with their codes, with CASE.txt.
func TestTranslateErrors(t *testing.T) {
	root := filepath.Join("testdata", "errors")
	for _, c := range caseDirs(t, root) {
		t.Run(c, func(t *testing.T) {
			srcs, err := ReadSources(filepath.Join(root, c))
			if err != nil {
				t.Fatal(err)
			}
			files, notes, err := Translate(srcs, Options{})
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("want an ErrorList, got %v", err)
			}
			if files != nil || notes != nil {
				t.Errorf("files or notes with errors: %v %v", files, notes)
			}
			var b strings.Builder
			for _, e := range list {
				fmt.Fprintf(&b, "%s: [%s] %s\n", e.Pos, e.Code, e.Message)
			}
			golden(t, filepath.Join(root, c+".txt"), []byte(b.String()))
		})
	}
}

// TestDocsExample: the worked example of docs/rules.md, "Importing Envoy
// ratelimit configs", is the translate/docs case: its envoy config and its
// rules (but for the header and the override rule, which it leaves out).
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("testdata", "translate", "docs")
	src, err := os.ReadFile(filepath.Join(dir, "envoy", "sms.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(src)+"```\n") {
		t.Errorf("docs/rules.md does not show %s as is", filepath.Join(dir, "envoy", "sms.yaml"))
	}
	out, err := os.ReadFile(filepath.Join(dir, "ruled", "sms.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(out), filepath.Join(dir, "envoy", "sms.yaml"), "ratelimit/sms.yaml")
	start := strings.Index(text, "\n  # envoy: sms.kind_promo")
	if start < 0 {
		t.Fatalf("unexpected golden file:\n%s", text)
	}
	if want := "```yaml\nrules:" + text[start:] + "```\n"; !strings.Contains(string(doc), want) {
		t.Errorf("docs/rules.md does not show the rules as generated:\n%s", want)
	}
}
