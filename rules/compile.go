package rules

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/internal/suggest"
	"github.com/ruled-dev/ruled/internal/yamlnode"

	"github.com/ruled-dev/ruled/sdk"
)

// Load parses the rule file or directory at path and compiles it: Parse
// followed by Compile, with every problem of both reported in one
// ErrorList.
func Load(path string, cat Catalog) (*Set, error) {
	f, err := Parse(path)
	if f == nil {
		return nil, err
	}
	return Compile(f, cat)
}

// Compile compiles every expression of f and has each rule's plugin,
// resolved through cat, validate the rule's static config. It reports the
// problems Parse found in f together with its own, as an ErrorList, and
// returns a Set only when there are none.
//
// A config with dynamic values ("=expression") cannot be validated as a
// whole at load: its expressions are compiled and type-checked, and the
// plugin sees the complete config on first use, per distinct set of
// values. A config the plugin rejects then is that request's Selection.Err.
func Compile(f *Files, cat Catalog) (*Set, error) {
	c := &compiler{files: f, cat: cat, funcs: newFuncs(), errs: slices.Clone(f.errs), cache: map[exprKey]compiled{}}
	c.opts = c.funcs.options()
	s := &Set{plugins: f.Plugins(), funcs: c.funcs}
	for _, rr := range f.rules {
		if r := c.rule(rr); r != nil {
			s.rules = append(s.rules, r)
		}
	}
	c.replaces(f.rules)
	if err := c.errs.Err(); err != nil {
		return nil, err
	}
	s.init()
	return s, nil
}

type compiler struct {
	files *Files
	cat   Catalog
	funcs *funcs
	opts  []expr.Option
	cache map[exprKey]compiled
	errs  ErrorList
}

func (c *compiler) errorf(pos Position, rule, code, format string, args ...any) {
	c.errs = append(c.errs, &Error{Pos: pos, Rule: rule, Code: code, Message: fmt.Sprintf(format, args...)})
}

func (c *compiler) rule(rr *rawRule) *Rule {
	r := &Rule{
		Name:      rr.name,
		Plugin:    rr.plugin,
		OnError:   rr.onError,
		Shadow:    rr.shadow,
		Stop:      rr.stop,
		DenyCache: !rr.noDenyCache,
		Lease:     rr.lease,
		Exempt:    rr.exempt,
		Detailed:  rr.detailed,
		Pos:       rr.file.pos(rr.node),
	}
	for _, n := range rr.replaces {
		r.Replaces = append(r.Replaces, n.text())
	}
	if r.Exempt {
		r.Stop = true // it admits what it matches: later rules do not apply
	}
	ok := true
	if rr.when != nil {
		src := scalar{file: rr.file, node: rr.when}
		r.When = src.text()
		prog, err := c.compileExpr(src, rr.name, "when", kindBool)
		if err != nil {
			ok = false
		} else {
			r.when.src = src
			r.when.guards, r.when.full = extractGuards(prog.Node())
			if !r.when.full {
				r.when.prog = prog
			}
		}
	} else {
		r.when.full = true
	}
	if rr.subject != nil {
		src := scalar{file: rr.file, node: rr.subject}
		r.Subject = src.text()
		prog, err := c.compileExpr(src, rr.name, "subject", kindString)
		if err != nil {
			ok = false
		} else {
			r.subject.src = src
			if fv, fast := asFastValue(prog.Node(), true); fast {
				r.subject.fast = fv
			} else {
				r.subject.prog = prog
			}
		}
	} else if !r.Exempt {
		ok = false
	}
	if r.Exempt {
		if !ok {
			return nil
		}
		return r
	}

	if rr.pluginNode != nil {
		alg, found := lookup(c.cat, rr.plugin)
		switch {
		case found:
			r.alg = alg
			r.Traits = alg.Info().Traits
			r.DenyCache = r.DenyCache && r.Traits.FirmDenials
			if r.Lease > 0 && !r.Traits.Leasable {
				c.errorf(rr.file.pos(rr.leaseNode), rr.name, CodeBadValue,
					"lease: plugin %q does not declare leasable grants (a lease would change what it decides); remove lease", rr.plugin)
				ok = false
			}
		case c.files.pluginNames[rr.plugin] != Position{}:
			c.errorf(rr.file.pos(rr.pluginNode), rr.name, CodeUnknownPlugin,
				"plugin %q is declared at %s but was not loaded", rr.plugin, c.files.pluginNames[rr.plugin])
			ok = false
		case c.files.badPlugins[rr.plugin] != badDecl{}:
			bad := c.files.badPlugins[rr.plugin]
			c.errorf(rr.file.pos(rr.pluginNode), rr.name, CodeUnknownPlugin,
				"plugin %q cannot be used: its declaration at %s is invalid: %s", rr.plugin, bad.pos, bad.reason)
			ok = false
		default:
			msg := fmt.Sprintf("unknown plugin %q", rr.plugin)
			if s := suggest.Closest(rr.plugin, c.pluginNames()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += " (declare third-party plugins under plugins:)"
			}
			c.errorf(rr.file.pos(rr.pluginNode), rr.name, CodeUnknownPlugin, "%s", msg)
			ok = false
		}
	} else {
		ok = false
	}

	raw, slots, cfgOK := c.config(rr)
	r.raw = map[string]any{}
	if rr.config != nil {
		r.raw, _ = written(rr.config).(map[string]any)
	}
	if !cfgOK || rr.configBad {
		ok = false
	}
	// The plugin checks the config even when other parts of the rule are
	// wrong, so that one load reports every problem.
	if r.alg != nil && cfgOK && !rr.configBad {
		if len(slots) > 0 {
			r.dyn = newDynConfig(raw, slots, rr.file.pos(rr.config))
		} else {
			cfg, err := configure(r.alg, cloneMap(raw))
			if err != nil {
				c.configErrors(rr, r.alg, err)
				ok = false
			}
			r.config = cfg
		}
	}
	if !ok {
		return nil
	}
	return r
}

// replaces checks that every rule a rule replaces exists and is not the
// rule itself.
func (c *compiler) replaces(rs []*rawRule) {
	for _, rr := range rs {
		for _, n := range rr.replaces {
			name := n.text()
			switch _, found := c.files.ruleNames[name]; {
			case name == rr.name:
				c.errorf(rr.file.pos(n.node), rr.name, CodeBadValue, "replaces: a rule cannot replace itself")
			case !found:
				msg := fmt.Sprintf("replaces: no rule named %q", name)
				if s := suggest.Closest(name, slices.Sorted(maps.Keys(c.files.ruleNames))); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				c.errorf(rr.file.pos(n.node), rr.name, CodeBadValue, "%s", msg)
			}
		}
	}
}

// pluginNames returns the names a rule's plugin may take: the catalog's,
// when it lists them (NameLister), and those declared under plugins:.
func (c *compiler) pluginNames() []string {
	var names []string
	if l, ok := c.cat.(NameLister); ok {
		names = l.Names()
	}
	for name := range c.files.pluginNames {
		names = append(names, name)
	}
	slices.Sort(names) // the same suggestion for the same files, whatever the map order
	return names
}

func lookup(cat Catalog, name string) (sdk.Algorithm, bool) {
	if cat == nil {
		return nil, false
	}
	alg, ok := cat.Lookup(name)
	return alg, ok && alg != nil
}

// compileExpr compiles one expression and reports its problems with their
// positions in the file. Identical expressions of the same kind (every
// `subject: request.ip`, say) are compiled once per Compile; programs are
// immutable and shared.
func (c *compiler) compileExpr(src scalar, rule, what string, kind exprKind) (*vm.Program, error) {
	text := src.text()
	if strings.TrimSpace(text) == "" {
		c.errorf(src.file.pos(src.node), rule, CodeExpr, "%s: empty expression", what)
		return nil, errors.New("empty expression")
	}
	key := exprKey{kind, text}
	res, seen := c.cache[key]
	if !seen {
		res = c.compileText(text, kind)
		c.cache[key] = res
	}
	if res.err != nil {
		pos := src.file.pos(src.node)
		if res.at >= 0 {
			pos = src.pos(res.at)
		}
		msg := res.err.Error()
		if b := res.brackets; b != nil {
			msg = b.message(src.pos(b.openAt))
		}
		c.errorf(pos, rule, CodeExpr, "%s: %s", what, msg)
		return nil, res.err
	}
	return res.prog, nil
}

// exprKind is what an expression must produce.
type exprKind uint8

const (
	kindBool   exprKind = iota // when
	kindString                 // subject
	kindAny                    // dynamic config value
)

type exprKey struct {
	kind exprKind
	text string
}

type compiled struct {
	prog *vm.Program
	err  error
	at   int // character offset of the error in the expression, or -1
	// brackets, when set, is the bracket mistake behind err, a syntax
	// error: its message replaces err's in the rule's error (at is its at).
	brackets *bracketError
}

func (c *compiler) compileText(text string, kind exprKind) compiled {
	var opt expr.Option
	switch kind {
	case kindBool:
		opt = expr.AsBool()
	case kindString:
		opt = expr.AsKind(reflect.String)
	default:
		opt = expr.AsAny()
	}
	prog, err := expr.Compile(text, append(slices.Clip(c.opts), opt)...)
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			if b := findBracketError(text); b != nil {
				return compiled{err: errors.New(cleanExprMessage(fe.Message)), at: b.at, brackets: b}
			}
			return compiled{err: errors.New(cleanExprMessage(fe.Message)), at: fe.From}
		}
		return compiled{err: err, at: -1}
	}
	if n, err := checkLiterals(prog.Node()); err != nil {
		return compiled{err: err, at: n.Location().From}
	}
	if kind == kindAny {
		if t := prog.Node().Type(); t != nil && !dynamicKindOK(t) {
			return compiled{err: fmt.Errorf("want a number, string, boolean or duration, got %s", t), at: 0}
		}
	}
	return compiled{prog: prog}
}

var exprTypeNames = strings.NewReplacer(
	"type *rules.Request", "request",
	"type rules.Request", "request",
	"rules.Request", "request",
	"*rules.env", "the environment",
	"rules.env", "the environment",
)

// cleanExprMessage replaces Go type names in expr's messages with the
// names rule writers use.
func cleanExprMessage(msg string) string { return exprTypeNames.Replace(msg) }

// dynSlot is one dynamic config value: an expression evaluated per request.
type dynSlot struct {
	key  string     // its path in the config, for messages: "burst", "also[0].limit"
	fast *fastValue // computed in Go, or
	prog *vm.Program
	src  scalar
}

// config converts a rule's config node to the raw map its plugin receives.
// Dynamic values ("=expression") are compiled and left in the map as
// *dynSlot placeholders, also returned in order.
func (c *compiler) config(rr *rawRule) (map[string]any, []*dynSlot, bool) {
	raw := map[string]any{}
	if rr.config == nil {
		return raw, nil, true
	}
	var slots []*dynSlot
	ok := true
	p := &parser{Files: &Files{}, file: rr.file}
	var conv func(n *yaml.Node, path string) any
	conv = func(n *yaml.Node, path string) any {
		n = yamlnode.Resolve(n)
		switch n.Kind {
		case yaml.MappingNode:
			m := map[string]any{}
			for _, kv := range p.pairs(n, rr.name) {
				m[kv.key.Value] = conv(kv.val, joinPath(path, kv.key.Value))
			}
			return m
		case yaml.SequenceNode:
			l := make([]any, len(n.Content))
			for i, e := range n.Content {
				l[i] = conv(e, fmt.Sprintf("%s[%d]", path, i))
			}
			return l
		}
		if n.ShortTag() == "!!str" {
			if strings.HasPrefix(n.Value, "==") {
				return n.Value[1:] // escaped literal "=..."
			}
			if strings.HasPrefix(n.Value, "=") {
				slot := &dynSlot{key: path, src: scalar{file: rr.file, node: n, skip: 1}}
				prog, err := c.compileExpr(slot.src, rr.name, "config."+path, kindAny)
				if err != nil {
					ok = false
					return nil
				}
				if fv, fast := asFastValue(prog.Node(), false); fast {
					slot.fast = fv
				} else {
					slot.prog = prog
				}
				slots = append(slots, slot)
				return slot
			}
			return n.Value
		}
		v, err := scalarValue(n)
		if err != nil {
			c.errorf(rr.file.pos(n), rr.name, CodeBadValue, "config.%s: %v", path, err)
			ok = false
		}
		return v
	}
	m, _ := conv(rr.config, "").(map[string]any)
	c.errs = append(c.errs, p.errs...)
	if len(p.errs) > 0 {
		ok = false
	}
	return m, slots, ok
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func dynamicKindOK(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String, reflect.Bool, reflect.Interface:
		return true
	}
	return false
}

// written returns a config node as written in the file, with dynamic
// values as their "=expression" strings, for Rule.RawConfig.
func written(n *yaml.Node) any {
	n = yamlnode.Resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := yamlnode.Resolve(n.Content[i])
			if k.ShortTag() == "!!merge" {
				for _, src := range yamlnode.MergeSources(yamlnode.Resolve(n.Content[i+1])) {
					for key, v := range written(src).(map[string]any) {
						if _, set := m[key]; !set {
							m[key] = v
						}
					}
				}
				continue
			}
			m[k.Value] = written(n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, e := range n.Content {
			l[i] = written(e)
		}
		return l
	}
	v, err := scalarValue(n)
	if err != nil {
		return n.Value
	}
	return v
}

// scalarValue decodes a config scalar: numbers, booleans and null by their
// YAML type, everything else as the string written.
func scalarValue(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!int", "!!float", "!!bool":
		var v any
		err := n.Decode(&v)
		return v, err
	}
	return n.Value, nil
}

// configure calls the plugin's Configure, turning a panic into an error.
func configure(alg sdk.Algorithm, raw map[string]any) (cfg sdk.Config, err error) {
	defer func() {
		if p := recover(); p != nil {
			cfg, err = nil, fmt.Errorf("plugin %s panicked in Configure: %v", alg.Info().Name, p)
		}
	}()
	return alg.Configure(raw)
}

var configKey = regexp.MustCompile(`^([A-Za-z0-9_\-]+(?:\[\d+\])*(?:\.[A-Za-z0-9_\-]+(?:\[\d+\])*)*): `)

// configErrors reports the errors of a plugin's Configure, one Error each,
// positioned at the config key a message names ("window: ...") when there
// is one, else at the config mapping. A message may begin with the plugin's
// name ("leaky: per: ...", as an error wrapped with the name reads); the
// name is dropped, so that the key behind it positions the error.
func (c *compiler) configErrors(rr *rawRule, alg sdk.Algorithm, err error) {
	names := []string{rr.plugin, alg.Info().Name}
	for _, msg := range leafMessages(err) {
		msg = withoutPluginName(msg, names)
		pos := rr.file.pos(rr.config)
		if rr.config == nil {
			pos = rr.file.pos(rr.node)
		}
		if m := configKey.FindStringSubmatch(msg); m != nil {
			if k, v := locate(rr.config, m[1]); k != nil {
				if strings.HasSuffix(msg, "unknown field") {
					pos = rr.file.pos(k)
				} else {
					pos = rr.file.pos(v)
				}
			}
		}
		c.errorf(pos, rr.name, CodeBadConfig, "config: %s", msg)
	}
}

// withoutPluginName returns msg without a leading "<name>: " of one of
// names when what follows names a config key; else msg itself (a plugin
// whose key is called as the plugin says "limit: must be ...").
func withoutPluginName(msg string, names []string) string {
	for _, name := range names {
		if rest, ok := strings.CutPrefix(msg, name+": "); ok && name != "" && configKey.MatchString(rest) {
			return rest
		}
	}
	return msg
}

// leafMessages flattens errors.Join trees (as sdk.ConfigReader returns)
// into one message per problem.
func leafMessages(err error) []string {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range u.Unwrap() {
			out = append(out, leafMessages(e)...)
		}
		return out
	}
	var out []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// locate finds the key and value nodes of a config path such as "window"
// or "also[1].limit"; it returns the deepest it can find.
func locate(n *yaml.Node, path string) (key, val *yaml.Node) {
	cur := yamlnode.Resolve(n)
	for part := range strings.SplitSeq(path, ".") {
		name, idx, _ := strings.Cut(part, "[")
		var found bool
		for i := 0; cur != nil && cur.Kind == yaml.MappingNode && i+1 < len(cur.Content); i += 2 {
			if yamlnode.Resolve(cur.Content[i]).Value == name {
				key, val, found = cur.Content[i], yamlnode.Resolve(cur.Content[i+1]), true
				break
			}
		}
		if !found {
			return key, val
		}
		cur = val
		for idx != "" {
			var num string
			num, idx, _ = strings.Cut(idx, "]")
			idx = strings.TrimPrefix(idx, "[")
			i, err := strconv.Atoi(num)
			if err != nil || cur.Kind != yaml.SequenceNode || i >= len(cur.Content) {
				return key, val
			}
			val = yamlnode.Resolve(cur.Content[i])
			cur = val
		}
	}
	return key, val
}

// dynamicValue checks the type of an evaluated dynamic config value and
// appends its encoding to the cache key.
func dynamicValue(v any, key []byte) (any, []byte, error) {
	switch t := v.(type) {
	case int:
		return v, strconv.AppendInt(append(key, 'i'), int64(t), 10), nil
	case int64:
		return v, strconv.AppendInt(append(key, 'i'), t, 10), nil
	case int32:
		return int64(t), strconv.AppendInt(append(key, 'i'), int64(t), 10), nil
	case uint:
		return v, strconv.AppendUint(append(key, 'u'), uint64(t), 10), nil
	case uint64:
		return v, strconv.AppendUint(append(key, 'u'), t, 10), nil
	case float64:
		return v, strconv.AppendFloat(append(key, 'f'), t, 'g', -1, 64), nil
	case string:
		key = strconv.AppendInt(append(key, 's'), int64(len(t)), 10)
		return v, append(append(key, ':'), t...), nil
	case bool:
		if t {
			return v, append(key, 't'), nil
		}
		return v, append(key, 'b'), nil
	case time.Duration:
		return v, strconv.AppendInt(append(key, 'd'), int64(t), 10), nil
	}
	return nil, key, fmt.Errorf("want a number, string, boolean or duration, got %T", v)
}
