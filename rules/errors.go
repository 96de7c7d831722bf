package rules

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error codes: short, stable identifiers of the kind of a load error, for
// tools and tests that must not depend on message wording.
const (
	CodeRead            = "read"             // a file or directory could not be read
	CodeYAML            = "yaml"             // YAML syntax error
	CodeUnknownField    = "unknown-field"    // a key the schema does not define
	CodeDuplicateField  = "duplicate-field"  // a key given twice in one mapping
	CodeMissingField    = "missing-field"    // a required key is absent
	CodeBadValue        = "bad-value"        // a value of the wrong shape or type
	CodeBadName         = "bad-name"         // a rule or plugin name outside the allowed pattern
	CodeDuplicateRule   = "duplicate-rule"   // two rules share a name
	CodeDuplicatePlugin = "duplicate-plugin" // two plugin declarations share a name
	CodeBadPlugin       = "bad-plugin"       // a malformed plugin declaration
	CodeUnknownPlugin   = "unknown-plugin"   // a rule names a plugin the catalog cannot resolve
	CodeBadOnError      = "bad-on-error"     // on_error is not allow, deny or local
	CodeExpr            = "expr"             // an expression does not compile or has the wrong type
	CodeBadConfig       = "bad-config"       // the plugin's Configure rejected the rule's config
	CodePluginLoad      = "plugin-load"      // a third-party plugin declared under plugins: could not be loaded
)

// Position is a place in a rule file. Line and Column are 1-based; Column
// counts characters, not bytes. A zero Line means the whole file, a zero
// Column the whole line.
type Position struct {
	File   string
	Line   int
	Column int
}

// String formats p as file:line:column, leaving out unknown parts.
func (p Position) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(p.Line))
		if p.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(p.Column))
		}
	}
	return b.String()
}

// Error is one problem found while loading rule files.
type Error struct {
	Pos     Position // where the problem is
	Rule    string   // the rule it belongs to, if any
	Code    string   // one of the Code constants
	Message string   // human-readable description
}

// Error formats e as `file:line:col: rule "name": message`.
func (e *Error) Error() string {
	var b strings.Builder
	if p := e.Pos.String(); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, "rule %q: ", e.Rule)
	}
	b.WriteString(e.Message)
	return b.String()
}

// ErrorList is every problem found in one load, sorted by file, line and
// column. It is the error type Parse, Compile and Load return.
type ErrorList []*Error

// Error formats the list one error a line.
func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Err returns l sorted as an error, or nil when l is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	l.sort()
	return l
}

// Merge returns the errors of err (an ErrorList, or any error as one
// unpositioned entry) and more, sorted, as one error; nil when there are
// none. Callers that find problems of their own while loading (a plugin
// that does not load) report them with the rules' in one list.
func Merge(err error, more ErrorList) error {
	var list ErrorList
	if err != nil && !errors.As(err, &list) {
		list = ErrorList{{Code: CodeRead, Message: err.Error()}}
	}
	return append(slices.Clone(list), more...).Err()
}

func (l ErrorList) sort() {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
		)
	})
}

// EvalError is a run-time error evaluating one rule for one input: its
// when, its subject or one of its dynamic config values. It reaches the
// caller as Selection.Err, never as a panic.
type EvalError struct {
	Rule  string   // the rule's name
	Field string   // "when", "subject" or "config.<key>"
	Pos   Position // where the expression (or the failing part of it) is
	Err   error    // what went wrong
}

// Error formats e like a load error.
func (e *EvalError) Error() string {
	var b strings.Builder
	if p := e.Pos.String(); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "rule %q: %s: %v", e.Rule, e.Field, e.Err)
	return b.String()
}

// Unwrap returns the underlying error.
func (e *EvalError) Unwrap() error { return e.Err }
