package envoyimport

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error codes: short, stable identifiers of the kind of an import error.
const (
	CodeRead                = "read"                 // a file or directory could not be read
	CodeYAML                = "yaml"                 // YAML syntax error, or more than one document
	CodeUnknownField        = "unknown-field"        // a key envoy ratelimit does not define at that place
	CodeDuplicateField      = "duplicate-field"      // a key given twice in one mapping
	CodeMissingField        = "missing-field"        // no domain, a descriptor without key, a rate limit without unit
	CodeBadValue            = "bad-value"            // a value of the wrong shape, type or range
	CodeDuplicateDomain     = "duplicate-domain"     // two files configure one domain
	CodeDuplicateDescriptor = "duplicate-descriptor" // two sibling descriptors with one key and value
	CodeUntranslatable      = "untranslatable"       // valid for envoy, but ruled rules cannot say it
)

// Position is a place in an envoy config file. Line and Column are
// 1-based; Column counts characters. A zero Line means the whole file, a
// zero Column the whole line.
type Position struct {
	File   string
	Line   int
	Column int
}

// String formats p as file:line:column, leaving out unknown parts.
func (p Position) String() string {
	s := p.File
	if p.Line > 0 {
		if s != "" {
			s += ":"
		}
		s += strconv.Itoa(p.Line)
		if p.Column > 0 {
			s += ":" + strconv.Itoa(p.Column)
		}
	}
	return s
}

// Error is one problem found in the envoy config files.
type Error struct {
	Pos     Position
	Code    string // one of the Code constants
	Message string
}

// Error formats e as `file:line:col: message`.
func (e *Error) Error() string {
	if p := e.Pos.String(); p != "" {
		return p + ": " + e.Message
	}
	return e.Message
}

// ErrorList is every problem found in one import, sorted by file, line and
// column. It is the error type Translate returns.
type ErrorList []*Error

// Error formats the list one error a line.
func (l ErrorList) Error() string {
	if len(l) == 0 {
		return "no errors"
	}
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Err returns l sorted, as an error, or nil when l is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Pos.File, b.Pos.File), cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
	return l
}

// Note is a remark on a translation that succeeded: something of the
// envoy config that has no effect, or an approximation.
type Note struct {
	Pos     Position
	Message string
}

// String formats n as `file:line:col: note: message`.
func (n Note) String() string { return fmt.Sprintf("%s: note: %s", n.Pos, n.Message) }
