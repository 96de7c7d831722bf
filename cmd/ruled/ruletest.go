package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/offline/ruletest"
	"github.com/ruled-dev/ruled/rules"
)

const testUsage = `Usage: ruled test [--redis URL] [--run REGEXP] [--format text|json] PATH...

Runs rule tests: the cases of *_test.yaml files, each a sequence of checks at virtual
times with the decisions they expect (docs/rules.md, "Testing rules").

PATH is a test file (its name ends in _test.yaml or _test.yml), a directory (its test
files), or DIR/... (those of DIR and of every directory below it); dot files are
skipped. A file tests the rules its rules key names, else the rule files of its own
directory.

  --redis URL       decide on real Redis (any URL ruled serve --redis takes) with the
                    case's clock injected into the scripts, instead of the plugins'
                    reference models. Keys go under ruled-test:<random>:, do not expire
                    while the run lasts, and are deleted when it ends. The environment
                    variable is RULED_TEST_REDIS, not ruled serve's RULED_REDIS.
  --run REGEXP      run only the cases whose name matches (env RULED_RUN)
  --format FORMAT   text (the default): one line a case, failures below it; json: one
                    object (env RULED_FORMAT):
                      {"ok", "passed", "failed", "interrupted",
                       "files": [{"file", "rules", "errors": [ruled check's errors],
                                  "cases": [{"name", "line", "passed", "checks", "error",
                                             "failures": [{"file", "line", "col", "step",
                                                           "check", "at", "rule", "field",
                                                           "want", "got", "message"}]}]}]}
                    error is why a case stopped before its end (Redis failed, a signal), else "";
                    interrupted is true when SIGINT or SIGTERM stopped the run.

Without --redis, decisions come from the plugins' local models, in process and
instantly; rules whose plugin has none (Wasm, process plugins) need --redis. Either way every
request is decided by its plugin: the deny cache and leases, which answer the same or
more conservatively, are off.

A file sends at most 1,000,000 checks, all its cases and repeats together.

Exit status: 0 every case passed; 1 a case failed, or a test or rule file is invalid;
2 usage error, a PATH without test files, --run matching no case, or Redis cannot be
reached or failed during a case.
`

// testReport is the output of ruled test --format json. Its fields are a
// stable interface: add to it, never rename or remove.
type testReport struct {
	OK     bool             `json:"ok"`
	Passed int              `json:"passed"`
	Failed int              `json:"failed"`
	Files  []testFileReport `json:"files"`
	// Interrupted says that a signal stopped the run: the cases and files
	// after the one it stopped are missing.
	Interrupted bool `json:"interrupted"`
}

type testFileReport struct {
	File   string           `json:"file"`
	Rules  string           `json:"rules"`
	Errors []reportError    `json:"errors"`
	Cases  []testCaseReport `json:"cases"`
}

type testCaseReport struct {
	Name     string              `json:"name"`
	Line     int                 `json:"line"`
	Passed   bool                `json:"passed"`
	Checks   int                 `json:"checks"`
	Failures []testFailureReport `json:"failures"`
	// Error is why the case stopped before its end (Redis failed); ""
	// when it ran to its end.
	Error string `json:"error"`
}

type testFailureReport struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Step    int    `json:"step"`
	Check   int    `json:"check"`
	At      string `json:"at"`
	Rule    string `json:"rule"`
	Field   string `json:"field"`
	Want    string `json:"want"`
	Got     string `json:"got"`
	Message string `json:"message"`
}

func testCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("test", stderr)
	// Not RULED_REDIS, ruled serve's Redis: a shell set up for serve must
	// not send tests to it.
	redisURL := &stringEnv{env: "RULED_TEST_REDIS"}
	fs.Var(redisURL, "redis", "decide on this Redis instead of the reference models")
	runExpr := fs.String("run", "", "run only the cases whose name matches this regular expression")
	format := formatText
	fs.Var(&format, "format", "output format: text or json")
	fs.Usage = func() { fmt.Fprint(stderr, testUsage) }
	paths, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(paths) == 0 {
		fs.Usage()
		return 2
	}
	var match *regexp.Regexp
	if *runExpr != "" {
		if match, err = regexp.Compile(*runExpr); err != nil {
			fmt.Fprintf(stderr, "ruled test: --run: %v\n", err)
			return 2
		}
	}
	files, err := testFiles(paths)
	if err != nil {
		fmt.Fprintf(stderr, "ruled test: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var backend testBackend = modelBackend{log: log}
	if redisURL.v != "" {
		redis.SetLogger(redisLogger{log})
		rb, err := newRedisBackend(ctx, redisURL.v, log)
		if err != nil {
			fmt.Fprintf(stderr, "ruled test: %v\n", err)
			return 2
		}
		defer rb.close()
		backend = rb
	}
	rep := testReport{Files: []testFileReport{}}
	var broken, stopped, ran int // files that do not load, cases stopped by an error, cases run
	for _, path := range files {
		fr := runTestFile(ctx, path, backend, match)
		for _, c := range fr.Cases {
			ran++
			switch {
			case c.Error != "":
				stopped++
				rep.Failed++
			case c.Passed:
				rep.Passed++
			default:
				rep.Failed++
			}
		}
		if len(fr.Errors) > 0 {
			broken++
		}
		if format == formatText {
			writeTestFile(stdout, fr)
		}
		rep.Files = append(rep.Files, fr)
		if ctx.Err() != nil {
			rep.Interrupted = true
			break
		}
	}
	rep.OK = rep.Failed == 0 && broken == 0 && ran > 0 && !rep.Interrupted
	if format == formatJSON {
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "ruled test: %v\n", err)
			return 1
		}
	} else {
		status := "ok"
		if !rep.OK {
			status = "FAIL"
		}
		fmt.Fprintf(stdout, "%s: %d passed, %d failed", status, rep.Passed, rep.Failed)
		if stopped > 0 {
			fmt.Fprintf(stdout, " (%d could not run to the end)", stopped)
		}
		switch broken {
		case 0:
		case 1:
			fmt.Fprint(stdout, ", 1 file did not load")
		default:
			fmt.Fprintf(stdout, ", %d files did not load", broken)
		}
		if rep.Interrupted {
			fmt.Fprintf(stdout, "; %s, the cases after it did not run", context.Cause(ctx))
		}
		fmt.Fprintln(stdout)
	}
	switch {
	case rep.Interrupted:
		return 2 // main gives the signal's status
	case stopped > 0:
		return 2
	case ran == 0 && broken == 0 && match != nil:
		fmt.Fprintf(stderr, "ruled test: --run %q matches no case\n", *runExpr)
		return 2
	case !rep.OK:
		return 1
	}
	return 0
}

// testFiles returns the test files paths stand for, in order, each once:
// a file named on its own must be a test file (*_test.yaml), as only those
// are left out of its directory's rules.
func testFiles(paths []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	isTest := func(name string) bool { return rules.IsTestFile(name) && !strings.HasPrefix(filepath.Base(name), ".") }
	for _, p := range paths {
		if dir, ok := strings.CutSuffix(p, "/..."); ok {
			n := len(out)
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() && path != dir && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if !d.IsDir() && isTest(path) {
					add(path)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			if len(out) == n {
				return nil, fmt.Errorf("%s: no *_test.yaml files", p)
			}
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			if !rules.IsTestFile(p) {
				return nil, fmt.Errorf("%s: not a test file: their names end in _test.yaml or _test.yml", p)
			}
			add(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, e := range entries {
			if !e.IsDir() && isTest(e.Name()) {
				add(filepath.Join(p, e.Name()))
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("%s: no *_test.yaml files (DIR/... looks in subdirectories too)", p)
		}
	}
	return out, nil
}

// testBackend makes the checkers cases run on.
type testBackend interface {
	// load loads the rules at path, or says why it cannot run them.
	load(ctx context.Context, path string) (testRules, error)
}

// testRules runs the cases of one rule set, each on fresh state.
type testRules interface {
	set() *rules.Set
	run(ctx context.Context, c *ruletest.Case) (ruletest.Outcome, error)
}

func runTestFile(ctx context.Context, path string, b testBackend, match *regexp.Regexp) testFileReport {
	fr := testFileReport{File: path, Errors: []reportError{}, Cases: []testCaseReport{}}
	f, err := ruletest.Parse(path)
	if err != nil {
		fr.Errors = reportErrors(err)
		return fr
	}
	fr.Rules = f.Rules
	if err := checkRulesPath(f); err != nil {
		fr.Errors = reportErrors(err)
		return fr
	}
	tr, err := b.load(ctx, f.Rules)
	if err == nil {
		err = ruletest.CheckRules(f, tr.set())
	}
	if err != nil {
		fr.Errors = reportErrors(err)
		if len(fr.Errors) == 0 || !errors.As(err, new(rules.ErrorList)) {
			fr.Errors = []reportError{{File: f.Rules, Code: "load", Message: err.Error()}}
		}
		return fr
	}
	for _, c := range f.Cases {
		if match != nil && !match.MatchString(c.Name) {
			continue
		}
		cr := testCaseReport{Name: c.Name, Line: c.Pos.Line, Failures: []testFailureReport{}}
		o, err := tr.run(ctx, c)
		if err == nil {
			err = o.Err
		}
		if err != nil {
			cr.Error = err.Error()
		}
		cr.Checks = o.Checks
		for _, fl := range o.Failures {
			cr.Failures = append(cr.Failures, testFailureReport{File: fl.Pos.File, Line: fl.Pos.Line, Col: fl.Pos.Column,
				Step: fl.Step, Check: fl.Check, At: fl.At.String(), Rule: fl.Rule, Field: fl.Field, Want: fl.Want, Got: fl.Got,
				Message: fl.Error()})
		}
		cr.Passed = err == nil && o.Passed()
		fr.Cases = append(fr.Cases, cr)
		if ctx.Err() != nil {
			break
		}
	}
	return fr
}

// checkRulesPath refuses a test file whose rules are missing or hold no
// rule file: its cases would test an empty rule set, which allows
// everything.
func checkRulesPath(f *ruletest.File) error {
	pos := f.RulesPos
	if pos.File == "" {
		pos = rules.Position{File: f.Path}
	}
	if _, err := os.Stat(f.Rules); err != nil {
		return rules.ErrorList{&rules.Error{Pos: pos, Code: rules.CodeRead, Message: fmt.Sprintf("rules: %v", err)}}
	}
	names, err := rules.Sources(f.Rules)
	if err != nil {
		return rules.ErrorList{&rules.Error{Pos: pos, Code: rules.CodeRead, Message: err.Error()}}
	}
	if len(names) == 0 {
		return rules.ErrorList{&rules.Error{Pos: pos, Code: rules.CodeRead, Message: fmt.Sprintf(
			"rules: no rule files in %s (a test file tests the rules of its directory unless its rules key names others)", f.Rules)}}
	}
	return nil
}

// writeTestFile prints a file's outcome for people: one line a case, its
// failures indented below it; a file that does not load prints its errors.
func writeTestFile(stdout io.Writer, fr testFileReport) {
	if len(fr.Errors) > 0 {
		fmt.Fprintf(stdout, "FAIL %s: does not load\n", fr.File)
		for _, e := range fr.Errors {
			pos := rules.Position{File: e.File, Line: e.Line, Column: e.Col}
			msg := e.Message
			if e.Rule != "" {
				msg = fmt.Sprintf("rule %q: %s", e.Rule, msg)
			}
			fmt.Fprintf(stdout, "    %s: %s\n", pos, msg)
		}
		return
	}
	for _, c := range fr.Cases {
		status := "ok  "
		if !c.Passed {
			status = "FAIL"
		}
		fmt.Fprintf(stdout, "%s %s:%d: %s (%d checks)\n", status, fr.File, c.Line, c.Name, c.Checks)
		for _, f := range c.Failures {
			fmt.Fprintf(stdout, "    %s\n", f.Message)
		}
		if c.Error != "" {
			fmt.Fprintf(stdout, "    stopped: %s\n", c.Error)
		}
	}
}

// modelBackend decides offline, on the plugins' local models (host.Simulator).
type modelBackend struct{ log *slog.Logger }

func (b modelBackend) load(ctx context.Context, path string) (testRules, error) {
	set, _, err := checkRules(ctx, path, b.log, false)
	if err != nil {
		return nil, err
	}
	if _, err := host.NewSimulator(set); err != nil {
		return nil, fmt.Errorf("%w: only Redis can decide them (ruled test --redis URL)", err)
	}
	return modelRules{s: set}, nil
}

type modelRules struct{ s *rules.Set }

func (m modelRules) set() *rules.Set { return m.s }

func (m modelRules) run(ctx context.Context, c *ruletest.Case) (ruletest.Outcome, error) {
	sim, err := host.NewSimulator(m.s)
	if err != nil {
		return ruletest.Outcome{Case: c}, err
	}
	return c.Run(ctx, sim), nil
}
