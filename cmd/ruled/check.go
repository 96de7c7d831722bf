package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// builtinCatalog resolves the built-in plugins by name, for commands that
// load rules without a Redis.
func builtinCatalog() builtin.Catalog { return builtin.NewCatalog() }

const checkUsage = `Usage: ruled check [--start-plugins] [--format text|json] PATH

Validates rule files and lists every error with its position.

Third-party plugins the files declare are checked without running them: the file exists,
a process plugin's is an executable file, the sha256 pin matches, a Wasm module compiles
and imports only what ruled provides. Their rules are checked too, except their config,
and whether the plugin can take a lease, which only the plugin can say: a note says so.

  --start-plugins   start the plugins as serve does (process plugins' executables run,
                    Wasm modules are instantiated) and have them validate their rules'
                    config; only for rule files whose plugins you trust (env RULED_START_PLUGINS)
  --format FORMAT   text (the default): notes and "ok: ..." on stdout, one error a line on
                    stderr; json: one JSON object on stdout, errors or not (env RULED_FORMAT):
                      {"ok": bool, "path": string, "rules": number of rules (0 unless ok),
                       "errors": [{"file", "line", "col", "rule", "code", "message"}],
                       "notes": [{"file", "line", "col", "message"}]}
                    line and col are 1-based, 0 when unknown; rule is "" outside a rule;
                    code is one of the error codes of docs/rules.md

Exit status: 0 the files are valid, 1 they have errors, 2 usage error.
`

// outputFormat is the --format of check and eval: text or json.
type outputFormat string

// The output formats.
const (
	formatText outputFormat = "text"
	formatJSON outputFormat = "json"
)

// String implements flag.Value.
func (f *outputFormat) String() string { return string(*f) }

// Set implements flag.Value.
func (f *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case formatText, formatJSON:
		*f = outputFormat(s)
		return nil
	}
	return fmt.Errorf("want text or json, got %q", s)
}

// checkReport is the output of ruled check --format json. Its fields are a
// stable interface: add to it, never rename or remove.
type checkReport struct {
	OK     bool          `json:"ok"`
	Path   string        `json:"path"`
	Rules  int           `json:"rules"`
	Errors []reportError `json:"errors"`
	Notes  []reportNote  `json:"notes"`
}

// reportError is one error of a checkReport.
type reportError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Rule    string `json:"rule"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// reportNote is one note of a checkReport.
type reportNote struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// note is a remark on input without errors: what check could not
// validate, what import approximates. It prints as
// `file:line:col: note: message`.
type note = envoyconfig.Note

func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	start := fs.Bool("start-plugins", false, "start the declared plugins to validate their rules' config")
	format := formatText
	fs.Var(&format, "format", "output format: text or json")
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
	set, notes, err := checkRules(ctx, path, log, *start)
	if ctx.Err() != nil {
		return 2 // main gives the signal's status; no report
	}
	notes = append(testFileNotes(path), notes...)
	if format == formatJSON {
		rep := newCheckReport(path, set, notes, err)
		if werr := writeJSON(stdout, rep); werr != nil {
			fmt.Fprintf(stderr, "ruled check: %v\n", werr)
			return 1
		}
		if !rep.OK {
			return 1
		}
		return 0
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, n)
	}
	if err != nil {
		printRuleErrors(stderr, err, "")
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d rules in %s\n", len(set.Rules()), path)
	return 0
}

// testFileNotes notes the rule tests (*_test.yaml) of the directory path:
// its rules skip them, which a rule file of that name would not expect.
func testFileNotes(path string) []note {
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil // not a directory, or the load reports why
	}
	var notes []note
	for _, e := range entries {
		if !e.IsDir() && rules.IsTestFile(e.Name()) && !strings.HasPrefix(e.Name(), ".") {
			notes = append(notes, note{Pos: rules.Position{File: filepath.Join(path, e.Name())},
				Message: "a rule test, not rules: skipped here (ruled test runs it)"})
		}
	}
	return notes
}

// newCheckReport is the JSON report of a check of path: the loaded set, or
// err, the load error, with every error in it positioned as far as known.
func newCheckReport(path string, set *rules.Set, notes []note, err error) checkReport {
	rep := checkReport{OK: err == nil, Path: path, Errors: reportErrors(err), Notes: reportNotes(notes)}
	if err == nil && set != nil {
		rep.Rules = len(set.Rules())
	}
	return rep
}

// reportNotes lists notes for a JSON report, [] for none.
func reportNotes(notes []note) []reportNote {
	out := []reportNote{}
	for _, n := range notes {
		out = append(out, reportNote{File: n.Pos.File, Line: n.Pos.Line, Col: n.Pos.Column, Message: n.Message})
	}
	return out
}

// reportErrors lists the errors of a load error, [] for none. An error
// that is not a rules.ErrorList (an unreadable path) is one error with
// code "read" and no position, as rules.Merge makes it.
func reportErrors(err error) []reportError {
	out := []reportError{}
	var list rules.ErrorList
	errors.As(rules.Merge(err, nil), &list)
	for _, e := range list {
		out = append(out, reportError{File: e.Pos.File, Line: e.Pos.Line, Col: e.Pos.Column, Rule: e.Rule, Code: e.Code, Message: e.Message})
	}
	return out
}

// writeJSON writes v to w as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing the output: %w", err)
	}
	return nil
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
func checkRules(ctx context.Context, path string, log *slog.Logger, start bool) (*rules.Set, []note, error) {
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
	var notes []note
	loadErrs := host.LoadDeclared(files.Plugins(), func(name string) bool { _, ok := cat[name]; return ok },
		func(d rules.PluginDecl) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if !start {
				if err := checkPlugin(ctx, d); err != nil {
					return err
				}
				cat[d.Name] = unstarted{name: d.Name}
				notes = append(notes, note{Pos: d.Pos, Message: fmt.Sprintf(
					"plugin %q was not started: the config and lease of its rules are not validated (ruled check --start-plugins runs it to validate it)", d.Name)})
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

// printRuleErrors prints a load error: one line per positioned error,
// then their count, followed by "; " and outcome unless outcome is "".
func printRuleErrors(w io.Writer, err error, outcome string) {
	var list rules.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		if outcome != "" {
			outcome = "; " + outcome
		}
		fmt.Fprintf(w, "%d error(s)%s\n", len(list), outcome)
		return
	}
	fmt.Fprintln(w, err)
}

// rulesLoad validates rule files against the built-in plugins.
func rulesLoad(path string) (*rules.Set, error) { return rules.Load(path, builtinCatalog()) }
