package envoyconfig

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWrite: Write's errors carry CodeExist and CodeWrite; it writes
// nothing when a file exists (unless force) or cannot be written, and
// returns the files in place when a rename fails after others landed,
// leaving no temporary file.
func TestWrite(t *testing.T) {
	files := []File{{Name: "a.yaml", Content: []byte("a\n")}, {Name: "b.yaml", Content: []byte("b\n")}}
	codeOf := func(err error) string {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v (%T) is not an *Error", err, err)
		}
		return e.Code
	}
	dirNames := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}

	dir := filepath.Join(t.TempDir(), "out")
	written, err := Write(dir, files, false)
	want := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}
	if err != nil || !slices.Equal(written, want) {
		t.Fatalf("Write: %v, %v", written, err)
	}
	if b, _ := os.ReadFile(want[1]); string(b) != "b\n" {
		t.Fatalf("b.yaml: %q", b)
	}

	// exists, nothing written
	if err := os.Remove(want[0]); err != nil {
		t.Fatal(err)
	}
	written, err = Write(dir, files, false)
	if codeOf(err) != CodeExist || written != nil || !strings.Contains(err.Error(), want[1]) || strings.Contains(err.Error(), "--force") {
		t.Fatalf("exists: %v, %v", written, err)
	}
	if names := dirNames(dir); !slices.Equal(names, []string{"b.yaml"}) {
		t.Fatalf("exists: dir holds %q", names)
	}

	// write: dir is a file
	notDir := filepath.Join(dir, "b.yaml")
	if written, err = Write(notDir, files, true); codeOf(err) != CodeWrite || written != nil {
		t.Fatalf("write: %v, %v", written, err)
	}

	// a rename fails (onto a non-empty directory) after a.yaml landed
	if err := os.Remove(notDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "b.yaml", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	written, err = Write(dir, files, true)
	if codeOf(err) != CodeWrite || !slices.Equal(written, want[:1]) {
		t.Fatalf("rename: %v, %v", written, err)
	}
	if names := dirNames(dir); !slices.Equal(names, []string{"a.yaml", "b.yaml"}) {
		t.Fatalf("rename: dir holds %q (temporary files left?)", names)
	}
}

// A domain whose file name would end in _test.yaml gets another name: a
// rule directory skips such files (they hold rule tests).
func TestFileNamesAreNotTestFiles(t *testing.T) {
	src := func(domain string) Source {
		return Source{Name: domain + ".yaml", Content: []byte("domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	}
	files, _, err := Translate([]Source{src("payments_test"), src("payments")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"payments_test-rules.yaml", "payments.yaml"}) {
		t.Errorf("file names %q", names)
	}
}
