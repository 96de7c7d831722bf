// Package simulate decides checks as ruled would, on the built-in
// plugins' reference models and a clock the caller sets: no Redis, no
// wall clock, instant. `ruled test` and `ruled replay` run rules on it.
//
// A check goes through the rules as in the engine (host.Engine): the
// matching rules in order, an exempt rule admits, a rule whose expressions
// fail follows its on_error (deny denies, allow and local admit), and the
// first non-shadow denial ends the check and refunds what the rules before
// it were granted, where their plugins take refunds. Shortcuts (the deny
// cache, leases) are left out: they answer as the plugin alone would, or
// more conservatively (docs/rules.md, "Shortcuts"), and the simulator
// answers as the plugin alone.
//
// Each rule's state lives in one model per rule; a rule with a dynamic
// config has one model per distinct config, so a subject whose config
// changes starts afresh in the simulation, where Redis would carry its
// state over to the new config.
package simulate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// Simulator decides checks on reference models. It is not safe for
// concurrent use.
type Simulator struct {
	set    *rules.Set
	static map[*rules.Rule]builtin.Model
	models map[modelKey]builtin.Model
	sels   []rules.Selection
}

// modelKey names the model of a rule with a dynamic config: the rule and
// the config it resolved to, printed.
type modelKey struct {
	rule *rules.Rule
	cfg  string
}

// ErrNoModel is the error of New for rules whose plugin has no reference
// model (a third-party plugin): only Redis can decide them.
var ErrNoModel = errors.New("simulate: no reference model")

// New returns a simulator for set, whose rules must all use built-in
// plugins (see ErrNoModel).
func New(set *rules.Set) (*Simulator, error) {
	var missing []string
	for _, r := range set.Rules() {
		if !r.Exempt && !builtin.Has(r.Plugin) {
			missing = append(missing, fmt.Sprintf("%s (plugin %s)", r.Name, r.Plugin))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w for rules %s", ErrNoModel, strings.Join(missing, ", "))
	}
	return &Simulator{set: set, static: map[*rules.Rule]builtin.Model{}, models: map[modelKey]builtin.Model{}}, nil
}

// Check decides req at nowUS, a Unix time in microseconds that never
// goes back between calls.
func (s *Simulator) Check(nowUS int64, req *host.CheckRequest) host.Result {
	var res host.Result
	s.CheckInto(nowUS, req, &res)
	return res
}

// CheckInto is Check writing into res, whose Results it reuses.
func (s *Simulator) CheckInto(nowUS int64, req *host.CheckRequest, res *host.Result) {
	s.sels = s.set.AppendMatch(s.sels[:0], &rules.Input{Request: req.Request, Attrs: req.Attrs})
	*res = host.Result{Allowed: true, Results: res.Results[:0]}
	for i, sel := range s.sels {
		rr := s.decide(nowUS, sel, req)
		res.Results = append(res.Results, rr)
		if rr.Shadow || rr.Allowed {
			continue
		}
		res.Allowed = false
		res.RetryAfter = max(res.RetryAfter, rr.RetryAfter)
		if rr.Degraded == host.DegradedDeny {
			res.FailClosed = true
		}
		s.refund(nowUS, s.sels[:i], res.Results[:i], req)
		break
	}
	clear(s.sels)
}

// decide is one rule's decision, as host.Engine makes it.
func (s *Simulator) decide(nowUS int64, sel rules.Selection, req *host.CheckRequest) host.RuleResult {
	r := sel.Rule
	rr := host.RuleResult{Rule: r.Name, Subject: sel.Subject, Plugin: r.Plugin, Shadow: r.Shadow}
	switch {
	case r.Exempt && sel.Err == nil:
		rr.Allowed, rr.Exempt = true, true
	case sel.Err != nil:
		// The engine's on_error for a rule that cannot be evaluated: local
		// needs a subject and a config, so it admits like allow.
		rr.Err = sel.Err
		if r.OnError == rules.OnErrorDeny {
			rr.Degraded = host.DegradedDeny
		} else {
			rr.Degraded, rr.Allowed, rr.Granted = host.DegradedAllow, true, max(req.Hits, 0)
		}
	default:
		rr.Decision = s.model(sel).Decide(nowUS, sdk.Request{Subject: sel.Subject, Hits: req.Hits,
			DedupID: req.DedupID, BestEffort: req.BestEffort, Attrs: req.Attrs})
	}
	return rr
}

// refund gives back what done's rules were granted, as the engine does
// after a denial.
func (s *Simulator) refund(nowUS int64, sels []rules.Selection, done []host.RuleResult, req *host.CheckRequest) {
	for i := range done {
		rr, sel := &done[i], sels[i]
		if rr.Degraded != host.DegradedNone || !rr.Allowed || rr.Granted <= 0 || !sel.Rule.Traits.Refunds {
			continue
		}
		d := s.model(sel).Decide(nowUS, sdk.Request{Subject: sel.Subject, Hits: -rr.Granted, DedupID: req.DedupID, Attrs: req.Attrs})
		rr.Granted, rr.Remaining, rr.Reset = 0, d.Remaining, d.Reset
	}
}

// model returns the model that holds sel's rule's state for its config.
func (s *Simulator) model(sel rules.Selection) builtin.Model {
	r := sel.Rule
	if !r.Dynamic() {
		m := s.static[r]
		if m == nil {
			m = newModel(sel.Config)
			s.static[r] = m
		}
		return m
	}
	// The config's printed values, not the config itself: a config may
	// hold pointers (fixedwindow's calendar cache) that a new Configure
	// call of the same values renews.
	key := modelKey{rule: r, cfg: fmt.Sprint(sel.Config)}
	m := s.models[key]
	if m == nil {
		m = newModel(sel.Config)
		s.models[key] = m
	}
	return m
}

func newModel(cfg sdk.Config) builtin.Model {
	m, ok := builtin.NewModel(cfg)
	if !ok {
		// New refused the rule sets whose plugins have no model.
		panic(fmt.Sprintf("simulate: no model for config %T", cfg))
	}
	return m
}
