package main

import (
	"errors"
	"fmt"
	"io"

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
	set, err := rules.Load(fs.Arg(0), builtinCatalog())
	if err != nil {
		printRuleErrors(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d rules in %s\n", len(set.Rules()), fs.Arg(0))
	return 0
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
