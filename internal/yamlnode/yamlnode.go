// Package yamlnode reads YAML node trees as ruled's file parsers do
// (rule files, imported envoy configs): aliases resolved, merge keys (<<)
// expanded, explicit keys winning over merged ones, each problem with a
// key reported through a callback so that the parser keeps its position.
package yamlnode

import "go.yaml.in/yaml/v3"

// Pair is one key and its value in a mapping, aliases resolved.
type Pair struct{ Key, Val *yaml.Node }

// Resolve follows aliases to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
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
