package rules

import (
	"sort"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// srcFile is one rule file's text, kept so that positions inside scalars
// (expression errors) can be mapped back to the file.
type srcFile struct {
	name       string // as reported in positions
	dir        string // absolute directory, for plugin paths
	content    []byte
	lineStarts []int // byte offset of each line's first byte
}

func newSrcFile(name, dir string, content []byte) *srcFile {
	f := &srcFile{name: name, dir: dir, content: content, lineStarts: []int{0}}
	for i, c := range content {
		if c == '\n' {
			f.lineStarts = append(f.lineStarts, i+1)
		}
	}
	return f
}

// pos returns the position of a node.
func (f *srcFile) pos(n *yaml.Node) Position {
	if n == nil {
		return Position{File: f.name}
	}
	return Position{File: f.name, Line: n.Line, Column: n.Column}
}

// offset returns the byte offset of a 1-based line and character column.
func (f *srcFile) offset(line, col int) int {
	if line < 1 || line > len(f.lineStarts) {
		return len(f.content)
	}
	off := f.lineStarts[line-1]
	for i := 1; i < col && off < len(f.content) && f.content[off] != '\n'; i++ {
		_, size := utf8.DecodeRune(f.content[off:])
		off += size
	}
	return off
}

// position converts a byte offset to a position.
func (f *srcFile) position(off int) Position {
	line := sort.Search(len(f.lineStarts), func(i int) bool { return f.lineStarts[i] > off }) // first line after
	start := f.lineStarts[line-1]
	col := 1 + utf8.RuneCount(f.content[start:min(off, len(f.content))])
	return Position{File: f.name, Line: line, Column: col}
}

// scalar is a YAML scalar whose value is (or contains) an expression, with
// what is needed to map a character offset in the value back to the file.
type scalar struct {
	file *srcFile
	node *yaml.Node
	skip int // characters of the value before the expression (1 for a leading '=')
}

func (s scalar) text() string {
	if s.node == nil {
		return ""
	}
	return s.node.Value[s.skip:]
}

// pos returns the file position of character offset off (0-based, in
// runes) of the expression. Plain and quoted scalars map exactly; escapes,
// folded lines and block scalars map on a best-effort basis by walking the
// raw text alongside the decoded value.
func (s scalar) pos(off int) Position {
	f, n := s.file, s.node
	if f == nil || n == nil {
		return Position{}
	}
	p := f.offset(n.Line, n.Column)
	raw := f.content
	switch n.Style &^ yaml.TaggedStyle &^ yaml.FlowStyle {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		p++ // opening quote
	case yaml.LiteralStyle, yaml.FoldedStyle:
		for p < len(raw) && raw[p] != '\n' { // block header
			p++
		}
	}
	double := n.Style&yaml.DoubleQuotedStyle != 0
	single := n.Style&yaml.SingleQuotedStyle != 0
	target := off + s.skip
	i := 0
	for _, r := range n.Value {
	seek:
		for p < len(raw) {
			c, size := utf8.DecodeRune(raw[p:])
			switch {
			case c == r:
				if i == target {
					return f.position(p)
				}
				p += size
				if single && c == '\'' && p < len(raw) && raw[p] == '\'' {
					p++
				}
				break seek
			case double && c == '\\' && p+1 < len(raw):
				if raw[p+1] == '\n' || raw[p+1] == '\r' { // escaped line break
					p += 2
					continue
				}
				if i == target {
					return f.position(p)
				}
				p += escapeLen(raw[p+1])
				break seek
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				p += size // indentation or a folded line break
			default:
				return f.position(p) // lost track: best effort
			}
		}
		i++
	}
	return f.position(min(p, len(raw)))
}

// escapeLen is the length in bytes of a double-quoted YAML escape whose
// letter is c.
func escapeLen(c byte) int {
	switch c {
	case 'x':
		return 4
	case 'u':
		return 6
	case 'U':
		return 10
	}
	return 2
}
