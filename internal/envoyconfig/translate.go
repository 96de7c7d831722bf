// Package envoyconfig translates envoyproxy/ratelimit config files into
// ruled rule files that decide the same (`ruled import envoy`).
//
// An envoy ratelimit config file holds one domain and a tree of
// descriptors. For a request descriptor (its entries in order), envoy walks
// the tree one entry per level, taking at each level the node whose key and
// value equal the entry's, else the first wildcard node (value "prefix*")
// of that key whose prefix the value starts with, else the value-less node
// of that key; the limit applies when the node reached by the last entry
// has one. Its counter is per domain and entry values, so a value-less key
// counts each value apart.
//
// ruled's Envoy rate limit service maps a descriptor to one check whose
// attrs hold every entry (attrs[key] = value), attrs["domain"],
// attrs["descriptor_keys"] (the keys in order, joined with ",") and, when
// the descriptor carries Envoy's limit override, attrs["limit_override"]
// and attrs["limit_override_window"]. Every rule that matches a check
// applies, so the translation gives each rate limit of the tree one rule
// whose when holds exactly for the descriptors envoy would limit by it:
// it pins the domain and the key sequence, and at each level says what
// selects the node among its siblings (an exact value; a prefix, minus the
// siblings' exact values and earlier wildcards; for a value-less key, none
// of the siblings' values or prefixes). The when conditions of one domain
// are thus mutually exclusive, as envoy's most-specific-match is. The
// subject is the descriptor's entries as key=value, joined with "/", so
// that each distinct descriptor has its own counter, as in envoy.
//
// The format and the differences from envoy are documented in
// docs/rules.md, "Importing Envoy ratelimit configs".
package envoyconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/rules"
)

// Source is one envoy ratelimit config file.
type Source struct {
	Name    string // as reported in positions and in the generated file's header
	Content []byte
}

// File is one generated rule file: the rules of one domain.
type File struct {
	Name    string // base name, from the domain: "messaging.yaml"
	Domain  string
	Source  string // the Source it was translated from
	Rules   int    // how many rules it holds
	Content []byte
	// Stats names, by rule, the stats envoy ratelimit keeps for the rate
	// limit the rule stands for (envoystats).
	Stats map[string]StatKey
}

// StatKey is how envoy ratelimit names the stats of one rate limit:
// ratelimit.service.rate_limit.KEY.total_hits and so on.
type StatKey struct {
	// Key is the descriptor's path in the config: the domain, then each
	// level's key, or key_value where the config names a value.
	Key string
	// FromRequest is set when the key is made from the request's entries
	// instead (domain, then key_value for each): a detailed_metric limit,
	// or the limit override of the domain.
	FromRequest bool
}

// The attrs keys that ruled's Envoy rate limit service sets besides the
// descriptor's entries; an entry cannot have these keys (docs/http.md).
const (
	attrDomain         = "domain"
	attrKeys           = "descriptor_keys"
	attrOverride       = "limit_override"
	attrOverrideWindow = "limit_override_window"
)

var reservedKeys = []string{attrDomain, attrKeys, attrOverride, attrOverrideWindow}

// unitDurations are envoy ratelimit's windows (utils.UnitToDivider):
// fixed, aligned to the Unix epoch; a month is 30 days, a year 365.
var unitDurations = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

// maxNameLen is the longest rule name ruled takes.
const maxNameLen = 63

// Options are the choices envoy ratelimit leaves to its settings.
type Options struct {
	// MergeDomains merges configs of one domain, as envoy ratelimit's
	// MERGE_DOMAIN_CONFIG does: the later config's top-level descriptors
	// join the first's (a descriptor of both is an error). Without it a
	// domain configured twice is an error.
	MergeDomains bool
}

// Translate turns envoy ratelimit config files into rule files, one per
// domain, in the order of srcs. Every problem is reported at once, as an
// ErrorList; the notes remark on what has no effect or is approximated.
// When the error is not nil, the files are nil.
func Translate(srcs []Source, opts Options) ([]File, []Note, error) {
	g, ts := translate(srcs, opts)
	if err := g.errs.Err(); err != nil {
		return nil, nil, err
	}
	files := make([]File, len(ts))
	for i, t := range ts {
		files[i] = t.file
	}
	return files, g.notes, nil
}

// translate parses and translates srcs, the errors and notes in g.
func translate(srcs []Source, opts Options) (*generator, []*translation) {
	g := &generator{names: map[string]bool{}, fileNames: map[string]bool{}, override: map[string]string{}}
	var cfgs []*domainConfig
	domains := map[string]*domainConfig{}
	for _, src := range srcs {
		cfg, errs := parseConfig(src.Name, src.Content)
		g.errs = append(g.errs, errs...)
		if cfg == nil {
			continue
		}
		if first, dup := domains[cfg.domain]; dup && opts.MergeDomains {
			g.errs = append(g.errs, merge(first, cfg)...)
			continue
		} else if dup {
			g.errs = append(g.errs, &Error{Pos: pos(cfg.file, cfg.domainNode), Code: CodeDuplicateDomain,
				Message: fmt.Sprintf("domain %q is also configured in %s", cfg.domain, pos(first.file, first.domainNode))})
			continue
		}
		domains[cfg.domain] = cfg
		cfgs = append(cfgs, cfg)
	}
	// Rule names are taken in file order, the override rules first, so
	// that a descriptor never takes the plain name of an override rule.
	for _, cfg := range cfgs {
		g.override[cfg.domain] = g.takeName(sanitize(cfg.domain)+"-limit-override", cfg.domain+" limit override")
	}
	ts := make([]*translation, len(cfgs))
	for i, cfg := range cfgs {
		ts[i] = g.domain(cfg)
	}
	return g, ts
}

// merge adds next's top-level descriptors to those of into, a config of
// the same domain, as envoy ratelimit does under MERGE_DOMAIN_CONFIG; it
// returns an error for each descriptor both have.
func merge(into, next *domainConfig) ErrorList {
	var errs ErrorList
	have := map[string]*descriptor{}
	for _, d := range into.descriptors {
		have[d.compositeKey()] = d
	}
	for _, d := range next.descriptors {
		if first, dup := have[d.compositeKey()]; dup {
			errs = append(errs, &Error{Pos: pos(next.file, d.keyNode), Code: CodeDuplicateDescriptor,
				Message: fmt.Sprintf("descriptor %s of domain %q is also configured in %s", describe(d), next.domain, pos(into.file, first.keyNode))})
			continue
		}
		have[d.compositeKey()] = d
		into.descriptors = append(into.descriptors, d)
	}
	return errs
}

func pos(file string, n *yaml.Node) Position {
	if n == nil {
		return Position{File: file}
	}
	return Position{File: file, Line: n.Line, Column: n.Column}
}

// generator holds what the translation of all domains shares.
type generator struct {
	names     map[string]bool // rule names taken, across all files
	fileNames map[string]bool
	override  map[string]string // domain → its override rule's name
	errs      ErrorList
	notes     []Note
}

// rule is one generated rule.
type rule struct {
	name     string
	when     []string // conjuncts
	subject  string   // expression; "" for none
	limit    *rateLimit
	window   time.Duration
	shadow   bool
	detailed bool
	replaces []string
	comments []string // above the rule
	statKey  string   // envoy ratelimit's stats key (envoyPath)
}

// translation is the translation of one domain.
type translation struct {
	g     *generator
	cfg   *domainConfig
	rules []*rule
	file  File
}

func (g *generator) domain(cfg *domainConfig) *translation {
	t := &translation{g: g, cfg: cfg}
	t.walk(cfg.descriptors, nil, nil, false)
	t.resolveReplaces()
	name := sanitize(cfg.domain)
	if name == "" {
		name = "domain"
	}
	if rules.IsTestFile(name + ".yaml") {
		// A rule directory skips *_test.yaml files: they hold rule tests.
		name += "-rules"
	}
	if g.fileNames[name] {
		name += "-" + shortHash(cfg.domain)
	}
	g.fileNames[name] = true
	stats := map[string]StatKey{g.override[cfg.domain]: {Key: cfg.domain, FromRequest: true}}
	for _, r := range t.rules {
		stats[r.name] = StatKey{Key: r.statKey, FromRequest: r.detailed}
	}
	t.file = File{Name: name + ".yaml", Domain: cfg.domain, Source: cfg.file, Rules: len(t.rules) + 1, Content: t.render(), Stats: stats}
	return t
}

// walk translates the descriptors of one level, sibs, below path (whose
// selection conditions are conds). bad is set below a descriptor that
// cannot be translated: its subtree is checked, but yields no rules.
func (t *translation) walk(sibs []*descriptor, path []*descriptor, conds []conj, bad bool) {
	for _, d := range sibs {
		p := append(slices.Clone(path), d)
		dbad := bad || !t.check(d, path)
		cs, reachable := selectCond(d, sibs)
		if !reachable {
			if !dbad {
				t.note(d.keyNode, "descriptor %s is never selected: the wildcard value %q of a sibling takes every value of key %q (no rule)",
					envoyPath(t.cfg.domain, p), "*", d.key)
			}
			dbad = true
		}
		all := append(slices.Clone(conds), cs...)
		if !dbad {
			if d.limit != nil {
				t.rule(p, all)
			} else {
				for _, f := range []string{"shadow_mode", "detailed_metric"} {
					if n := d.flagNodes[f]; n != nil {
						t.note(n, "%s has no effect on a descriptor without rate_limit (envoy ignores it too)", f)
					}
				}
			}
		}
		t.walk(d.children, p, all, dbad)
	}
}

// check reports what of d, below path, ruled cannot express.
func (t *translation) check(d *descriptor, path []*descriptor) bool {
	if d.key == "" {
		return false // reported by the parser
	}
	ok := true
	if slices.Contains(reservedKeys, d.key) {
		t.errorf(d.keyNode, CodeUntranslatable, "key %q: ruled's Envoy rate limit service reserves attrs[%q] (%s), so a rule cannot read an entry with this key",
			d.key, d.key, strings.Join(reservedKeys, ", "))
		ok = false
	}
	if strings.Contains(d.key, ",") {
		t.errorf(d.keyNode, CodeUntranslatable, "key %q: a key with ',' cannot be told apart in attrs[%q], the keys joined with ','", d.key, attrKeys)
		ok = false
	}
	for _, a := range path {
		if a.key == d.key {
			t.errorf(d.keyNode, CodeUntranslatable, "key %q is also the key of the enclosing descriptor at line %d: attrs hold one value per key, so a rule cannot tell the two entries apart",
				d.key, a.keyNode.Line)
			ok = false
			break
		}
	}
	if rl := d.limit; rl != nil && !rl.unlimited && units[rl.unit] {
		if unit := unitDurations[rl.unit]; int64(rl.multiplier) > math.MaxInt64/int64(unit) {
			t.errorf(rl.multNode, CodeUntranslatable, "unit_multiplier: %d × %s is longer than ruled's longest window (about 292 years)",
				rl.multiplier, strings.ToLower(rl.unit))
			ok = false
		}
	}
	return ok
}

// conj is one conjunct of a when.
type conj struct {
	text  string
	guard bool // a plain comparison, which ruled decides without its expression VM
}

// selectCond is what selects d among its siblings at one level, as
// conjuncts over attrs[d.key] (the caller pins the key sequence, so that
// attrs[d.key] is the entry's value). It reports false when no value
// selects d.
//
// Envoy takes the sibling with the entry's key and value first, then the
// first wildcard of that key (in the order written) whose prefix the
// value starts with, then the value-less sibling of that key.
func selectCond(d *descriptor, sibs []*descriptor) ([]conj, bool) {
	a := attrRef(d.key)
	var exact []string                // the other siblings' values, for the same key
	var earlier, others []*descriptor // wildcards of the same key before d; all other wildcards
	before := true
	for _, s := range sibs {
		if s == d {
			before = false
			continue
		}
		if s.key != d.key || s.value == "" {
			continue
		}
		exact = append(exact, s.value)
		if s.wildcard() {
			others = append(others, s)
			if before {
				earlier = append(earlier, s)
			}
		}
	}
	notStarts := func(p string) conj {
		return conj{text: fmt.Sprintf("not (%s startsWith %s)", a, strconv.Quote(p))}
	}
	switch {
	case d.value == "":
		// Neither another value nor a prefix. Only prefixes not
		// extending another matter, and only values none of them covers.
		prefixes := minimalPrefixes(others)
		if slices.Contains(prefixes, "") {
			return nil, false
		}
		conds := notIn(a, without(exact, prefixes))
		for _, p := range prefixes {
			conds = append(conds, notStarts(p))
		}
		return conds, true
	case !d.wildcard():
		return []conj{{text: a + " == " + strconv.Quote(d.value), guard: true}}, true
	}
	p := d.prefix()
	for _, e := range earlier {
		if strings.HasPrefix(p, e.prefix()) {
			// e catches every value d's prefix would: only the value
			// written, "prefix*" itself, reaches d.
			return []conj{{text: a + " == " + strconv.Quote(d.value), guard: true}}, true
		}
	}
	var conds []conj
	if p != "" {
		conds = append(conds, conj{text: fmt.Sprintf("%s startsWith %s", a, strconv.Quote(p)), guard: true})
	}
	var covered []string // the other values the prefix covers
	for _, v := range exact {
		if strings.HasPrefix(v, p) {
			covered = append(covered, v)
		}
	}
	var longer []*descriptor // earlier wildcards with a longer prefix: they win for their values
	for _, e := range earlier {
		if strings.HasPrefix(e.prefix(), p) {
			longer = append(longer, e)
		}
	}
	lp := minimalPrefixes(longer)
	conds = append(conds, notIn(a, without(covered, lp))...)
	if len(lp) > 0 {
		alt := make([]string, len(lp))
		for i, q := range lp {
			alt[i] = notStarts(q).text
		}
		conds = append(conds, conj{text: fmt.Sprintf("(%s == %s || %s)", a, strconv.Quote(d.value), strings.Join(alt, " && "))})
	}
	return conds, true
}

// minimalPrefixes is the prefixes of wildcards ws, in order, without those
// that extend another (a value with the longer prefix has the shorter one
// too).
func minimalPrefixes(ws []*descriptor) []string {
	var out []string
	for i, w := range ws {
		p, redundant := w.prefix(), false
		for j, o := range ws {
			if j != i && strings.HasPrefix(p, o.prefix()) && (o.prefix() != p || j < i) {
				redundant = true
				break
			}
		}
		if !redundant {
			out = append(out, p)
		}
	}
	return out
}

// without is values less those that start with one of prefixes.
func without(values, prefixes []string) []string {
	var out []string
	for _, v := range values {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(v, p) }) {
			out = append(out, v)
		}
	}
	return out
}

// notIn is the condition that a is none of values: none for no values.
func notIn(a string, values []string) []conj {
	switch len(values) {
	case 0:
		return nil
	case 1:
		return []conj{{text: a + " != " + strconv.Quote(values[0]), guard: true}}
	}
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return []conj{{text: fmt.Sprintf("%s not in [%s]", a, strings.Join(q, ", "))}}
}

func attrRef(key string) string { return "attrs[" + strconv.Quote(key) + "]" }

// rule adds the rule of the rate limit of the last descriptor of path.
func (t *translation) rule(path []*descriptor, conds []conj) {
	d := path[len(path)-1]
	rl := d.limit
	r := &rule{limit: rl, shadow: d.shadow && !rl.unlimited, detailed: d.detailed}
	keys := make([]string, len(path))
	for i, n := range path {
		keys[i] = n.key
		r.detailed = r.detailed || n.valueToMet
	}
	r.when = []string{
		fmt.Sprintf("%s == %s", attrRef(attrDomain), strconv.Quote(t.cfg.domain)),
		fmt.Sprintf("%s == %s", attrRef(attrKeys), strconv.Quote(strings.Join(keys, ","))),
		fmt.Sprintf("%s == \"\"", attrRef(attrOverride)),
	}
	// The plain comparisons first: ruled tests a leading run of them
	// without its expression VM.
	for _, guards := range []bool{true, false} {
		for _, c := range conds {
			if c.guard == guards {
				r.when = append(r.when, c.text)
			}
		}
	}
	if !rl.unlimited || r.detailed {
		r.subject = subjectExpr(path)
	}
	if !rl.unlimited {
		r.window = unitDurations[rl.unit] * time.Duration(rl.multiplier)
	}
	ep := envoyPath(t.cfg.domain, path)
	r.name, r.statKey = t.g.takeName(ruleName(t.cfg.domain, path), ep), ep
	r.comments = append(r.comments, fmt.Sprintf("envoy: %s, %s (%s)", commentText(ep), limitText(rl, d), pos(t.cfg.file, d.keyNode)))
	if !rl.unlimited && !rl.rpuSet {
		r.comments = append(r.comments, "requests_per_unit is not given: envoy reads 0, which denies every request")
		t.note(rl.node, "rate limit of %s has no requests_per_unit: envoy reads 0, which denies every request; so does the rule", ep)
	}
	for _, n := range path {
		if n.valueToMet {
			t.note(n.flagNodes["value_to_metric"], "value_to_metric is approximated by detailed_metric: ruled's per-subject metrics carry every value of the descriptor")
			break
		}
	}
	if rl.unlimited && d.shadow {
		r.comments = append(r.comments, "shadow_mode has no effect on an unlimited rate limit")
	}
	t.rules = append(t.rules, r)
}

// subjectExpr is the subject of the rule for path: its entries as
// key=value joined with "/", the fixed values written out. Every value
// read from attrs but the last is escaped (% and / as %25 and %2F), so
// that distinct descriptors never share a subject. A wildcard with
// share_threshold counts all its values as the pattern, as envoy does.
func subjectExpr(path []*descriptor) string {
	last := -1
	for i, d := range path {
		if variable(d) {
			last = i
		}
	}
	var parts []string
	lit := ""
	for i, d := range path {
		if i > 0 {
			lit += "/"
		}
		lit += d.key + "="
		if !variable(d) {
			lit += d.value
			continue
		}
		parts = append(parts, strconv.Quote(lit))
		lit = ""
		if i == last {
			parts = append(parts, attrRef(d.key))
		} else {
			parts = append(parts, fmt.Sprintf(`(%s | replace("%%", "%%25") | replace("/", "%%2F"))`, attrRef(d.key)))
		}
	}
	if lit != "" {
		parts = append(parts, strconv.Quote(lit))
	}
	return strings.Join(parts, " + ")
}

// variable reports whether the entry a descriptor matches has a value of
// its own in the counter: a value-less key, or a wildcard without
// share_threshold.
func variable(d *descriptor) bool { return d.value == "" || (d.wildcard() && !d.share) }

// resolveReplaces turns the replaces of every rule, envoy rate limit
// names, into the names of the rules of the rate limits so named in the
// domain. A name no rate limit has is dropped with a note: envoy ignores
// it, ruled would reject it.
func (t *translation) resolveReplaces() {
	byName := map[string][]string{}
	for _, r := range t.rules {
		if r.limit.name != "" {
			byName[r.limit.name] = append(byName[r.limit.name], r.name)
		}
	}
	for _, r := range t.rules {
		for _, ref := range r.limit.replaces {
			targets := byName[ref.name]
			if len(targets) == 0 {
				t.note(ref.node, "replaces %q: no rate limit of domain %q has this name; envoy ignores it, and so does the rule", ref.name, t.cfg.domain)
				r.comments = append(r.comments, fmt.Sprintf("replaces %s: no rate limit of this domain has this name", commentText(strconv.Quote(ref.name))))
				continue
			}
			for _, n := range targets {
				if n != r.name && !slices.Contains(r.replaces, n) {
					r.replaces = append(r.replaces, n)
				}
			}
		}
	}
}

func (t *translation) errorf(n *yaml.Node, code, format string, args ...any) {
	t.g.errs = append(t.g.errs, &Error{Pos: pos(t.cfg.file, n), Code: code, Message: fmt.Sprintf(format, args...)})
}

func (t *translation) note(n *yaml.Node, format string, args ...any) {
	t.g.notes = append(t.g.notes, Note{Pos: pos(t.cfg.file, n), Message: fmt.Sprintf(format, args...)})
}

// envoyPath names a descriptor as envoy's stats and logs do:
// domain.key_value.key.
func envoyPath(domain string, path []*descriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, d := range path {
		b.WriteByte('.')
		b.WriteString(d.compositeKey())
	}
	return b.String()
}

// limitText describes a rate limit: "5 per day", "unlimited".
func limitText(rl *rateLimit, d *descriptor) string {
	if rl.unlimited {
		return "unlimited"
	}
	u := strings.ToLower(rl.unit)
	per := u
	if rl.multiplier > 1 {
		per = fmt.Sprintf("%d %ss", rl.multiplier, u)
	}
	s := fmt.Sprintf("%d per %s", rl.rpu, per)
	switch rl.unit {
	case "MONTH":
		s += " (a month is 30 days)"
	case "YEAR":
		s += " (a year is 365 days)"
	}
	if d.shadow {
		s += ", shadow mode"
	}
	if rl.name != "" {
		s += ", name " + strconv.Quote(rl.name)
	}
	return s
}

// ruleName derives a readable rule name from the domain and the path:
// domain-key-value-key, with a wildcard value as prefix-any.
func ruleName(domain string, path []*descriptor) string {
	parts := []string{sanitize(domain)}
	for _, d := range path {
		parts = append(parts, sanitize(d.key))
		switch {
		case d.wildcard() && sanitize(d.prefix()) == "":
			parts = append(parts, "any")
		case d.wildcard():
			parts = append(parts, sanitize(d.prefix()), "any")
		case d.value != "":
			parts = append(parts, sanitize(d.value))
		}
	}
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "-")
}

// takeName returns name made valid and unique: cut, and suffixed with a
// short hash of key (what the rule stands for), when too long or taken.
func (g *generator) takeName(name, key string) string {
	name = strings.TrimLeft(name, "-_")
	if name == "" {
		name = "envoy"
	}
	cut := func(s string, room int) string { return strings.TrimRight(s[:min(len(s), room)], "-_") }
	if len(name) > maxNameLen {
		name = cut(name, maxNameLen-7) + "-" + shortHash(key)
	}
	for i := 0; g.names[name]; i++ {
		name = cut(name, maxNameLen-7) + "-" + shortHash(fmt.Sprint(key, i))
	}
	g.names[name] = true
	return name
}

// sanitize is s in lower case with every run of characters a rule name
// cannot have as one '-'.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' {
			b.WriteRune(c)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:3])
}
