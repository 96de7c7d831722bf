package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ruled-dev/ruled/internal/scaffold"
)

// pluginNew runs `ruled plugin new`: it writes the project, then tidies
// its go.mod.
func pluginNew(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plugin new", stderr)
	var o scaffold.Options
	fs.StringVar(&o.Lang, "lang", scaffold.LangGo, "the plugin's language: go, assemblyscript or rust")
	fs.StringVar(&o.Kind, "kind", scaffold.KindWasm, "wasm (a module ruled runs in its Wasm driver) or process (an executable ruled starts; Go only)")
	fs.StringVar(&o.Module, "module", "", "the project's Go module path (default example.com/NAME)")
	fs.StringVar(&o.SDKVersion, "sdk", "", "require the published SDK modules at this version instead of writing this ruled's into .ruled/")
	dir := fs.String("dir", "", "the directory to write, which must not exist or be empty (default ./NAME)")
	fs.Usage = func() { fmt.Fprint(stderr, pluginUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "ruled plugin new: want exactly one plugin name")
		fs.Usage()
		return 2
	}
	o.Name, o.Ruled = pos[0], version
	if *dir == "" {
		*dir = o.Name
	}
	wrote, err := scaffold.New(*dir, o)
	if err != nil {
		fmt.Fprintf(stderr, "ruled plugin new: %v\n", err)
		return 1
	}
	own := 0
	for _, w := range wrote {
		if !strings.HasPrefix(w, scaffold.BundleDir+"/") {
			own++
		}
	}
	fmt.Fprintf(stdout, "wrote %d files into %s", own, *dir)
	if own < len(wrote) {
		fmt.Fprintf(stdout, ", and the SDK and conformance kit of ruled %s into %s", version, filepath.Join(*dir, scaffold.BundleDir))
	}
	fmt.Fprintln(stdout)
	if err := goModTidy(ctx, *dir); err != nil {
		fmt.Fprintf(stderr, "ruled plugin new: the project is written, but %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nNext, in %s: read README.md; the tests need redis-server on PATH.\n", *dir)
	return 0
}

// pluginSDK runs `ruled plugin sdk`: it rewrites a project's bundle with
// this ruled's SDK and kit, then tidies its go.mod.
func pluginSDK(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plugin sdk", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pluginUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) > 1 {
		fmt.Fprintln(stderr, "ruled plugin sdk: want at most one project directory")
		return 2
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	wrote, err := scaffold.WriteBundle(dir, version)
	if err != nil {
		fmt.Fprintf(stderr, "ruled plugin sdk: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote the SDK and conformance kit of ruled %s into %s (%d files)\n", version, filepath.Join(dir, scaffold.BundleDir), len(wrote))
	if err := goModTidy(ctx, dir); err != nil {
		fmt.Fprintf(stderr, "ruled plugin sdk: %v\n", err)
		return 1
	}
	return 0
}

// goModTidy runs go mod tidy in dir, which completes go.mod and writes
// go.sum from the module proxy (published modules only: the SDK and the
// kit come from the bundle).
func goModTidy(ctx context.Context, dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("go mod tidy needs the Go toolchain on PATH (%v): install Go, then run go mod tidy there", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "mod", "tidy")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go mod tidy in %s failed (%v):\n%s", dir, err, strings.TrimSpace(out.String()))
	}
	return nil
}
