package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// catalog resolves the built-in plugins by name, for commands that load
// rules without a Redis.
type catalog map[string]sdk.Algorithm

func builtinCatalog() catalog {
	c := catalog{}
	for _, alg := range builtin.All() {
		c[alg.Info().Name] = alg
	}
	return c
}

// Lookup implements rules.Catalog.
func (c catalog) Lookup(name string) (sdk.Algorithm, bool) {
	alg, ok := c[name]
	return alg, ok
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ruled check PATH\n\nValidates rule files and lists every error with its position.")
	}
	if err := parseWithEnv(fs, args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	set, err := checkRules(fs.Arg(0), slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		printRuleErrors(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d rules in %s\n", len(set.Rules()), fs.Arg(0))
	return 0
}

// checkRules loads the rule files at path against the built-in plugins and
// the third-party plugins they declare, which it loads as serve does (pins
// checked, Wasm modules compiled, processes started) and stops again, so
// that the rules' configs are validated by the plugins themselves.
func checkRules(path string, log *slog.Logger) (*rules.Set, error) {
	files, err := rules.Parse(path)
	if files == nil {
		return nil, err
	}
	cat := builtinCatalog()
	if len(files.Plugins()) == 0 {
		return rules.Compile(files, cat)
	}
	wopts, _ := wasmOptions(log, pluginCallTimeout(capability.DefaultTimeout), "")
	load := pluginLoader(log, wopts)
	var loaded []sdk.Algorithm
	loadErrs := host.LoadDeclared(files.Plugins(), func(name string) bool { _, ok := cat[name]; return ok },
		func(d rules.PluginDecl) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			alg, err := load(ctx, d)
			if err == nil {
				cat[d.Name] = alg
				loaded = append(loaded, alg)
			}
			return err
		})
	defer func() {
		for _, alg := range loaded {
			host.ClosePlugin(alg, log)
		}
	}()
	set, err := rules.Compile(files, cat)
	if len(loadErrs) == 0 {
		return set, err
	}
	return nil, rules.Merge(err, loadErrs)
}

// printRuleErrors prints a load error: one line per positioned error.
func printRuleErrors(w io.Writer, err error) {
	var list rules.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		fmt.Fprintf(w, "%d error(s)\n", len(list))
		return
	}
	fmt.Fprintln(w, err)
}

// rulesLoad validates rule files against the built-in plugins.
func rulesLoad(path string) (*rules.Set, error) { return rules.Load(path, builtinCatalog()) }
