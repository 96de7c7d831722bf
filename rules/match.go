package rules

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/ruled-dev/ruled/sdk"
)

// ErrEmptySubject is the error of a rule whose subject evaluates to "".
var ErrEmptySubject = errors.New("subject evaluated to an empty string")

// Set is a compiled rule set. It is immutable after Compile and safe for
// concurrent use.
type Set struct {
	rules   []*Rule
	plugins []PluginDecl
	funcs   *funcs
	byName  map[string]*Rule
	index   ruleIndex
	pool    sync.Pool // of *evalState
	// replacing is true when some rule replaces others.
	replacing bool
}

// Rules returns the rules in file order. The caller must not modify them.
func (s *Set) Rules() []*Rule { return s.rules }

// Plugins returns the third-party plugin declarations, in file order.
func (s *Set) Plugins() []PluginDecl { return append([]PluginDecl(nil), s.plugins...) }

// Rule returns the rule with the given name.
func (s *Set) Rule(name string) (*Rule, bool) {
	r, ok := s.byName[name]
	return r, ok
}

func (s *Set) init() {
	s.index = buildIndex(s.rules)
	s.byName = make(map[string]*Rule, len(s.rules))
	for _, r := range s.rules {
		s.byName[r.Name] = r
	}
	for _, r := range s.rules {
		r.replaced = r.replaced[:0]
		for _, name := range r.Replaces {
			if o, ok := s.byName[name]; ok {
				r.replaced = append(r.replaced, o)
			}
		}
		s.replacing = s.replacing || len(r.replaced) > 0
	}
	s.pool.New = func() any {
		st := &evalState{}
		st.env.Request = &st.req
		st.env.Header = st.header
		st.env.Tick = st.env.tick
		return st
	}
}

// evalState is the per-goroutine scratch space of Match: the expression
// environment, a VM whose stack is reused, and buffers.
type evalState struct {
	env  env
	vm   vm.VM
	req  Request           // the input's request, headers normalised
	hdr  map[string]string // scratch for normalised headers
	key  []byte            // dynamic config cache key
	vals []any             // evaluated dynamic config values
}

// ExprBudget bounds the time the expressions of one rule (its when, its
// subject and its dynamic config values together) may take for one
// request. It is checked in loops, the only place where an expression's
// cost can grow with the request: the first iteration starts the clock and
// it is read again every budgetEvery iterations. A rule that exceeds it
// gets a Selection with Err wrapping ErrExprBudget; the other rules of the
// request are evaluated as usual, each with its own budget.
const ExprBudget = 20 * time.Millisecond

// budgetEvery is how many loop iterations pass between two readings of
// the clock.
const budgetEvery = 16

// ErrExprBudget is the error of a rule whose expressions exceeded
// ExprBudget for one request.
var ErrExprBudget = fmt.Errorf("the expression exceeded its evaluation budget (%v per rule and request)", ExprBudget)

// startRule gives the next rule its own evaluation budget.
func (st *evalState) startRule() { st.env.ticks = 0 }

func (st *evalState) header(name string) string {
	return st.req.Headers[lowerASCII(name)]
}

// lowerASCII lower-cases s, without allocating when it already is.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// cond is a compiled when.
type cond struct {
	guards []guard     // necessary conditions, tested in Go
	full   bool        // the guards are the whole condition
	prog   *vm.Program // the full condition, when !full
	src    scalar
}

// value is a compiled subject.
type value struct {
	fast *fastValue  // computed in Go, or
	prog *vm.Program // run in the VM
	src  scalar
}

// Match returns a Selection for every rule that matches in, in file order,
// stopping after a matching rule with stop: true. A rule whose when cannot
// be evaluated yields a Selection with Err (and does not stop); so does a
// matching rule whose subject or dynamic config cannot be evaluated.
func (s *Set) Match(in *Input) []Selection {
	return s.AppendMatch(nil, in)
}

// AppendMatch is Match appending to dst, for callers that reuse a slice.
func (s *Set) AppendMatch(dst []Selection, in *Input) []Selection {
	start := len(dst)
	dst = s.AppendMatchUnreplaced(dst, in)
	if s.replacing {
		var buf [8]*Rule
		dst = append(dst[:start], dropReplaced(dst[start:], replacedBy(buf[:0], dst[start:]))...)
	}
	return dst
}

// AppendMatchUnreplaced is AppendMatch without replaces, for callers that
// match several inputs as one request (the descriptors of an Envoy RLS
// call) and then apply DropReplaced to all of them at once: a rule that
// one input's rules replace still replaces rules of the others, as envoy
// ratelimit collects every replaces before it drops any.
func (s *Set) AppendMatchUnreplaced(dst []Selection, in *Input) []Selection {
	if in == nil {
		in = &Input{}
	}
	st := s.begin(in)
	defer s.release(st)
	cands := s.index.candidates(&st.req, st.env.Attrs)
	for {
		i, more := cands.next()
		if !more {
			break
		}
		r := s.rules[i]
		st.startRule()
		ok, err := r.matches(st)
		if err != nil {
			dst = append(dst, Selection{Rule: r, Err: err, whenFailed: true})
			continue
		}
		if !ok {
			continue
		}
		dst = append(dst, r.select1(st))
		if r.Stop {
			break
		}
	}
	return dst
}

// DropReplaced removes from every list the selections of the rules that a
// selection of any list replaces (Rule.Replaces): the descriptors of one
// Envoy RLS request, each matched on its own, are one request for
// replaces. It returns the lists, shortened in place.
func (s *Set) DropReplaced(lists [][]Selection) [][]Selection {
	if !s.replacing {
		return lists
	}
	var buf [8]*Rule
	gone := buf[:0]
	for _, l := range lists {
		gone = replacedBy(gone, l)
	}
	for i, l := range lists {
		lists[i] = dropReplaced(l, gone)
	}
	return lists
}

// replacedBy appends to gone the rules that the rules of sels replace. A
// selection whose when could not be evaluated has not matched and
// replaces nothing.
func replacedBy(gone []*Rule, sels []Selection) []*Rule {
	for i := range sels {
		if !sels[i].whenFailed {
			gone = append(gone, sels[i].Rule.replaced...)
		}
	}
	return gone
}

// dropReplaced removes, in place, the selections of the rules in gone.
func dropReplaced(sels []Selection, gone []*Rule) []Selection {
	if len(gone) == 0 {
		return sels
	}
	kept := sels[:0]
	for _, sel := range sels {
		if !slices.Contains(gone, sel.Rule) {
			kept = append(kept, sel)
		}
	}
	clear(sels[len(kept):]) // drop references to subjects and configs
	return kept
}

// begin takes an evaluation state from the pool, set up for in: its
// request with header names in lower case (in the state's own map when
// they are not already), its attrs. Give it back with release.
func (s *Set) begin(in *Input) *evalState {
	if in == nil {
		in = &Input{}
	}
	st := s.pool.Get().(*evalState)
	st.req = in.Request
	if !lowerKeys(st.req.Headers) {
		if st.hdr == nil {
			st.hdr = make(map[string]string, len(st.req.Headers))
		}
		clear(st.hdr)
		for k, v := range st.req.Headers {
			st.hdr[lowerASCII(k)] = v
		}
		st.req.Headers = st.hdr
	}
	st.env.Attrs = in.Attrs
	return st
}

func (s *Set) release(st *evalState) {
	st.req = Request{}
	st.env.Attrs = nil
	clear(st.hdr)
	clear(st.vals)
	s.pool.Put(st)
}

func (r *Rule) matches(st *evalState) (bool, error) {
	for i := range r.when.guards {
		if !r.when.guards[i].test(&st.req, st.env.Attrs) {
			return false, nil
		}
	}
	if r.when.full {
		return true, nil
	}
	out, err := st.vm.Run(r.when.prog, &st.env)
	if err != nil {
		return false, r.evalError("when", r.when.src, err)
	}
	b, _ := out.(bool)
	return b, nil
}

func (r *Rule) select1(st *evalState) Selection {
	sel := Selection{Rule: r}
	if r.Exempt && r.Subject == "" {
		return sel // an exempt rule without a subject counts nothing
	}
	if fv := r.subject.fast; fv != nil {
		sel.Subject = fv.str(&st.req, st.env.Attrs)
	} else {
		out, err := st.vm.Run(r.subject.prog, &st.env)
		if err != nil {
			sel.Err = r.evalError("subject", r.subject.src, err)
			return sel
		}
		var ok bool
		if sel.Subject, ok = out.(string); !ok {
			sel.Err = r.evalError("subject", r.subject.src, fmt.Errorf("want a string, got %T", out))
			return sel
		}
	}
	if sel.Subject == "" {
		sel.Err = &EvalError{Rule: r.Name, Field: "subject", Pos: r.subject.src.pos(0), Err: ErrEmptySubject}
		return sel
	}
	if r.dyn == nil {
		sel.Config = r.config
		return sel
	}
	sel.Config, sel.Err = r.dynamicConfig(st)
	return sel
}

// evalError wraps a run-time expr error with the rule, the field and the
// position in the file of the failing part of the expression.
func (r *Rule) evalError(what string, src scalar, err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		var e error = errors.New(cleanExprMessage(fe.Message))
		if fe.Prev != nil {
			e = fe.Prev
		}
		return &EvalError{Rule: r.Name, Field: what, Pos: src.pos(fe.From), Err: e}
	}
	return &EvalError{Rule: r.Name, Field: what, Pos: src.pos(0), Err: err}
}

// maxDynConfigs bounds the Configure results cached per rule.
const maxDynConfigs = 1024

// dynConfig is a config with dynamic values, and a bounded cache of the
// plugin's Configure results per distinct set of evaluated values.
type dynConfig struct {
	tmpl  map[string]any // the config with *dynSlot placeholders
	slots []*dynSlot
	pos   Position // of the config mapping

	mu    sync.RWMutex
	cache map[string]configResult
}

type configResult struct {
	cfg sdk.Config
	err error
}

func newDynConfig(tmpl map[string]any, slots []*dynSlot, pos Position) *dynConfig {
	return &dynConfig{tmpl: tmpl, slots: slots, pos: pos, cache: map[string]configResult{}}
}

func (r *Rule) dynamicConfig(st *evalState) (sdk.Config, error) {
	d := r.dyn
	key := st.key[:0]
	vals := st.vals[:0]
	for _, slot := range d.slots {
		var out any
		if slot.fast != nil {
			out = slot.fast.eval(&st.req, st.env.Attrs)
		} else {
			var err error
			if out, err = st.vm.Run(slot.prog, &st.env); err != nil {
				st.key, st.vals = key, vals
				return nil, r.evalError("config."+slot.key, slot.src, err)
			}
		}
		var v any
		var err error
		v, key, err = dynamicValue(out, key)
		if err != nil {
			st.key, st.vals = key, vals
			return nil, &EvalError{Rule: r.Name, Field: "config." + slot.key, Pos: slot.src.pos(0), Err: err}
		}
		key = append(key, 0)
		vals = append(vals, v)
	}
	st.key, st.vals = key, vals

	d.mu.RLock()
	res, hit := d.cache[string(key)]
	d.mu.RUnlock()
	if hit {
		return res.cfg, res.err
	}

	raw := d.resolve(vals)
	res.cfg, res.err = configure(r.alg, raw)
	if res.err != nil {
		// Not cached: a plugin that is down (a process restarting) would
		// otherwise keep failing this config after it is back.
		return nil, &EvalError{Rule: r.Name, Field: "config", Pos: d.pos, Err: res.err}
	}
	d.mu.Lock()
	if len(d.cache) >= maxDynConfigs {
		for k := range d.cache { // evict an arbitrary entry
			delete(d.cache, k)
			break
		}
	}
	d.cache[string(key)] = res
	d.mu.Unlock()
	return res.cfg, res.err
}

// resolve returns a fresh copy of the template with the slots replaced by
// vals, in slot order.
func (d *dynConfig) resolve(vals []any) map[string]any {
	idx := make(map[*dynSlot]any, len(d.slots))
	for i, s := range d.slots {
		idx[s] = vals[i]
	}
	var conv func(v any) any
	conv = func(v any) any {
		switch t := v.(type) {
		case *dynSlot:
			return idx[t]
		case map[string]any:
			out := make(map[string]any, len(t))
			for k, e := range t {
				out[k] = conv(e)
			}
			return out
		case []any:
			out := make([]any, len(t))
			for i, e := range t {
				out[i] = conv(e)
			}
			return out
		}
		return v
	}
	out, _ := conv(d.tmpl).(map[string]any)
	return out
}
