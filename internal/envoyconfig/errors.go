package envoyconfig

import (
	"fmt"

	"github.com/ruled-dev/ruled/rules"
)

// Error codes: short, stable identifiers of the kind of an import error,
// those a rule file can have too with the same values as rules'.
const (
	CodeRead                = rules.CodeRead           // a file or directory could not be read
	CodeYAML                = rules.CodeYAML           // YAML syntax error, or more than one document
	CodeUnknownField        = rules.CodeUnknownField   // a key envoy ratelimit does not define at that place
	CodeDuplicateField      = rules.CodeDuplicateField // a key given twice in one mapping
	CodeMissingField        = rules.CodeMissingField   // no domain, a descriptor without key, a rate limit without unit
	CodeBadValue            = rules.CodeBadValue       // a value of the wrong shape, type or range
	CodeDuplicateDomain     = "duplicate-domain"       // two files configure one domain
	CodeDuplicateDescriptor = "duplicate-descriptor"   // two sibling descriptors with one key and value
	CodeUntranslatable      = "untranslatable"         // valid for envoy, but ruled rules cannot say it
	CodeExist               = "exists"                 // Write: a file to write exists already
	CodeWrite               = "write"                  // Write: the rule files could not be written
)

// Position is a place in an envoy config file, as rule files have them:
// Line and Column are 1-based, Column counts characters.
type Position = rules.Position

// Error is one problem found in the envoy config files (its Rule is
// empty).
type Error = rules.Error

// ErrorList is every problem found in one import, sorted by file, line and
// column, formatted and compared as rule-file errors are. It is the error
// type Translate returns.
type ErrorList = rules.ErrorList

// Note is a remark on a translation that succeeded: something of the
// envoy config that has no effect, or an approximation.
type Note struct {
	Pos     Position
	Message string
}

// String formats n as `file:line:col: note: message`.
func (n Note) String() string { return fmt.Sprintf("%s: note: %s", n.Pos, n.Message) }
