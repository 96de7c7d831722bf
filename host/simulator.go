package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ruled-dev/ruled/host/local"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// Simulator decides checks through the engine's rule loop, offline: each
// rule by its plugin's local model (sdk.LocalAlgorithm, at the whole
// quota) on a clock the caller sets. No Redis, no wall clock, instant:
// `ruled test` and `ruled replay` run rules on it.
//
// Shortcuts (the deny cache, leases) are left out: they answer as the
// plugin alone would, or more conservatively (docs/rules.md,
// "Shortcuts"), and the simulator answers as the plugin alone. A rule's
// state lives in one model; a rule with a dynamic config has one model per
// distinct config, so a subject whose config changes starts afresh in the
// simulation, where Redis would carry its state over to the new config.
//
// A Simulator is not safe for concurrent use.
type Simulator struct {
	set    *rules.Set
	models *local.Limiters
	nowUS  int64
	sels   []rules.Selection
}

// ErrNoModel is the error of NewSimulator for rules whose plugin has no
// local model (it does not implement sdk.LocalAlgorithm, as a Wasm or
// process plugin does not): only Redis can decide them.
var ErrNoModel = errors.New("host: no local model")

// NewSimulator returns a simulator for set, whose rules' plugins must all
// have local models (see ErrNoModel).
func NewSimulator(set *rules.Set) (*Simulator, error) {
	var missing []string
	for _, r := range set.Rules() {
		if _, ok := r.Algorithm().(sdk.LocalAlgorithm); !ok && !r.Exempt {
			missing = append(missing, fmt.Sprintf("%s (plugin %s)", r.Name, r.Plugin))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w for rules %s", ErrNoModel, strings.Join(missing, ", "))
	}
	return &Simulator{set: set, models: local.NewLimiters(0)}, nil
}

// Check decides req at nowUS, a Unix time in microseconds that never goes
// back between calls.
func (s *Simulator) Check(nowUS int64, req *CheckRequest) Result {
	var res Result
	s.CheckInto(nowUS, req, &res)
	return res
}

// CheckInto is Check writing into res, whose Results it reuses.
func (s *Simulator) CheckInto(nowUS int64, req *CheckRequest, res *Result) {
	s.nowUS = nowUS
	s.sels = s.set.AppendMatch(s.sels[:0], &rules.Input{Request: req.Request, Attrs: req.Attrs})
	decideRules(context.Background(), s, budget{}, checkMode, s.sels, req, res)
	clear(s.sels) // drop references to subjects and configs
}

// decideRule implements ruleDecider with sel's model.
func (s *Simulator) decideRule(_ context.Context, _ budget, sel *rules.Selection, r sdk.Request, d *sdk.Decision) (bool, error) {
	var err error
	*d, _, err = s.models.Decide(s.nowUS, *sel, 1, r)
	return false, err
}

// refundRule implements ruleDecider with sel's model.
func (s *Simulator) refundRule(_ context.Context, _ budget, sel rules.Selection, n int64, dedupID string, attrs map[string]string) (sdk.Decision, error) {
	d, _, err := s.models.Decide(s.nowUS, sel, 1, sdk.Request{Subject: sel.Subject, Hits: -n, DedupID: dedupID, Attrs: attrs})
	return d, err
}

// decideLocal implements ruleDecider: a model never fails, so there is no
// local fallback to take.
func (s *Simulator) decideLocal(rules.Selection, sdk.Request) (sdk.Decision, bool) {
	return sdk.Decision{}, false
}
