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
	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/host/wasm"
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

const checkUsage = `Usage: ruled check [--start-plugins] PATH

Validates rule files and lists every error with its position; exit 1 on error.

Third-party plugins the files declare are checked without running them: the file exists,
a process plugin's is an executable file, the sha256 pin matches, a Wasm module compiles
and imports only what ruled provides. Their rules are checked too, except their config,
and whether the plugin can take a lease, which only the plugin can say: a note says so.

  --start-plugins   start the plugins as serve does (process plugins' executables run,
                    Wasm modules are instantiated) and have them validate their rules'
                    config; only for rule files whose plugins you trust (env RULED_START_PLUGINS)
`

func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	start := fs.Bool("start-plugins", false, "start the declared plugins to validate their rules' config")
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	path := pos[0]
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	set, notes, err := checkRules(path, log, *start)
	for _, n := range notes {
		fmt.Fprintln(stdout, n)
	}
	if err != nil {
		printRuleErrors(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d rules in %s\n", len(set.Rules()), path)
	return 0
}

// checkRules loads the rule files at path against the built-in plugins and
// the third-party plugins they declare.
//
// With start, it loads those as serve does (pins checked, Wasm modules
// compiled and instantiated, processes started) and stops them again, so
// that the rules' configs are validated by the plugins themselves.
//
// Without start it runs nothing from the files: each declared plugin is
// checked as far as that goes (checkPlugin) and stands in the catalog as a
// plugin that accepts any config, so that its rules are checked all the
// same but for their config; a note per such plugin says so.
func checkRules(path string, log *slog.Logger, start bool) (*rules.Set, []string, error) {
	files, err := rules.Parse(path)
	if files == nil {
		return nil, nil, err
	}
	cat := builtinCatalog()
	if len(files.Plugins()) == 0 {
		set, err := rules.Compile(files, cat)
		return set, nil, err
	}
	wopts, _ := wasmOptions(log, pluginCallTimeout(capability.DefaultTimeout), "")
	load := pluginLoader(log, wopts, nil)
	var loaded []sdk.Algorithm
	var notes []string
	loadErrs := host.LoadDeclared(files.Plugins(), func(name string) bool { _, ok := cat[name]; return ok },
		func(d rules.PluginDecl) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if !start {
				if err := checkPlugin(ctx, d); err != nil {
					return err
				}
				cat[d.Name] = unstarted{name: d.Name}
				notes = append(notes, fmt.Sprintf("%s: note: plugin %q was not started: the config and lease of its rules are not validated (ruled check --start-plugins runs it to validate it)",
					d.Pos, d.Name))
				return nil
			}
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
		return set, notes, err
	}
	return nil, notes, rules.Merge(err, loadErrs)
}

// checkPlugin checks a declared plugin without running any of its code: a
// process plugin's file is an executable file with the pinned digest
// (process.Check); a Wasm module has the pinned digest, compiles and
// imports only what ruled provides (wasm.Check, no instance).
func checkPlugin(ctx context.Context, d rules.PluginDecl) error {
	switch {
	case d.Process != "":
		return process.Check(d.Process, d.SHA256)
	case d.Wasm != "":
		bin, err := readPinned(d.Wasm, d.SHA256)
		if err != nil {
			return err
		}
		return wasm.Check(ctx, d.Wasm, bin)
	}
	return errors.New("declares neither wasm nor process")
}

// unstarted stands for a declared plugin that ruled check did not start:
// it accepts every config and declares every trait (only the plugin can say
// which it has), so that the rest of its rules is checked.
type unstarted struct{ name string }

func (u unstarted) Info() sdk.Info {
	return sdk.Info{Name: u.name, Traits: sdk.Traits{FirmDenials: true, Leasable: true, Refunds: true}}
}

func (unstarted) Configure(raw map[string]any) (sdk.Config, error) { return raw, nil }

func (u unstarted) Decide(context.Context, sdk.Host, sdk.Config, sdk.Request) (sdk.Decision, error) {
	return sdk.Decision{}, fmt.Errorf("plugin %s was not started", u.name)
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
