package scaffold

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite bundle.txtar from the repository")

// kitPackages are the packages of ruled's module a project's tests use:
// the conformance kit and the drivers that load a built plugin.
var kitPackages = []string{"./plugintest", "./host/wasm", "./host/process"}

// kitOSes are the systems whose files and dependencies the kit carries.
var kitOSes = []string{"linux", "darwin"}

// TestBundleIsCurrent keeps bundle.txtar in step with the repository: the
// SDK modules' sources and the kit's packages, with a go.mod that requires
// what they import at the versions ruled builds with. `make bundle` (this
// test with -update) rewrites it.
func TestBundleIsCurrent(t *testing.T) {
	want := makeBundle(t)
	if *update {
		if err := os.WriteFile("bundle.txtar", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if bytes.Equal(bundle, want) {
		return
	}
	got, exp := filesByName(txtar.Parse(bundle)), filesByName(txtar.Parse(want))
	var diff []string
	for name, data := range exp {
		if g, ok := got[name]; !ok {
			diff = append(diff, "missing "+name)
		} else if !bytes.Equal(g, data) {
			diff = append(diff, "differs "+name)
		}
	}
	for name := range got {
		if _, ok := exp[name]; !ok {
			diff = append(diff, "extra "+name)
		}
	}
	slices.Sort(diff)
	t.Fatalf("bundle.txtar is not the repository's SDK and kit (run make bundle):\n%s", strings.Join(diff, "\n"))
}

func filesByName(a *txtar.Archive) map[string][]byte {
	m := make(map[string][]byte, len(a.Files))
	for _, f := range a.Files {
		m[f.Name] = f.Data
	}
	return m
}

// makeBundle builds bundle.txtar's content from the repository.
func makeBundle(t *testing.T) []byte {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	if err := addSDK(root, files); err != nil {
		t.Fatal(err)
	}
	requires := map[string]string{}
	for _, goos := range kitOSes {
		if err := addKit(root, goos, files, requires); err != nil {
			t.Fatal(err)
		}
	}
	var mod bytes.Buffer
	mod.WriteString("module github.com/ruled-dev/ruled\n\ngo 1.26.0\n\nrequire (\n")
	requires["github.com/ruled-dev/ruled/sdk"] = SDKVersion
	requires["github.com/ruled-dev/ruled/sdk/process"] = SDKVersion
	for _, p := range slices.Sorted(maps.Keys(requires)) {
		fmt.Fprintf(&mod, "\t%s %s\n", p, requires[p])
	}
	mod.WriteString(")\n")
	files["kit/go.mod"] = mod.Bytes()

	marker := regexp.MustCompile(`(?m)^-- .* --$`)
	a := &txtar.Archive{Comment: []byte("The SDK and the conformance kit that `ruled plugin new` writes into a project's .ruled/.\n" +
		"Generated from the repository by `make bundle`; TestBundleIsCurrent fails when it is stale.\n")}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if marker.Match(files[name]) {
			t.Fatalf("%s has a line that reads as a txtar file marker", name)
		}
		a.Files = append(a.Files, txtar.File{Name: name, Data: files[name]})
	}
	return txtar.Format(a)
}

// addSDK adds the SDK modules' files under sdk/: everything but tests,
// testdata and hidden files.
func addSDK(root string, files map[string][]byte) error {
	return filepath.WalkDir(filepath.Join(root, "sdk"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == "testdata" || strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, ".") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = data
		return err
	})
}

// addKit adds the source files of the kit's packages in ruled's module
// under kit/, as go list sees them for goos, and records the modules of
// the other packages they import.
func addKit(root, goos string, files map[string][]byte, requires map[string]string) error {
	const format = `{{.Dir}}|{{join .GoFiles ","}},{{join .IgnoredGoFiles ","}},{{join .EmbedFiles ","}}|{{with .Module}}{{.Path}} {{.Version}}{{end}}`
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", format}, kitPackages...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list (GOOS=%s): %w\n%s", goos, err, exitStderr(err))
	}
	for line := range strings.Lines(string(out)) {
		dir, rest, _ := strings.Cut(strings.TrimSpace(line), "|")
		names, module, _ := strings.Cut(rest, "|")
		modPath, version, _ := strings.Cut(module, " ")
		switch {
		case modPath == "": // the standard library
		case modPath == "github.com/ruled-dev/ruled":
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return err
			}
			for _, n := range strings.Split(names, ",") {
				if n == "" || strings.HasSuffix(n, "_test.go") {
					continue
				}
				data, err := os.ReadFile(filepath.Join(dir, n))
				if err != nil {
					return err
				}
				files[path.Join("kit", filepath.ToSlash(rel), n)] = data
			}
		case strings.HasPrefix(modPath, "github.com/ruled-dev/ruled/"): // the SDK modules
		default:
			requires[modPath] = version
		}
	}
	return nil
}

func exitStderr(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
