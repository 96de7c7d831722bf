package rules

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser/lexer"
)

// bracketError is the bracket mistake behind an expression's syntax error:
// a bracket that is never closed, closed by the wrong kind, or a closing
// bracket with nothing to close. expr reports those as an unexpected token
// (often "unexpected token EOF"); this says what is missing, and where the
// bracket it concerns was opened.
type bracketError struct {
	open   string // the open bracket concerned, "" when none is open
	openAt int    // its character offset in the expression
	found  string // the closing bracket found, "" at the end of the expression
	at     int    // where the mistake shows: the closing bracket found, or the end
}

// closing returns the bracket that closes the open bracket b, or "" when
// b is not an open bracket.
func closing(b string) string {
	switch b {
	case "(":
		return ")"
	case "[":
		return "]"
	case "{":
		return "}"
	}
	return ""
}

// findBracketError lexes text and returns its first bracket mistake, or
// nil when its brackets balance or it does not lex.
func findBracketError(text string) *bracketError {
	tokens, err := lexer.Lex(file.NewSource(text))
	if err != nil {
		return nil
	}
	type open struct {
		b  string
		at int
	}
	var stack []open
	for _, t := range tokens {
		if t.Kind != lexer.Bracket {
			continue
		}
		if closing(t.Value) != "" {
			stack = append(stack, open{t.Value, t.From})
			continue
		}
		if len(stack) == 0 {
			return &bracketError{found: t.Value, at: t.From}
		}
		top := stack[len(stack)-1]
		if closing(top.b) != t.Value {
			return &bracketError{open: top.b, openAt: top.at, found: t.Value, at: t.From}
		}
		stack = stack[:len(stack)-1]
	}
	if len(stack) == 0 {
		return nil
	}
	top := stack[len(stack)-1]
	return &bracketError{open: top.b, openAt: top.at, at: utf8.RuneCountInString(strings.TrimRight(text, " \t\r\n"))}
}

// message describes the mistake; opened is where the open bracket is in the
// rule file.
func (b *bracketError) message(opened Position) string {
	where := fmt.Sprintf("line %d col %d", opened.Line, opened.Column)
	switch {
	case b.open == "":
		return fmt.Sprintf("%q closes nothing: no bracket is open here", b.found)
	case b.found == "":
		return fmt.Sprintf("missing %q: the %q opened at %s is never closed", closing(b.open), b.open, where)
	default:
		return fmt.Sprintf("%q cannot close the %q opened at %s (missing %q)", b.found, b.open, where, closing(b.open))
	}
}
