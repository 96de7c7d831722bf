package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/internal/suggest"
	"github.com/ruled-dev/ruled/internal/yamlnode"
)

// Files is the parsed, not yet compiled, content of one or more rule files.
// The zero Files holds no rules: Compile turns it into an empty Set.
type Files struct {
	files   []*srcFile
	rules   []*rawRule
	plugins []PluginDecl
	errs    ErrorList

	ruleNames   map[string]Position
	pluginNames map[string]Position
	// badPlugins are the declarations under plugins: that have errors, by
	// name, so that a rule using one is told why it cannot (and not that
	// the plugin is unknown).
	badPlugins map[string]badDecl
}

// badDecl is a plugin declaration with errors: where it is and its first
// error's message.
type badDecl struct {
	pos    Position
	reason string
}

// rawRule is a rule as parsed, with the nodes Compile needs for positions.
type rawRule struct {
	file        *srcFile
	node        *yaml.Node // the rule's mapping
	name        string
	when        *yaml.Node
	subject     *yaml.Node
	plugin      string
	pluginNode  *yaml.Node
	config      *yaml.Node // mapping, or nil
	configBad   bool       // config was given but is not a mapping
	onError     OnError
	shadow      bool
	stop        bool
	noDenyCache bool
	lease       int64
	leaseNode   *yaml.Node
	exempt      bool
	replaces    []scalar // rule names, with their nodes for positions
	detailed    bool
}

// Plugins returns the third-party plugin declarations of every file, in
// file order.
func (f *Files) Plugins() []PluginDecl {
	return append([]PluginDecl(nil), f.plugins...)
}

// Err returns the problems Parse found, as an ErrorList, or nil.
func (f *Files) Err() error { return f.errs.Err() }

// Parse reads a rule file, or every *.yaml and *.yml file of a directory
// (not its subdirectories, not dot files) in name order, and checks their
// shape without compiling expressions or consulting plugins.
//
// Parse returns a nil Files only when path itself cannot be read. Otherwise
// it returns everything it could parse, along with an ErrorList of the
// problems found; Compile reports those again together with its own, so
// that Load shows every problem at once.
func Parse(path string) (*Files, error) {
	names, err := Sources(path)
	if err != nil {
		return nil, err
	}
	f := newFiles()
	for _, name := range names {
		f.parseFile(name)
	}
	return f, f.Err()
}

// Sources returns the rule files that path stands for, as Parse reads
// them: path itself when it is not a directory, else the directory's
// *.yaml and *.yml files (not its subdirectories, not dot files, not rule
// tests: see IsTestFile) in name order.
func Sources(path string) ([]string, error) {
	names, err := yamlnode.Files(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		names = slices.DeleteFunc(names, IsTestFile)
	}
	return names, nil
}

// IsTestFile reports whether a file holds rule tests (ruled test) rather
// than rules: its name ends in _test.yaml or _test.yml. A directory of
// rules skips them; named on its own, a file is read whatever its name.
func IsTestFile(name string) bool {
	base := filepath.Base(name)
	return strings.HasSuffix(base, "_test.yaml") || strings.HasSuffix(base, "_test.yml")
}

// Source is one rule file's text: read from disk, or made in memory (envoy
// ratelimit configs translated, or pushed over xDS).
type Source struct {
	// Name is the file's name as positions report it.
	Name string
	// Dir is the absolute directory that relative plugin paths resolve
	// against; empty for the working directory.
	Dir string
	// Content is the file's YAML.
	Content []byte
}

// ParseSources is Parse for rule files already in memory, in the order
// given.
func ParseSources(srcs []Source) (*Files, error) {
	f := newFiles()
	for _, src := range srcs {
		f.parseSource(src)
	}
	return f, f.Err()
}

func newFiles() *Files {
	return &Files{ruleNames: map[string]Position{}, pluginNames: map[string]Position{}, badPlugins: map[string]badDecl{}}
}

func (f *Files) parseFile(name string) {
	content, err := yamlnode.ReadFile(name)
	if err != nil {
		f.errs = append(f.errs, &Error{Pos: Position{File: name}, Code: CodeRead, Message: err.Error()})
		return
	}
	dir, err := filepath.Abs(filepath.Dir(name))
	if err != nil {
		f.errs = append(f.errs, &Error{Pos: Position{File: name}, Code: CodeRead, Message: err.Error()})
		return
	}
	f.parseSource(Source{Name: name, Dir: dir, Content: content})
}

func (f *Files) parseSource(src Source) {
	sf := newSrcFile(src.Name, src.Dir, src.Content)
	content := src.Content
	f.files = append(f.files, sf)
	p := &parser{Files: f, file: sf}

	doc, err := yamlnode.Decode(content)
	if err != nil {
		p.yamlError(err)
	}
	if doc.Extra != nil {
		p.errorf(doc.Extra, "", CodeYAML, "only one YAML document per file is supported")
	}
	root := doc.Root
	if yamlnode.IsNull(root) {
		return
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", CodeBadValue, "want a mapping with the keys plugins and rules")
		return
	}
	for _, kv := range p.pairs(root, "") {
		switch kv.key.Value {
		case "plugins":
			p.parsePlugins(kv.val)
		case "rules":
			p.parseRules(kv.val)
		default:
			if strings.HasPrefix(kv.key.Value, "x-") {
				continue // extension keys, a place for YAML anchors
			}
			p.unknownField(kv.key, "", topFields...)
		}
	}
}

type parser struct {
	*Files
	file *srcFile
}

func (p *parser) errorf(n *yaml.Node, rule, code, format string, args ...any) {
	p.errs = append(p.errs, &Error{Pos: p.file.pos(n), Rule: rule, Code: code, Message: fmt.Sprintf(format, args...)})
}

// yamlError turns a YAML syntax error into positioned Errors (yaml.v3
// reports lines but not columns).
func (p *parser) yamlError(err error) {
	for _, pr := range yamlnode.Problems(err) {
		p.errs = append(p.errs, &Error{Pos: Position{File: p.file.name, Line: pr.Line, Column: pr.Column}, Code: CodeYAML, Message: pr.Message})
	}
}

func (p *parser) unknownField(key *yaml.Node, rule string, known ...string) {
	msg := fmt.Sprintf("unknown field %q", key.Value)
	if s := suggest.Closest(key.Value, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	p.errorf(key, rule, CodeUnknownField, "%s", msg)
}

type pair struct{ key, val *yaml.Node }

// pairs returns a mapping's key/value pairs with aliases resolved and merge
// keys (<<) expanded, reporting duplicate and non-string keys.
func (p *parser) pairs(n *yaml.Node, rule string) []pair {
	kvs := yamlnode.Pairs(n, func(k *yaml.Node, duplicate bool) {
		if duplicate {
			p.errorf(k, rule, CodeDuplicateField, "field %q given twice", k.Value)
			return
		}
		p.errorf(k, rule, CodeBadValue, "keys must be strings")
	})
	out := make([]pair, len(kvs))
	for i, kv := range kvs {
		out[i] = pair{kv.Key, kv.Val}
	}
	return out
}

// str returns a scalar's value, reporting anything else.
func (p *parser) str(n *yaml.Node, rule, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode || yamlnode.IsNull(n) {
		p.errorf(n, rule, CodeBadValue, "%s: want a string", field)
		return "", false
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, rule, field string) bool {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		if b, err := strconv.ParseBool(strings.ToLower(n.Value)); err == nil {
			return b
		}
	}
	p.errorf(n, rule, CodeBadValue, "%s: want true or false, got %s", field, yamlnode.Describe(n))
	return false
}

// ruleList reads a list of rule names (checked against the rule set when
// it is compiled).
func (p *parser) ruleList(n *yaml.Node, rule, field string) []scalar {
	if yamlnode.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, rule, CodeBadValue, "%s: want a list of rule names", field)
		return nil
	}
	out := make([]scalar, 0, len(n.Content))
	for _, item := range n.Content {
		item = yamlnode.Resolve(item)
		if name, ok := p.str(item, rule, field); ok {
			if !validName(name) {
				p.errorf(item, rule, CodeBadName, "%s: %q is not a rule name", field, name)
				continue
			}
			out = append(out, scalar{file: p.file, node: item})
		}
	}
	return out
}

// MaxLease bounds a rule's lease size.
const MaxLease = 1_000_000

func (p *parser) leaseSize(n *yaml.Node, rule string) int64 {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		if v, err := strconv.ParseInt(n.Value, 10, 64); err == nil && v >= 0 && v <= MaxLease {
			return v
		}
	}
	p.errorf(n, rule, CodeBadValue, "lease: want a whole number of permits from 0 to %d, got %s", MaxLease, yamlnode.Describe(n))
	return 0
}

// topFields are the keys of a rule file's top-level mapping, besides the
// x- extension keys; ruleFields a rule's, pluginFields a plugin
// declaration's. docs/rule-file.schema.json must list the same (its test
// says so).
var topFields = []string{"plugins", "rules"}

var ruleFields = []string{"name", "when", "subject", "plugin", "config", "on_error", "shadow", "stop", "deny_cache", "lease",
	"exempt", "replaces", "detailed_metric"}

// exemptRefuses are the rule keys an exempt rule may not have: it admits
// what it matches without a plugin, so it has nothing to count or decide.
// docs/rule-file.schema.json says the same (its test checks).
var exemptRefuses = []string{"plugin", "config", "on_error", "shadow", "deny_cache", "lease"}

func (p *parser) parseRules(n *yaml.Node) {
	if yamlnode.IsNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "", CodeBadValue, "rules: want a list of rules")
		return
	}
	for _, item := range n.Content {
		item = yamlnode.Resolve(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, "", CodeBadValue, "rules: each rule must be a mapping")
			continue
		}
		p.parseRule(item)
	}
}

func (p *parser) parseRule(n *yaml.Node) {
	r := &rawRule{file: p.file, node: n, onError: OnErrorAllow}
	kvs := p.pairs(n, "")
	var nameNode *yaml.Node
	for _, kv := range kvs {
		if kv.key.Value == "name" {
			nameNode = kv.val
			if kv.val.Kind == yaml.ScalarNode && !yamlnode.IsNull(kv.val) {
				r.name = kv.val.Value
			}
		}
	}
	for _, kv := range kvs {
		k, v := kv.key, kv.val
		switch k.Value {
		case "name":
			if _, ok := p.str(v, r.name, "name"); ok && !validName(r.name) {
				p.errorf(v, r.name, CodeBadName,
					"name must be 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit")
			}
		case "when":
			if !yamlnode.IsNull(v) {
				if _, ok := p.str(v, r.name, "when"); ok {
					r.when = v
				}
			}
		case "subject":
			if !yamlnode.IsNull(v) {
				if _, ok := p.str(v, r.name, "subject"); ok {
					r.subject = v
				}
			}
		case "plugin":
			if s, ok := p.str(v, r.name, "plugin"); ok {
				r.plugin, r.pluginNode = s, v
			}
		case "config":
			switch {
			case yamlnode.IsNull(v):
			case v.Kind == yaml.MappingNode:
				r.config = v
			default:
				p.errorf(v, r.name, CodeBadValue, "config: want a mapping")
				r.configBad = true
			}
		case "on_error":
			if s, ok := p.str(v, r.name, "on_error"); ok {
				switch OnError(s) {
				case OnErrorAllow, OnErrorDeny, OnErrorLocal:
					r.onError = OnError(s)
				default:
					p.errorf(v, r.name, CodeBadOnError, "on_error: want allow, deny or local, got %q", s)
				}
			}
		case "shadow":
			r.shadow = p.boolean(v, r.name, "shadow")
		case "stop":
			r.stop = p.boolean(v, r.name, "stop")
		case "deny_cache":
			r.noDenyCache = !p.boolean(v, r.name, "deny_cache")
		case "lease":
			r.lease, r.leaseNode = p.leaseSize(v, r.name), v
		case "exempt":
			r.exempt = p.boolean(v, r.name, "exempt")
		case "replaces":
			r.replaces = p.ruleList(v, r.name, "replaces")
		case "detailed_metric":
			r.detailed = p.boolean(v, r.name, "detailed_metric")
		default:
			p.unknownField(k, r.name, ruleFields...)
		}
	}
	if nameNode == nil || yamlnode.IsNull(nameNode) {
		p.errorf(n, "", CodeMissingField, "rule has no name")
	} else if r.name != "" {
		if first, dup := p.ruleNames[r.name]; dup {
			where := first.String()
			if first.File == p.file.name {
				where = fmt.Sprintf("line %d", first.Line)
			}
			p.errorf(nameNode, r.name, CodeDuplicateRule, "duplicate rule name (first defined at %s)", where)
		} else {
			p.ruleNames[r.name] = p.file.pos(nameNode)
		}
	}
	switch {
	case r.exempt:
		// An exempt rule admits what it matches: it has nothing to count.
		for _, kv := range kvs {
			if slices.Contains(exemptRefuses, kv.key.Value) {
				p.errorf(kv.key, r.name, CodeBadValue, "%s: an exempt rule admits what it matches without a plugin; remove %s", kv.key.Value, kv.key.Value)
			}
		}
	default:
		if r.subject == nil {
			p.errorf(n, r.name, CodeMissingField, "subject is required")
		}
		if r.pluginNode == nil {
			p.errorf(n, r.name, CodeMissingField, "plugin is required")
		}
	}
	p.rules = append(p.rules, r)
}

var pluginFields = []string{"wasm", "process", "sha256"}

func (p *parser) parsePlugins(n *yaml.Node) {
	if yamlnode.IsNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "", CodeBadValue, "plugins: want a mapping of plugin names to declarations")
		return
	}
	for _, kv := range p.pairs(n, "") {
		name := kv.key.Value
		d := PluginDecl{Name: name, Pos: p.file.pos(kv.key)}
		ok := true
		before := len(p.errs)
		if !validName(name) {
			p.errorf(kv.key, "", CodeBadName,
				"plugin name %q must be 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit", name)
			ok = false
		}
		if first, dup := p.pluginNames[name]; dup {
			p.errorf(kv.key, "", CodeDuplicatePlugin, "plugin %q declared twice (first at %s)", name, first)
			ok = false
		}
		v := kv.val
		if v.Kind != yaml.MappingNode {
			p.errorf(v, "", CodeBadPlugin, "plugin %q: want a mapping with wasm or process, and optionally sha256", name)
			p.badPlugin(d, before)
			continue
		}
		for _, f := range p.pairs(v, "") {
			field := f.key.Value
			if !slices.Contains(pluginFields, field) {
				p.unknownField(f.key, "", pluginFields...)
				ok = false
				continue
			}
			s, isStr := p.str(f.val, "", "plugin "+strconv.Quote(name)+": "+field)
			if !isStr {
				ok = false
				continue
			}
			switch field {
			case "wasm":
				d.Wasm = p.absPath(s)
			case "process":
				d.Process = p.absPath(s)
			case "sha256":
				d.SHA256 = strings.ToLower(s)
				if !isHex64(d.SHA256) {
					p.errorf(f.val, "", CodeBadPlugin, "plugin %q: sha256 must be 64 hexadecimal digits", name)
					ok = false
				}
			}
		}
		if (d.Wasm == "") == (d.Process == "") {
			p.errorf(v, "", CodeBadPlugin, "plugin %q: set exactly one of wasm and process", name)
			ok = false
		}
		if ok {
			p.pluginNames[name] = d.Pos
			p.plugins = append(p.plugins, d)
		} else {
			p.badPlugin(d, before)
		}
	}
}

// badPlugin records that the declaration d has errors, the first of which
// is p.errs[first], unless a valid declaration of the same name came first.
func (p *parser) badPlugin(d PluginDecl, first int) {
	if _, declared := p.pluginNames[d.Name]; declared || first >= len(p.errs) {
		return
	}
	if _, seen := p.badPlugins[d.Name]; seen {
		return
	}
	reason := strings.TrimPrefix(p.errs[first].Message, "plugin "+strconv.Quote(d.Name)+": ")
	p.badPlugins[d.Name] = badDecl{pos: d.Pos, reason: reason}
}

func (p *parser) absPath(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(p.file.dir, s)
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validName reports whether s matches [a-z0-9][a-z0-9_-]{0,62}.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}
