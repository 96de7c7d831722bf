package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/internal/pluginfile"
)

const pluginUsage = `Usage:
  ruled plugin new NAME [--lang go|assemblyscript|rust] [--kind wasm|process] [--dir DIR] [--module PATH] [--sdk VERSION]
                                          write a plugin project, with its tests, into DIR (default ./NAME)
  ruled plugin sdk [DIR]                  rewrite DIR's .ruled/ (the SDK and the conformance kit) with this ruled's
  ruled plugin build DIR [-o FILE.wasm]   build the Go plugin package in DIR as a Wasm module
  ruled plugin inspect FILE.wasm          print a module's name, version, scripts, Redis commands and sha256

new writes a complete project: the algorithm, its Lua script, a reference model, tests that run the
conformance kit against a real redis-server, a rule file and a README. The project builds against
the SDK and the kit this ruled carries, written into DIR/.ruled/ and named in go.mod's replace
lines, so the plugin's SDK is the daemon's; --sdk VERSION requires the published modules instead.
It then runs go mod tidy (the Go toolchain must be on PATH; the tests use Go in every language).

build runs GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath in DIR (a main package
that calls guest.Register from an init function; docs/abi.md) and needs the Go toolchain on PATH.
Without -o it writes NAME.wasm in the current directory, NAME being DIR's name (its parent's name
when DIR is called wasm).
`

// pluginCmd runs `ruled plugin new|sdk|build|inspect`.
func pluginCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pluginUsage)
		return 2
	}
	switch args[0] {
	case "new":
		return pluginNew(ctx, args[1:], stdout, stderr)
	case "sdk":
		return pluginSDK(ctx, args[1:], stdout, stderr)
	case "build":
		return pluginBuild(ctx, args[1:], stdout, stderr)
	case "inspect":
		return pluginInspect(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, pluginUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "ruled plugin: unknown command %q\n\n%s", args[0], pluginUsage)
		return 2
	}
}

func pluginBuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plugin build", stderr)
	out := fs.String("o", "", "the module to write (default: NAME.wasm in the current directory)")
	fs.Usage = func() { fmt.Fprint(stderr, pluginUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "ruled plugin build: want exactly one package directory")
		fs.Usage()
		return 2
	}
	dir := pos[0]
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		fmt.Fprintf(stderr, "ruled plugin build: %s is not a directory\n", dir)
		return 1
	}
	if *out == "" {
		*out = defaultModuleName(dir)
	}
	if err := wasm.Build(ctx, dir, *out); err != nil {
		fmt.Fprintf(stderr, "ruled plugin build: %v\n", err)
		return 1
	}
	sum, size, err := fileDigest(*out)
	if err != nil {
		fmt.Fprintf(stderr, "ruled plugin build: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (%d bytes)\nsha256 %s\n", *out, size, sum)
	return 0
}

func pluginInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plugin inspect", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pluginUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "ruled plugin inspect: want exactly one module")
		fs.Usage()
		return 2
	}
	path := pos[0]
	sum, _, err := fileDigest(path)
	if err != nil {
		fmt.Fprintf(stderr, "ruled plugin inspect: %v\n", err)
		return 1
	}
	m, err := wasm.Inspect(ctx, path)
	if err != nil {
		fmt.Fprintf(stderr, "ruled plugin inspect: %v\n", err)
		return 1
	}
	info := m.Info
	traits := strings.Join(info.Traits.Names(), " ")
	if traits == "" {
		traits = "none (the engine takes no shortcut: docs/rules.md, \"Shortcuts\")"
	}
	steps := "no (ruled_decide: an instance waits while Redis answers; docs/abi.md, \"Steps\")"
	if m.Steps {
		steps = "yes"
	}
	fmt.Fprintf(stdout, "file     %s\nsha256   %s\nname     %s\nversion  %s\ntraits   %s\nsteps    %s\nscripts\n",
		path, sum, info.Name, info.Version, traits, steps)
	for _, s := range info.Scripts {
		fmt.Fprintf(stdout, "  %s: %s\n", s.Name, strings.Join(s.Commands, " "))
		if s.Returns != nil {
			fmt.Fprintf(stdout, "    returns %s\n", s.Returns)
		} else {
			fmt.Fprintf(stdout, "    returns anything (no declared reply: docs/abi.md, \"Declared replies\")\n")
		}
	}
	fmt.Fprintf(stdout, "\nDeclare it in a rule file (the path is relative to that file):\n\n"+
		"plugins:\n  %s: {wasm: %s, sha256: \"%s\"}\n", info.Name, filepath.Base(path), sum)
	return 0
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (`build DIR -o FILE`), which the flag package alone
// stops at, and returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := parseWithEnv(fs, args); err != nil {
		return nil, err
	}
	var pos []string
	for fs.NArg() > 0 {
		pos = append(pos, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

// defaultModuleName is NAME.wasm for a package directory: its name, or its
// parent's name for a directory called wasm (plugins/NAME/wasm).
func defaultModuleName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	name := filepath.Base(abs)
	if name == "wasm" {
		name = filepath.Base(filepath.Dir(abs))
	}
	return name + ".wasm"
}

// fileDigest returns the hex SHA-256 digest of the file at path, as a rule
// file pins it, and the file's size.
func fileDigest(path string) (string, int, error) {
	b, err := pluginfile.Read(path, pluginfile.MaxWasm)
	if err != nil {
		return "", 0, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), len(b), nil
}
