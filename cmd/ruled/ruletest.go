package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/internal/ruletest"
	"github.com/ruled-dev/ruled/internal/simulate"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

const testUsage = `Usage: ruled test [--redis URL] [--run REGEXP] [--format text|json] PATH...

Runs rule tests: the cases of *_test.yaml files, each a sequence of checks at virtual
times with the decisions they expect (docs/rules.md, "Testing rules").

PATH is a test file, a directory (its *_test.yaml and *_test.yml files), or DIR/...
(those of DIR and every directory below it). A file tests the rules its rules key
names, else the rule files of its own directory.

  --redis URL       decide on real Redis (any ruled serve --redis URL) with the clock
                    injected into the scripts, instead of the plugins' reference models;
                    keys go under a fresh prefix and are deleted after each case (env
                    RULED_REDIS)
  --run REGEXP      run only the cases whose name matches (env RULED_RUN)
  --format FORMAT   text (the default): one line a case, failures below it; json: one
                    object (env RULED_FORMAT):
                      {"ok", "passed", "failed",
                       "files": [{"file", "rules", "errors": [ruled check's errors],
                                  "cases": [{"name", "line", "passed", "checks",
                                             "failures": [{"file", "line", "col", "step",
                                                           "check", "at", "rule", "field",
                                                           "want", "got", "message"}]}]}]}

Without --redis, decisions come from the reference models of the built-in plugins, in
process and instantly; rules that use a third-party plugin need --redis. Either way every
request is decided by its plugin: the deny cache and leases, which answer the same or
more conservatively, are off.

Exit status: 0 every case passed; 1 a case failed, or a test or rule file is invalid;
2 usage error, no test files, or Redis cannot be reached.
`

// testReport is the output of ruled test --format json. Its fields are a
// stable interface: add to it, never rename or remove.
type testReport struct {
	OK     bool             `json:"ok"`
	Passed int              `json:"passed"`
	Failed int              `json:"failed"`
	Files  []testFileReport `json:"files"`
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
	redisURL := fs.String("redis", "", "decide on this Redis instead of the reference models")
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
	if *redisURL != "" {
		rb, err := newRedisBackend(ctx, *redisURL, log)
		if err != nil {
			fmt.Fprintf(stderr, "ruled test: %v\n", err)
			return 2
		}
		defer rb.close()
		backend = rb
	}
	rep := testReport{Files: []testFileReport{}}
	for _, path := range files {
		fr := runTestFile(ctx, path, backend, match)
		for _, c := range fr.Cases {
			if c.Passed {
				rep.Passed++
			} else {
				rep.Failed++
			}
		}
		if format == formatText {
			writeTestFile(stdout, fr)
		}
		rep.Files = append(rep.Files, fr)
	}
	broken := 0 // files that do not load
	for _, f := range rep.Files {
		if len(f.Errors) > 0 {
			broken++
		}
	}
	rep.OK = rep.Failed == 0 && broken == 0
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
		switch broken {
		case 0:
			fmt.Fprintln(stdout)
		case 1:
			fmt.Fprintln(stdout, ", 1 file did not load")
		default:
			fmt.Fprintf(stdout, ", %d files did not load\n", broken)
		}
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// testFiles returns the test files paths stand for, in order, each once.
func testFiles(paths []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
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
				if !d.IsDir() && rules.IsTestFile(path) {
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
			add(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, e := range entries {
			if !e.IsDir() && rules.IsTestFile(e.Name()) {
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
		if err != nil {
			cr.Failures = append(cr.Failures, testFailureReport{File: c.Pos.File, Line: c.Pos.Line, Col: c.Pos.Column, Message: err.Error()})
		}
		cr.Checks = o.Checks
		for _, fl := range o.Failures {
			cr.Failures = append(cr.Failures, testFailureReport{File: fl.Pos.File, Line: fl.Pos.Line, Col: fl.Pos.Column,
				Step: fl.Step, Check: fl.Check, At: fl.At.String(), Rule: fl.Rule, Field: fl.Field, Want: fl.Want, Got: fl.Got,
				Message: fl.Error()})
		}
		cr.Passed = len(cr.Failures) == 0
		fr.Cases = append(fr.Cases, cr)
	}
	return fr
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
	}
}

// modelBackend decides on the built-ins' reference models.
type modelBackend struct{ log *slog.Logger }

func (b modelBackend) load(_ context.Context, path string) (testRules, error) {
	set, _, err := checkRules(path, b.log, false)
	if err != nil {
		return nil, err
	}
	if _, err := simulate.New(set); err != nil {
		return nil, fmt.Errorf("%w: only Redis can decide them (ruled test --redis URL)", err)
	}
	return modelRules{s: set}, nil
}

type modelRules struct{ s *rules.Set }

func (m modelRules) set() *rules.Set { return m.s }

func (m modelRules) run(_ context.Context, c *ruletest.Case) (ruletest.Outcome, error) {
	sim, err := simulate.New(m.s)
	if err != nil {
		return ruletest.Outcome{Case: c}, err
	}
	return c.Run(sim), nil
}

// redisBackend decides on real Redis: one engine per case, under a key
// prefix of its own, its scripts and shortcuts on the case's clock.
type redisBackend struct {
	st    *store.Store
	log   *slog.Logger
	run   string       // this run's random part of the key prefix
	cases atomic.Int64 // cases run, for the prefix
}

func newRedisBackend(ctx context.Context, url string, log *slog.Logger) (*redisBackend, error) {
	st, err := store.Open(ctx, store.Options{URL: url, Timeout: capability.DefaultTimeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if err := st.Client().Ping(ctx).Err(); err != nil {
		st.Close()
		return nil, fmt.Errorf("--redis %s: %w", url, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &redisBackend{st: st, log: log, run: hex.EncodeToString(b[:])}, nil
}

func (b *redisBackend) close() { b.st.Close() }

func (b *redisBackend) load(_ context.Context, path string) (testRules, error) {
	set, _, err := checkRules(path, b.log, false)
	if err != nil {
		return nil, err
	}
	return &redisRules{b: b, path: path, s: set}, nil
}

type redisRules struct {
	b    *redisBackend
	path string
	s    *rules.Set
}

func (r *redisRules) set() *rules.Set { return r.s }

func (r *redisRules) run(ctx context.Context, c *ruletest.Case) (ruletest.Outcome, error) {
	clock := &engineClock{ctx: ctx}
	prefix := fmt.Sprintf("ruled-test:%s:%d", r.b.run, r.b.cases.Add(1))
	cap := capability.New(r.b.st.Client(), capability.Options{Timeout: capability.DefaultTimeout, Prefix: prefix,
		Logger: r.b.log, Clock: clock.now.Load})
	wopts, closeWasm := wasmOptions(r.b.log, pluginCallTimeout(capability.DefaultTimeout), "")
	defer closeWasm()
	e, err := host.NewEngine(host.Options{Capability: cap, Plugins: builtin.All(), Logger: r.b.log, NoShortcuts: true,
		LoadPlugin: pluginLoader(r.b.log, wopts, nil), Now: func() time.Time { return time.UnixMicro(clock.now.Load()) }})
	if err != nil {
		return ruletest.Outcome{Case: c}, err
	}
	defer e.Close(context.WithoutCancel(ctx))
	set, err := e.Load(r.path)
	if err != nil {
		return ruletest.Outcome{Case: c}, err
	}
	defer func() {
		for _, rule := range set.Rules() {
			if rule.Exempt {
				continue
			}
			if _, err := e.ClearCounters(context.WithoutCancel(ctx), rule.Name); err != nil && !errors.Is(err, host.ErrNoRule) {
				r.b.log.Warn("test keys not deleted", "prefix", prefix, "rule", rule.Name, "err", err)
			}
		}
	}()
	clock.e = e
	o := c.Run(clock)
	return o, clock.err
}

// engineClock is a ruletest.Checker over an engine whose scripts read
// the time it sets.
type engineClock struct {
	ctx context.Context
	e   *host.Engine
	now atomic.Int64
	err error // the first degraded decision: Redis failed the case
}

func (c *engineClock) Check(nowUS int64, req *host.CheckRequest) host.Result {
	c.now.Store(nowUS)
	res := c.e.Check(c.ctx, req)
	if c.err == nil {
		for _, rr := range res.Results {
			// A rule whose expressions fail degrades too, as the models
			// do; only a capability error is Redis failing.
			var ce *capability.Error
			if rr.Degraded != host.DegradedNone && errors.As(rr.Err, &ce) {
				c.err = fmt.Errorf("rule %s: Redis failed: %w", rr.Rule, rr.Err)
				break
			}
		}
	}
	return res
}
