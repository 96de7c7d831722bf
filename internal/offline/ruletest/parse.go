// Package ruletest reads rule tests (`*_test.yaml` files) and runs their
// cases: `ruled test`. A case is a sequence of checks at virtual times,
// each with the decisions it expects; a Checker decides them (the
// local models of host.Simulator, or an engine on Redis with its
// clock injected). docs/rules.md, "Testing rules", describes the format.
package ruletest

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/suggest"
	"github.com/ruled-dev/ruled/internal/yamlnode"
	"github.com/ruled-dev/ruled/rules"
)

// DefaultStart returns when a case's clock starts unless the file or the
// case sets start: a Monday at midnight UTC, where fixed windows of a
// second, a minute, an hour or a day begin (they are aligned to the Unix
// epoch, a Thursday: a 7-day window is not), and so do calendar days and
// ISO weeks.
func DefaultStart() time.Time { return time.Date(2026, time.January, 5, 0, 0, 0, 0, time.UTC) }

// MaxRepeat bounds a step's repeat.
const MaxRepeat = 1_000_000

// MaxChecks bounds the checks of one file, all its cases and repeats
// together: a file cannot ask for more work than one step may, however
// its cases share steps through aliases.
const MaxChecks = 1_000_000

// File is one test file.
type File struct {
	// Path is the file's path as it was named.
	Path string
	// Rules is the rule file or directory the cases test: the file's
	// rules key, relative to the file's directory, else that directory.
	Rules string
	// RulesPos is where the rules key is, if the file has one.
	RulesPos rules.Position
	Cases    []*Case
}

// Case is one named sequence of steps, run on fresh state.
type Case struct {
	Name  string
	Pos   rules.Position
	Start time.Time // the clock at `at: 0s`
	Steps []*Step
}

// Step is one check, sent Repeat times at At after the case's start.
type Step struct {
	Pos     rules.Position
	At      time.Duration
	Repeat  int
	Request host.CheckRequest
	Expect  []Expectation
}

// Expectation is one value a step expects: of the check as a whole
// (Rule empty: allowed, retry_after) or of one rule's decision (matched,
// allowed, exempt, subject, limit, remaining, granted, retry_after, reset,
// delay).
type Expectation struct {
	Rule    string
	RulePos rules.Position // of the rule's name, when Rule is set
	Field   string
	Pos     rules.Position // of the expected value
	// Want is a bool, an int64, a string or a time.Duration, as Field
	// takes.
	Want any
	// Tolerance is how far a duration may be from Want.
	Tolerance time.Duration
}

// Field kinds.
const (
	kindBool = iota
	kindInt
	kindString
	kindDuration
)

// checkFields and ruleFields are what an expectation may name, with the
// kind of value each takes.
var (
	checkFields = map[string]int{"allowed": kindBool, "retry_after": kindDuration}
	ruleFields  = map[string]int{"matched": kindBool, "allowed": kindBool, "exempt": kindBool, "subject": kindString,
		"limit": kindInt, "remaining": kindInt, "granted": kindInt, "retry_after": kindDuration, "reset": kindDuration,
		"delay": kindDuration}
)

var (
	fileFields    = []string{"rules", "start", "tests"}
	caseFields    = []string{"name", "start", "steps"}
	stepFields    = []string{"at", "repeat", "request", "attrs", "hits", "dedup_id", "best_effort", "expect"}
	requestFields = []string{"ip", "method", "path", "host", "user", "headers", "query"}
	expectFields  = []string{"allowed", "retry_after", "rules"}
)

// Parse reads the test file at path. Its errors are a rules.ErrorList,
// each with the file, line and column of the problem.
func Parse(path string) (*File, error) {
	content, err := yamlnode.ReadFile(path)
	if err != nil {
		return nil, rules.ErrorList{&rules.Error{Pos: rules.Position{File: path}, Code: rules.CodeRead, Message: err.Error()}}
	}
	p := &parser{file: &File{Path: path, Rules: filepath.Dir(path)}}
	p.parse(content)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return p.file, nil
}

type parser struct {
	file   *File
	errs   rules.ErrorList
	checks int // the checks of the steps parsed so far
}

func (p *parser) pos(n *yaml.Node) rules.Position {
	return rules.Position{File: p.file.Path, Line: n.Line, Column: n.Column}
}

func (p *parser) errorf(n *yaml.Node, code, format string, args ...any) {
	p.errs = append(p.errs, &rules.Error{Pos: p.pos(n), Code: code, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) parse(content []byte) {
	doc, err := yamlnode.Decode(content)
	if err != nil {
		for _, pr := range yamlnode.Problems(err) {
			p.errs = append(p.errs, &rules.Error{Pos: rules.Position{File: p.file.Path, Line: pr.Line, Column: pr.Column}, Code: rules.CodeYAML, Message: pr.Message})
		}
		if doc.Root == nil {
			return
		}
	}
	if doc.Root == nil {
		p.errs = append(p.errs, &rules.Error{Pos: rules.Position{File: p.file.Path}, Code: rules.CodeMissingField, Message: "no tests: want a mapping with the key tests"})
		return
	}
	if doc.Extra != nil {
		p.errorf(doc.Extra, rules.CodeYAML, "only one YAML document per file is supported")
	}
	root := doc.Root
	if root.Kind != yaml.MappingNode {
		p.errorf(root, rules.CodeBadValue, "want a mapping with the keys %s", strings.Join(fileFields, ", "))
		return
	}
	start := DefaultStart()
	var tests *yaml.Node
	for _, kv := range p.pairs(root, fileFields, "x-") {
		switch kv.Key.Value {
		case "rules":
			if s, ok := p.str(kv.Val, "rules"); ok && s != "" {
				if !filepath.IsAbs(s) {
					s = filepath.Join(filepath.Dir(p.file.Path), s)
				}
				p.file.Rules, p.file.RulesPos = s, p.pos(kv.Val)
			}
		case "start":
			if t, ok := p.time(kv.Val, "start"); ok {
				start = t
			}
		case "tests":
			tests = kv.Val
		}
	}
	if tests == nil {
		p.errorf(root, rules.CodeMissingField, "tests: missing; want a list of cases")
		return
	}
	if tests.Kind != yaml.SequenceNode || len(tests.Content) == 0 {
		p.errorf(tests, rules.CodeBadValue, "tests: want a list of at least one case")
		return
	}
	names := map[string]bool{}
	for _, n := range tests.Content {
		c := p.parseCase(yamlnode.Resolve(n), start)
		if c == nil {
			continue
		}
		if names[c.Name] {
			p.errorf(n, rules.CodeBadValue, "case %q: a second case of that name", c.Name)
		}
		names[c.Name] = true
		p.file.Cases = append(p.file.Cases, c)
	}
}

func (p *parser) parseCase(n *yaml.Node, start time.Time) *Case {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, rules.CodeBadValue, "want a case: a mapping with the keys %s", strings.Join(caseFields, ", "))
		return nil
	}
	c := &Case{Pos: p.pos(n), Start: start}
	var steps *yaml.Node
	for _, kv := range p.pairs(n, caseFields) {
		switch kv.Key.Value {
		case "name":
			c.Name, _ = p.str(kv.Val, "name")
		case "start":
			if t, ok := p.time(kv.Val, "start"); ok {
				c.Start = t
			}
		case "steps":
			steps = kv.Val
		}
	}
	if c.Name == "" {
		p.errorf(n, rules.CodeMissingField, "name: missing; every case needs a name")
	}
	if steps == nil || steps.Kind != yaml.SequenceNode || len(steps.Content) == 0 {
		at := n
		if steps != nil {
			at = steps
		}
		p.errorf(at, rules.CodeMissingField, "steps: want a list of at least one step")
		return nil
	}
	at := time.Duration(0)
	for _, sn := range steps.Content {
		s := p.parseStep(yamlnode.Resolve(sn), at)
		if s == nil {
			continue
		}
		at = s.At
		c.Steps = append(c.Steps, s)
		if p.checks <= MaxChecks {
			if p.checks += s.Repeat; p.checks > MaxChecks {
				p.errorf(n, rules.CodeBadValue, "case %q, step %d: the file's cases send more than %d checks with it; "+
					"split the file, or repeat less", c.Name, len(c.Steps), MaxChecks)
			}
		}
	}
	return c
}

func (p *parser) parseStep(n *yaml.Node, prev time.Duration) *Step {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, rules.CodeBadValue, "want a step: a mapping with the keys %s", strings.Join(stepFields, ", "))
		return nil
	}
	s := &Step{Pos: p.pos(n), At: prev, Repeat: 1, Request: host.CheckRequest{Hits: 1}}
	for _, kv := range p.pairs(n, stepFields) {
		v := kv.Val
		switch kv.Key.Value {
		case "at":
			if d, ok := p.duration(v, "at"); ok {
				if d < prev {
					p.errorf(v, rules.CodeBadValue, "at: %s is before the step before it (%s): time only moves forward", d, prev)
				}
				s.At = d
			}
		case "repeat":
			if i, ok := p.int(v, "repeat"); ok {
				if i < 1 || i > MaxRepeat {
					p.errorf(v, rules.CodeBadValue, "repeat: want 1 to %d, got %d", MaxRepeat, i)
				}
				s.Repeat = int(i)
			}
		case "request":
			p.parseRequest(v, &s.Request.Request)
		case "attrs":
			s.Request.Attrs = p.strMap(v, "attrs")
		case "hits":
			if i, ok := p.int(v, "hits"); ok {
				if err := host.CheckHits(i); err != nil {
					p.errorf(v, rules.CodeBadValue, "hits: %v", err)
				}
				s.Request.Hits = i
			}
		case "dedup_id":
			if id, ok := p.str(v, "dedup_id"); ok {
				if err := host.CheckDedupID(id); err != nil {
					p.errorf(v, rules.CodeBadValue, "dedup_id: %v", err)
				}
				s.Request.DedupID = id
			}
		case "best_effort":
			s.Request.BestEffort, _ = p.bool(v, "best_effort")
		case "expect":
			s.Expect = p.parseExpect(v)
		}
	}
	return s
}

func (p *parser) parseRequest(n *yaml.Node, r *rules.Request) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, rules.CodeBadValue, "request: want a mapping with the keys %s", strings.Join(requestFields, ", "))
		return
	}
	for _, kv := range p.pairs(n, requestFields) {
		v := kv.Val
		switch kv.Key.Value {
		case "ip":
			r.IP, _ = p.str(v, "request.ip")
		case "method":
			r.Method, _ = p.str(v, "request.method")
		case "path":
			r.Path, _ = p.str(v, "request.path")
		case "host":
			r.Host, _ = p.str(v, "request.host")
		case "user":
			r.User, _ = p.str(v, "request.user")
		case "headers":
			r.Headers = rules.NormalizeHeaders(p.strMap(v, "headers"))
		case "query":
			r.Query = p.strMap(v, "query")
		}
	}
}

func (p *parser) parseExpect(n *yaml.Node) []Expectation {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, rules.CodeBadValue, "expect: want a mapping with the keys %s", strings.Join(expectFields, ", "))
		return nil
	}
	var out []Expectation
	for _, kv := range p.pairs(n, expectFields) {
		if kv.Key.Value != "rules" {
			if e, ok := p.expectation("", kv.Key.Value, checkFields[kv.Key.Value], kv.Val); ok {
				out = append(out, e)
			}
			continue
		}
		if kv.Val.Kind != yaml.MappingNode {
			p.errorf(kv.Val, rules.CodeBadValue, "expect.rules: want a mapping of rule names to expected decisions")
			continue
		}
		for _, rv := range p.pairs(kv.Val, nil) {
			rule, body := rv.Key.Value, rv.Val
			if body.Kind != yaml.MappingNode {
				p.errorf(body, rules.CodeBadValue, "expect.rules.%s: want a mapping with the keys %s", rule, strings.Join(sortedKeys(ruleFields), ", "))
				continue
			}
			for _, fv := range p.pairs(body, sortedKeys(ruleFields)) {
				if e, ok := p.expectation(rule, fv.Key.Value, ruleFields[fv.Key.Value], fv.Val); ok {
					e.RulePos = p.pos(rv.Key)
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// expectation reads one expected value of kind. A duration is a Go
// duration, or a mapping {value: D, tolerance: D}.
func (p *parser) expectation(rule, field string, kind int, v *yaml.Node) (Expectation, bool) {
	e := Expectation{Rule: rule, Field: field, Pos: p.pos(v)}
	name := "expect." + field
	if rule != "" {
		name = "expect.rules." + rule + "." + field
	}
	var ok bool
	switch kind {
	case kindBool:
		e.Want, ok = p.bool(v, name)
	case kindInt:
		e.Want, ok = p.int(v, name)
	case kindString:
		e.Want, ok = p.str(v, name)
	case kindDuration:
		if v.Kind != yaml.MappingNode {
			e.Want, ok = p.duration(v, name)
			break
		}
		var want *yaml.Node
		for _, kv := range p.pairs(v, []string{"value", "tolerance"}) {
			switch kv.Key.Value {
			case "value":
				want = kv.Val
				e.Pos = p.pos(kv.Val)
				e.Want, ok = p.duration(kv.Val, name)
			case "tolerance":
				e.Tolerance, _ = p.duration(kv.Val, name+".tolerance")
			}
		}
		if want == nil {
			p.errorf(v, rules.CodeMissingField, "%s.value: missing", name)
		}
	}
	return e, ok
}

// pairs returns n's pairs whose keys are in known (any key when known is
// nil), reporting the others; keys that start with skip (when it is not
// empty) are left out without a word.
func (p *parser) pairs(n *yaml.Node, known []string, skip ...string) []yamlnode.Pair {
	all := yamlnode.Pairs(n, func(k *yaml.Node, dup bool) {
		if dup {
			p.errorf(k, rules.CodeDuplicateField, "%s: given twice", k.Value)
		} else {
			p.errorf(k, rules.CodeBadValue, "want a string key")
		}
	})
	if known == nil {
		return all
	}
	out := all[:0]
	for _, kv := range all {
		if len(skip) > 0 && strings.HasPrefix(kv.Key.Value, skip[0]) {
			continue
		}
		if !slices.Contains(known, kv.Key.Value) {
			msg := fmt.Sprintf("unknown key %q", kv.Key.Value)
			if s := suggest.Closest(kv.Key.Value, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += fmt.Sprintf("; known keys: %s", strings.Join(known, ", "))
			}
			p.errorf(kv.Key, rules.CodeUnknownField, "%s", msg)
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (p *parser) scalar(n *yaml.Node, field, want string) (*yaml.Node, bool) {
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.ScalarNode || yamlnode.IsNull(n) {
		p.errorf(n, rules.CodeBadValue, "%s: want %s", field, want)
		return nil, false
	}
	return n, true
}

func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	s, ok := p.scalar(n, field, "a string")
	if !ok {
		return "", false
	}
	return s.Value, true
}

func (p *parser) bool(n *yaml.Node, field string) (bool, bool) {
	s, ok := p.scalar(n, field, "true or false")
	if !ok {
		return false, false
	}
	if s.ShortTag() != "!!bool" {
		if s.Value == "true" || s.Value == "false" {
			p.errorf(n, rules.CodeBadValue, "%s: want true or false without quotes, got the string %q", field, s.Value)
		} else {
			p.errorf(n, rules.CodeBadValue, "%s: want true or false, got %q", field, s.Value)
		}
		return false, false
	}
	return s.Value == "true", true
}

func (p *parser) int(n *yaml.Node, field string) (int64, bool) {
	s, ok := p.scalar(n, field, "a whole number")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(s.Value, 10, 64)
	if err != nil || s.ShortTag() != "!!int" {
		p.errorf(n, rules.CodeBadValue, "%s: want a whole number, got %q", field, s.Value)
		return 0, false
	}
	return i, true
}

func (p *parser) duration(n *yaml.Node, field string) (time.Duration, bool) {
	s, ok := p.scalar(n, field, "a duration such as 1.5s")
	if !ok {
		return 0, false
	}
	if s.Value == "0" {
		return 0, true
	}
	d, err := time.ParseDuration(s.Value)
	if err != nil || d < 0 {
		p.errorf(n, rules.CodeBadValue, "%s: want a duration of at least 0 such as 1.5s or 250ms, got %q", field, s.Value)
		return 0, false
	}
	return d, true
}

func (p *parser) time(n *yaml.Node, field string) (time.Time, bool) {
	const want = "an RFC 3339 time such as 2026-03-08T00:00:00-05:00"
	s, ok := p.scalar(n, field, want)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s.Value)
	if err != nil {
		p.errorf(n, rules.CodeBadValue, "%s: want %s, got %q", field, want, s.Value)
		return time.Time{}, false
	}
	return t, true
}

func (p *parser) strMap(n *yaml.Node, field string) map[string]string {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, rules.CodeBadValue, "%s: want a mapping of names to strings", field)
		return nil
	}
	out := map[string]string{}
	for _, kv := range p.pairs(n, nil) {
		if s, ok := p.str(kv.Val, field+"."+kv.Key.Value); ok {
			out[kv.Key.Value] = s
		}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	return slices.Sorted(maps.Keys(m))
}
