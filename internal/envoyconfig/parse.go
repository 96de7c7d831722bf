package envoyconfig

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/internal/suggest"
	"github.com/ruled-dev/ruled/internal/yamlnode"
)

// domainConfig is one envoy ratelimit config file: a domain and its
// descriptor tree, with the YAML nodes kept for positions.
type domainConfig struct {
	file        string
	domain      string
	domainNode  *yaml.Node
	descriptors []*descriptor
}

// descriptor is one node of the descriptor tree.
type descriptor struct {
	key, value string
	keyNode    *yaml.Node
	limit      *rateLimit            // nil: no rate_limit block
	shadow     bool                  // shadow_mode
	detailed   bool                  // detailed_metric
	valueToMet bool                  // value_to_metric
	share      bool                  // share_threshold
	flagNodes  map[string]*yaml.Node // the keys of the flags above, for positions
	children   []*descriptor
}

// wildcard reports whether d's value is a prefix pattern ("prefix*").
func (d *descriptor) wildcard() bool { return strings.HasSuffix(d.value, "*") }

// prefix is a wildcard value without its '*'.
func (d *descriptor) prefix() string { return strings.TrimSuffix(d.value, "*") }

// compositeKey is the key envoy files the descriptor under at its level:
// key, or key_value.
func (d *descriptor) compositeKey() string {
	if d.value == "" {
		return d.key
	}
	return d.key + "_" + d.value
}

// rateLimit is a descriptor's rate_limit block.
type rateLimit struct {
	node       *yaml.Node
	unit       string // upper case
	unitNode   *yaml.Node
	rpu        uint32 // requests_per_unit
	rpuSet     bool
	multiplier uint32 // unit_multiplier, 1 when not given
	multNode   *yaml.Node
	name       string
	replaces   []replaceRef
	unlimited  bool
}

// replaceRef is one entry of replaces.
type replaceRef struct {
	name string
	node *yaml.Node
}

// The fields envoy ratelimit reads at each level of a config file.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
		"value_to_metric", "share_threshold"}
	rateLimitFields = []string{"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces"}
	replacesFields  = []string{"name"}
)

// units are envoy's rate limit units (RateLimitResponse.RateLimit.Unit),
// as written in config files in any case.
var units = map[string]bool{"SECOND": true, "MINUTE": true, "HOUR": true, "DAY": true, "WEEK": true, "MONTH": true, "YEAR": true}

type parser struct {
	file string
	errs ErrorList
}

func (p *parser) pos(n *yaml.Node) Position {
	if n == nil {
		return Position{File: p.file}
	}
	return Position{File: p.file, Line: n.Line, Column: n.Column}
}

func (p *parser) errorf(n *yaml.Node, code, format string, args ...any) {
	p.errs = append(p.errs, &Error{Pos: p.pos(n), Code: code, Message: fmt.Sprintf(format, args...)})
}

// parseConfig parses one envoy ratelimit config file. It returns nil when
// the file has no usable domain; its errors are in the returned list.
func parseConfig(name string, content []byte) (*domainConfig, ErrorList) {
	p := &parser{file: name}
	doc, err := yamlnode.Decode(content)
	if err != nil {
		p.yamlError(err)
		if doc.Root == nil {
			return nil, p.errs
		}
	}
	if doc.Root == nil {
		p.errs = append(p.errs, &Error{Pos: Position{File: name}, Code: CodeMissingField, Message: "the file is empty: want a domain and its descriptors"})
		return nil, p.errs
	}
	if doc.Extra != nil {
		p.errorf(doc.Extra, CodeYAML, "only one YAML document per file is supported (envoy ratelimit reads the first one only)")
	}
	cfg := &domainConfig{file: name}
	root := doc.Root
	if root == nil || yamlnode.IsNull(root) || root.Kind != yaml.MappingNode {
		p.errorf(root, CodeBadValue, "want a mapping with the keys domain and descriptors")
		return nil, p.errs
	}
	var descs *yaml.Node
	for _, kv := range p.pairs(root) {
		switch kv.key.Value {
		case "domain":
			cfg.domainNode = kv.val
			cfg.domain, _ = p.str(kv.val, "domain")
		case "descriptors":
			descs = kv.val
		default:
			p.unknownField(kv.key, "the top level", rootFields)
		}
	}
	if cfg.domain == "" {
		if cfg.domainNode == nil {
			p.errorf(root, CodeMissingField, "no domain: envoy ratelimit needs one per file")
		} else {
			p.errorf(cfg.domainNode, CodeMissingField, "domain must not be empty")
		}
	}
	cfg.descriptors = p.descriptors(descs)
	if cfg.domain == "" {
		return nil, p.errs
	}
	return cfg, p.errs
}

// descriptors parses a descriptors list, reporting siblings envoy would
// file under one composite key.
func (p *parser) descriptors(n *yaml.Node) []*descriptor {
	if yamlnode.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, CodeBadValue, "descriptors: want a list of descriptors")
		return nil
	}
	var out []*descriptor
	seen := map[string]*descriptor{}
	for _, item := range n.Content {
		item = yamlnode.Resolve(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, CodeBadValue, "descriptors: each descriptor must be a mapping")
			continue
		}
		d := p.descriptor(item)
		if d.key == "" {
			continue
		}
		ck := d.compositeKey()
		if first, dup := seen[ck]; dup {
			if first.key == d.key {
				p.errorf(d.keyNode, CodeDuplicateDescriptor, "duplicate descriptor %s (first at line %d)", describe(d), first.keyNode.Line)
			} else {
				p.errorf(d.keyNode, CodeDuplicateDescriptor, "descriptor %s collides with %s at line %d: envoy files both under %q",
					describe(d), describe(first), first.keyNode.Line, ck)
			}
			continue
		}
		seen[ck] = d
		out = append(out, d)
	}
	return out
}

func (p *parser) descriptor(n *yaml.Node) *descriptor {
	d := &descriptor{flagNodes: map[string]*yaml.Node{}}
	var children *yaml.Node
	for _, kv := range p.pairs(n) {
		k, v := kv.key, kv.val
		switch k.Value {
		case "key":
			d.keyNode = v
			d.key, _ = p.str(v, "key")
		case "value":
			d.value, _ = p.str(v, "value")
		case "rate_limit":
			if !yamlnode.IsNull(v) {
				d.limit = p.rateLimit(v)
			}
		case "descriptors":
			children = v
		case "shadow_mode":
			d.shadow, d.flagNodes[k.Value] = p.boolean(v, "shadow_mode"), k
		case "detailed_metric":
			d.detailed, d.flagNodes[k.Value] = p.boolean(v, "detailed_metric"), k
		case "value_to_metric":
			d.valueToMet, d.flagNodes[k.Value] = p.boolean(v, "value_to_metric"), k
		case "share_threshold":
			d.share, d.flagNodes[k.Value] = p.boolean(v, "share_threshold"), k
		default:
			p.unknownField(k, "a descriptor", descriptorFields)
		}
	}
	if d.key == "" {
		if d.keyNode == nil {
			p.errorf(n, CodeMissingField, "descriptor has no key")
		} else {
			p.errorf(d.keyNode, CodeMissingField, "descriptor has an empty key")
		}
	}
	if d.share && !d.wildcard() {
		p.errorf(d.flagNodes["share_threshold"], CodeBadValue,
			"share_threshold: only for a wildcard value (ending with '*'), not on %s", describe(d))
	}
	d.children = p.descriptors(children)
	return d
}

func (p *parser) rateLimit(n *yaml.Node) *rateLimit {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, CodeBadValue, "rate_limit: want a mapping")
		return nil
	}
	rl := &rateLimit{node: n, multiplier: 1}
	for _, kv := range p.pairs(n) {
		k, v := kv.key, kv.val
		switch k.Value {
		case "unit":
			rl.unitNode = v
			s, _ := p.str(v, "unit")
			rl.unit = strings.ToUpper(s)
		case "requests_per_unit":
			rl.rpu, _ = p.uint32(v, "requests_per_unit")
			rl.rpuSet = true
		case "unit_multiplier":
			rl.multNode = v
			if m, ok := p.uint32(v, "unit_multiplier"); ok && m == 0 {
				p.errorf(v, CodeBadValue, "unit_multiplier: must be at least 1")
			} else if ok {
				rl.multiplier = m
			}
		case "unlimited":
			rl.unlimited = p.boolean(v, "unlimited")
		case "name":
			rl.name, _ = p.str(v, "name")
		case "replaces":
			rl.replaces = p.replaces(v, rl)
		default:
			p.unknownField(k, "rate_limit", rateLimitFields)
		}
	}
	validUnit := units[rl.unit]
	switch {
	case rl.unlimited && rl.unitNode != nil && validUnit:
		p.errorf(rl.unitNode, CodeBadValue, "unit: an unlimited rate limit has no unit (envoy ratelimit rejects it)")
	case rl.unlimited:
	case rl.unitNode == nil:
		p.errorf(n, CodeMissingField, "rate_limit has no unit (second, minute, hour, day, week, month or year)")
	case !validUnit:
		p.errorf(rl.unitNode, CodeBadValue, "unit: want second, minute, hour, day, week, month or year, got %q", rl.unitNode.Value)
	}
	for _, r := range rl.replaces {
		if rl.name != "" && r.name == rl.name {
			p.errorf(r.node, CodeBadValue, "replaces: a rate limit cannot replace itself (%q)", r.name)
		}
	}
	return rl
}

func (p *parser) replaces(n *yaml.Node, rl *rateLimit) []replaceRef {
	if yamlnode.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, CodeBadValue, "replaces: want a list of {name: ...}")
		return nil
	}
	var out []replaceRef
	for _, item := range n.Content {
		item = yamlnode.Resolve(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, CodeBadValue, "replaces: each entry must be a mapping {name: ...}")
			continue
		}
		var ref replaceRef
		for _, kv := range p.pairs(item) {
			if kv.key.Value != "name" {
				p.unknownField(kv.key, "a replaces entry", replacesFields)
				continue
			}
			ref.node = kv.val
			ref.name, _ = p.str(kv.val, "name")
		}
		if ref.name == "" {
			if ref.node == nil {
				ref.node = item
			}
			p.errorf(ref.node, CodeMissingField, "replaces: an entry needs a non-empty name")
			continue
		}
		out = append(out, ref)
	}
	return out
}

// yamlError turns a YAML syntax error into positioned errors (the YAML
// parser reports lines but not columns).
func (p *parser) yamlError(err error) {
	for _, pr := range yamlnode.Problems(err) {
		p.errs = append(p.errs, &Error{Pos: Position{File: p.file, Line: pr.Line, Column: pr.Column}, Code: CodeYAML, Message: pr.Message})
	}
}

func (p *parser) unknownField(key *yaml.Node, where string, known []string) {
	msg := fmt.Sprintf("unknown field %q in %s", key.Value, where)
	if s := suggest.Closest(key.Value, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	p.errorf(key, CodeUnknownField, "%s", msg)
}

type pair struct{ key, val *yaml.Node }

// pairs returns a mapping's key/value pairs with aliases resolved and merge
// keys (<<) expanded, as envoy's YAML library reads them, reporting
// duplicate and non-string keys.
func (p *parser) pairs(n *yaml.Node) []pair {
	kvs := yamlnode.Pairs(n, func(k *yaml.Node, duplicate bool) {
		if duplicate {
			p.errorf(k, CodeDuplicateField, "field %q given twice", k.Value)
			return
		}
		p.errorf(k, CodeBadValue, "keys must be strings")
	})
	out := make([]pair, len(kvs))
	for i, kv := range kvs {
		out[i] = pair{kv.Key, kv.Val}
	}
	return out
}

// str returns a scalar's text as envoy reads it into a string field: any
// scalar as written (value: 123 is "123"), null as "".
func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	if yamlnode.IsNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, CodeBadValue, "%s: want a string", field)
		return "", false
	}
	return n.Value, true
}

// yaml11Bools are the plain scalars envoy's YAML library (YAML 1.1) reads
// as booleans.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "true": true, "True": true, "TRUE": true,
	"on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "false": false, "False": false, "FALSE": false,
	"off": false, "Off": false, "OFF": false,
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	if yamlnode.IsNull(n) {
		return false
	}
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		if b, ok := yaml11Bools[n.Value]; ok {
			return b
		}
	}
	p.errorf(n, CodeBadValue, "%s: want true or false", field)
	return false
}

func (p *parser) uint32(n *yaml.Node, field string) (uint32, bool) {
	var v uint32
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, CodeBadValue, "%s: want a whole number from 0 to 4294967295, got %s", field, yamlnode.Describe(n))
		return 0, false
	}
	return v, true
}

// describe names a descriptor in a message: key "k" or key "k" value "v".
func describe(d *descriptor) string {
	if d.value == "" {
		return fmt.Sprintf("key %q", d.key)
	}
	return fmt.Sprintf("key %q value %q", d.key, d.value)
}
