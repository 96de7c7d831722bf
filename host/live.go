package host

import (
	"context"
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/local"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// The live decider is the serving generation: each rule is decided by its
// plugin over Redis, behind the engine's shortcuts (the deny cache and rule
// leases), within the check's budget.
var _ ruleDecider = (*generation)(nil)

// decideRule implements ruleDecider: a cached denial when the deny cache
// holds one, else the rule's lease, else the plugin.
func (g *generation) decideRule(ctx context.Context, b budget, sel *rules.Selection, r sdk.Request, d *sdk.Decision) (bool, error) {
	e, rule := g.engine, sel.Rule
	key := local.Key{Rule: rule.Name, Subject: sel.Subject} // in the local caches
	// A retry with a dedup_id is answered by the plugin, which knows it.
	denyCached := !e.noShortcuts && rule.DenyCache && r.Hits > 0 && !r.BestEffort && r.DedupID == ""
	if denyCached {
		var ok bool
		if *d, ok = e.deny.Get(key, r.Hits); ok {
			return true, nil
		}
	}
	if b.spent() {
		return false, &capability.Error{Class: capability.ClassTimeout, Plugin: rule.Plugin, Err: ErrDecisionTimeout}
	}
	p := g.plugins[rule.Plugin]
	var err error
	if !e.noShortcuts && leaseable(rule, &r) {
		*d, err = e.decideLeased(ctx, b, p, key, sel, &r)
	} else {
		if rule.Lease > 0 {
			e.returnRuleLease(ctx, b, key)
		}
		*d, err = safeDecide(ctx, b, p, rule.Name, sel.Config, r)
	}
	if err != nil {
		return false, err
	}
	if rule.DenyCache && !denyCached {
		// A request the cache does not answer (a refund, a retry, a best
		// effort grant) may change what a cached denial says. (Get drops
		// the entry for the requests it sends on.)
		e.deny.Forget(key)
	}
	if e.localInUse.Load() && e.localInUse.CompareAndSwap(true, false) {
		e.local.Reset() // Redis answers again and holds the truth
	}
	if denyCached && !d.Allowed {
		e.deny.Put(key, r.Hits, *d)
	}
	return false, nil
}

// refundRule implements ruleDecider, within what is left of b.
func (g *generation) refundRule(ctx context.Context, b budget, sel rules.Selection, n int64, dedupID string, attrs map[string]string) (sdk.Decision, error) {
	if b.spent() {
		g.engine.warnGated("refund skipped: the decision time-out is spent", sel.Rule.Name)
		return sdk.Decision{}, ErrDecisionTimeout
	}
	d, err := g.engine.refundUnits(ctx, b, g.plugins[sel.Rule.Plugin], sel, n, dedupID, attrs)
	if err != nil {
		g.engine.warnGated("refund failed", sel.Rule.Name, "err", err)
	}
	return d, err
}

// decideLocal implements ruleDecider with the engine's local limiters, at
// this instance's share of the live instances.
func (g *generation) decideLocal(sel rules.Selection, r sdk.Request) (sdk.Decision, bool) {
	e := g.engine
	share := 1 / float64(max(e.clusterSize.Load(), 1))
	d, ok, err := e.local.Decide(time.Now().UnixMicro(), sel, share, r)
	if !ok || err != nil {
		return sdk.Decision{}, false
	}
	e.localInUse.Store(true)
	return d, true
}

// safeDecide runs a plugin's Decide, its Redis calls bounded by b, and
// turns a panic into an error, so that a faulty plugin costs an error
// decision, never the daemon.
func safeDecide(ctx context.Context, b budget, p *plugin, rule string, cfg sdk.Config, r sdk.Request) (sdk.Decision, error) {
	return safeRun(ctx, p, p.reg.HostUntil(rule, r.Subject, b.deadline), cfg, r)
}

// safeRun runs a plugin's Decide on host h and turns a panic into an
// error.
func safeRun(ctx context.Context, p *plugin, h sdk.Host, cfg sdk.Config, r sdk.Request) (d sdk.Decision, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("plugin %s panicked: %v", p.alg.Info().Name, v)
		}
	}()
	return p.alg.Decide(ctx, h, cfg, r)
}

// refundUnits gives n units of sel's subject back to its plugin, p, and
// forgets the subject's cached denial, which the units may lift: the one
// way ruled returns units, after a denial, from a lease or from a client
// lease. The caller has checked that the plugin declares refunds.
func (e *Engine) refundUnits(ctx context.Context, b budget, p *plugin, sel rules.Selection, n int64, dedupID string, attrs map[string]string) (sdk.Decision, error) {
	d, err := safeDecide(ctx, b, p, sel.Rule.Name, sel.Config, sdk.Request{Subject: sel.Subject, Hits: -n, DedupID: dedupID, Attrs: attrs})
	if err != nil {
		return d, err
	}
	e.deny.Forget(local.Key{Rule: sel.Rule.Name, Subject: sel.Subject})
	return d, nil
}
