// Package rules loads ruled's rule files and matches requests against them.
//
// A rule file is YAML: an optional `plugins:` section declaring third-party
// plugins and a `rules:` list. Each rule says when it applies (an expr
// expression), what it limits (the subject, another expression), which
// plugin decides and with what config. Parse reads files and checks their
// shape; Compile compiles every expression against a typed environment and
// has each rule's plugin validate its config; Load does both. Every problem
// is reported at once, as an ErrorList of positioned errors.
//
// A compiled Set is immutable and safe for concurrent use. Match compiles
// nothing: it visits only the rules an index of their constant comparisons
// leaves possible, decides the common forms of condition and subject with
// plain Go tests extracted at load, runs the precompiled expr programs for
// the rest, and returns one Selection per matching rule, in file order.
//
// The format is documented in docs/rules.md.
package rules

import (
	"strings"

	"github.com/ruled-dev/ruled/sdk"
)

// Request is the HTTP-level view of a request that rules see as `request`.
type Request struct {
	IP      string            `json:"ip" expr:"ip"`
	Method  string            `json:"method" expr:"method"`
	Path    string            `json:"path" expr:"path"`
	Host    string            `json:"host" expr:"host"`
	User    string            `json:"user" expr:"user"`
	Headers map[string]string `json:"headers" expr:"headers"` // lower-case keys; see NormalizeHeaders
	Query   map[string]string `json:"query" expr:"query"`
}

// Input is what rules are matched against. Header keys should be lower
// case (NormalizeHeaders); Match copies and lower-cases them itself when
// they are not, which costs an allocation per call.
type Input struct {
	Request Request
	Attrs   map[string]string // free-form attributes, `attrs` in expressions
}

// NormalizeHeaders returns h with lower-case keys: h itself when it already
// has them, otherwise a new map. When two keys differ only in case, one of
// their values wins.
func NormalizeHeaders(h map[string]string) map[string]string {
	if lowerKeys(h) {
		return h
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[strings.ToLower(k)] = v
	}
	return out
}

func lowerKeys(h map[string]string) bool {
	for k := range h {
		for i := 0; i < len(k); i++ {
			if c := k[i]; c >= 'A' && c <= 'Z' {
				return false
			}
		}
	}
	return true
}

// OnError is a rule's policy when its decision cannot be made (the store is
// down, the plugin failed, or the rule itself could not be evaluated).
type OnError string

// The failure policies.
const (
	OnErrorAllow OnError = "allow" // let the request through (the default)
	OnErrorDeny  OnError = "deny"  // refuse the request
	OnErrorLocal OnError = "local" // decide with an in-process limiter
)

// Catalog resolves plugin names: the built-ins and the third-party plugins
// declared under `plugins:`.
type Catalog interface {
	Lookup(name string) (sdk.Algorithm, bool)
}

// NameLister is a Catalog that can also list the names it resolves. Compile
// uses them to suggest a name for a rule's misspelt plugin ("did you mean").
type NameLister interface {
	Names() []string
}

// PluginDecl is a third-party plugin declared under `plugins:`. Exactly one
// of Wasm and Process is set; both are absolute paths, resolved relative to
// the declaring file.
type PluginDecl struct {
	Name    string
	Wasm    string // path of a Wasm module
	Process string // path of a plugin executable
	SHA256  string // expected hex digest of the file, lower case; may be empty
	Pos     Position
}

// Rule is one compiled rule. Its exported fields describe it; the Set it
// belongs to uses the rest to match.
type Rule struct {
	Name    string
	Plugin  string
	OnError OnError
	Shadow  bool // evaluated and counted, never denies
	Stop    bool // when this rule matches, later rules are not evaluated
	// DenyCache lets the engine deny a subject in-process until the
	// retry-after of its last denial, without a Redis call: true when the
	// plugin declares firm denials and the rule does not say
	// deny_cache: false.
	DenyCache bool
	// Lease, when above 0, lets each ruled instance take this many permits
	// from Redis in one call and grant them in-process (very high rates; see
	// docs/rules.md for the bound on over-admission). 0 is off; a lease on
	// a plugin that does not declare leasable grants is a load error.
	Lease int64
	// Exempt rules admit what they match without a plugin and stop the
	// evaluation (Stop is true): an allow list.
	Exempt bool
	// Replaces names the rules that do not apply when this one matches:
	// in one check, and across the descriptors of one Envoy RLS request.
	Replaces []string
	// Detailed asks for per-subject decision metrics (detailed_metric).
	Detailed bool
	// Traits are what the rule's plugin declares about its decisions.
	Traits  sdk.Traits
	Pos     Position
	When    string // source of the when expression; "" means always
	Subject string // source of the subject expression

	alg      sdk.Algorithm
	replaced []*Rule        // Replaces, resolved when the Set is built
	raw      map[string]any // config as written (dynamic values as their "=..." strings)
	when     cond
	subject  value
	config   sdk.Config // static config, when dyn is nil
	dyn      *dynConfig // dynamic config, or nil
}

// Algorithm returns the plugin that decides for the rule.
func (r *Rule) Algorithm() sdk.Algorithm { return r.alg }

// RawConfig returns a copy of the rule's config as written in the file;
// dynamic values appear as their "=expression" strings.
func (r *Rule) RawConfig() map[string]any { return cloneMap(r.raw) }

// Dynamic reports whether the rule's config has values computed per request.
func (r *Rule) Dynamic() bool { return r.dyn != nil }

// Selection is one matching rule for one input.
type Selection struct {
	Rule    *Rule
	Subject string     // the computed subject
	Config  sdk.Config // the plugin's parsed config for this input
	// Err is a run-time error evaluating this rule for this input (its
	// when, subject or dynamic config), an *EvalError. The rule's decision
	// is then an error decision, handled by its on_error policy.
	Err error

	whenFailed bool // Err is the when's: the rule has not matched
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return cloneMap(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v
}
