// Package yamlnode holds what ruled's YAML file parsers (rule files,
// imported envoy configs) share: which files a path stands for, syntax
// errors with their lines, and mappings read with aliases resolved, merge
// keys (<<) expanded and explicit keys winning over merged ones, each
// problem with a key reported through a callback so that the parser keeps
// its position.
package yamlnode

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Pair is one key and its value in a mapping, aliases resolved.
type Pair struct{ Key, Val *yaml.Node }

// Resolve follows aliases to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// Describe names a value in an error message: "a mapping", "a list", or
// the scalar quoted.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// IsNull reports whether n is absent or a YAML null.
func IsNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// Pairs returns the key/value pairs of the mapping n, in order, with merge
// keys expanded after the explicit keys (which win). A key that is not a
// string (a null key is not), or that is given twice, is left out and passed to bad, with
// duplicate telling which.
func Pairs(n *yaml.Node, bad func(key *yaml.Node, duplicate bool)) []Pair {
	var out, merged []Pair
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), Resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			for _, m := range MergeSources(v) {
				merged = append(merged, Pairs(m, bad)...)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || IsNull(k) {
			bad(k, false)
			continue
		}
		if seen[k.Value] {
			bad(k, true)
			continue
		}
		seen[k.Value] = true
		out = append(out, Pair{k, v})
	}
	for _, m := range merged {
		if !seen[m.Key.Value] {
			seen[m.Key.Value] = true
			out = append(out, m)
		}
	}
	return out
}

// MergeSources returns the mappings a merge key's value names: one mapping or
// a list of them.
func MergeSources(v *yaml.Node) []*yaml.Node {
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, c := range v.Content {
			if c = Resolve(c); c.Kind == yaml.MappingNode {
				out = append(out, c)
			}
		}
		return out
	}
	return nil
}

// Problem is one problem of an error of Decode: its 1-based line (0 when
// the parser gave none), its column where known (yaml.v3 reports columns
// for none of its syntax errors), and its message without the position.
type Problem struct {
	Line, Column int
	Message      string
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parserErrors are yaml.v3's parser (as opposed to scanner) error
// messages, which it reports at the 0-based line of the enclosing
// construct, with what to add to them to say so.
var parserErrors = map[string]string{
	"did not find expected '-' indicator":    " in the list that starts here",
	"did not find expected key":              " in the mapping that starts here",
	"did not find expected ',' or ']'":       " in the flow list that starts here",
	"did not find expected ',' or '}'":       " in the flow mapping that starts here",
	"did not find expected node content":     "",
	"did not find expected <document start>": "",
	"did not find expected <stream-start>":   "",
	"found duplicate %YAML directive":        "",
	"found duplicate %TAG directive":         "",
	"found incompatible YAML document":       "",
}

// Problems splits an error of Decode into its problems with their
// positions: a syntax error's lines made 1-based and explained where the
// parser reports the enclosing construct's line, an alias budget error at
// its alias.
func Problems(err error) []Problem {
	var budget *AliasBudgetError
	if errors.As(err, &budget) {
		return []Problem{{Line: budget.Line, Column: budget.Column, Message: budget.Message()}}
	}
	var out []Problem
	for msg := range strings.SplitSeq(err.Error(), "\n") {
		msg = strings.TrimSpace(msg)
		if msg == "" {
			continue
		}
		var e Problem
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		if hint, ok := parserErrors[msg]; ok {
			e.Line++
			msg += hint
		}
		e.Message = msg
		out = append(out, e)
	}
	return out
}

// Files returns the YAML files path stands for: path itself when it is
// not a directory, else the directory's *.yaml and *.yml files (not its
// subdirectories, not dot files) in name order.
func Files(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		ext := filepath.Ext(n)
		if strings.HasPrefix(n, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		full := filepath.Join(path, n)
		if fi, err := os.Stat(full); err == nil && fi.IsDir() {
			continue
		}
		names = append(names, full)
	}
	return names, nil
}
