package yamlnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// MaxAliasNodes is how many nodes the aliases of one document may add to
// it when they are expanded. Anchors shared by many rules (defaults merged
// with <<) stay far below it; a file whose aliases nest (an "alias bomb",
// each level doubling the one below) passes it within a few lines, and is
// refused before anything walks the expansion.
const MaxAliasNodes = 100_000

// Document is the one YAML document of a file, parsed but not expanded:
// aliases still point at their anchors.
type Document struct {
	// Root is the document's top node, aliases resolved; nil when the file
	// holds no document.
	Root *yaml.Node
	// Extra is the start of a second document, nil when there is none.
	// ruled's formats hold one document per file.
	Extra *yaml.Node
}

// AliasBudgetError reports a document whose aliases would expand beyond
// MaxAliasNodes nodes, at the alias that passed the budget.
type AliasBudgetError struct {
	Line, Column int
	// Anchor is the name of the anchor the alias names.
	Anchor string
}

func (e *AliasBudgetError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Message())
}

// Message says what is wrong, without the position.
func (e *AliasBudgetError) Message() string {
	return fmt.Sprintf("the alias *%s takes the file's aliases past %d nodes when expanded: "+
		"aliases that nest to expand this far are refused; write the repeated part out, or share less", e.Anchor, MaxAliasNodes)
}

// Decode parses the first YAML document of content, and the start of a
// second one if there is one, and checks that the aliases of the first
// expand to at most MaxAliasNodes nodes. The check costs time in
// proportion to the document's written size, whatever its aliases would
// expand to. The error is a yaml.v3 syntax error or an *AliasBudgetError
// (Problems splits either into positioned problems); with a syntax error
// in a second document, the first is returned with it.
func Decode(content []byte) (Document, error) {
	var d Document
	dec := yaml.NewDecoder(bytes.NewReader(content))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		return d, err
	}
	if err := checkAliases(&doc); err != nil {
		return d, err
	}
	if len(doc.Content) > 0 {
		d.Root = Resolve(doc.Content[0])
	}
	var extra yaml.Node
	err := dec.Decode(&extra)
	switch {
	case err == nil:
		d.Extra = &extra
	case errors.Is(err, io.EOF):
		err = nil
	}
	return d, err
}

// checkAliases walks the written document once, adding for each alias the
// expanded size of the node it names (sizes are memoized, so nesting costs
// nothing to measure), and stops at the first alias that passes the budget.
func checkAliases(doc *yaml.Node) error {
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node) int
	size = func(n *yaml.Node) int {
		if s, ok := sizes[n]; ok {
			return s
		}
		sizes[n] = MaxAliasNodes + 1 // an alias inside its own anchor expands without end
		s := 1
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			s = size(n.Alias)
		} else {
			for _, c := range n.Content {
				if s += size(c); s > MaxAliasNodes {
					s = MaxAliasNodes + 1
					break
				}
			}
		}
		sizes[n] = s
		return s
	}
	added := 0
	var walk func(n *yaml.Node) error
	walk = func(n *yaml.Node) error {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return nil
			}
			if added += size(n.Alias); added > MaxAliasNodes {
				return &AliasBudgetError{Line: n.Line, Column: n.Column, Anchor: n.Value}
			}
			return nil
		}
		for _, c := range n.Content {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(doc)
}

// MaxFileSize is the largest YAML file ruled reads: 4 MiB, some 40,000
// rules. Parsed, a file takes some 30 times its size in memory, so the
// bound keeps a hostile or mistaken file (a log written over a rule file)
// to megabytes.
const MaxFileSize = 4 << 20

// ReadFile reads the file name, refusing one larger than MaxFileSize
// without reading past the bound.
func ReadFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d MiB, the most ruled reads from a YAML file", MaxFileSize>>20)
	}
	return b, nil
}
