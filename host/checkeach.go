package host

import (
	"context"

	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ruled-dev/ruled/rules"
)

// CheckEach decides reqs as the parts of one request, as Envoy's rate
// limit service asks with the descriptors of one call: in order, sharing
// one decision time-out; a rule that one part's match replaces
// (replaces:) applies to none of them; once a part is denied, what the
// parts before it were granted is refunded where their plugins declare
// refunds (their results then report the remaining after the refund), and
// the parts after it only peek (hits 0), so that a denied request uses up
// no quota. A part a plugin refuses as bad input (BadRequest) ends the
// request the same way: the parts after it are not decided and their
// results are empty. The observer hears one check for the request.
func (e *Engine) CheckEach(ctx context.Context, reqs []*CheckRequest) []Result {
	if len(reqs) == 1 {
		// One part: a check (AppendMatch applies replaces within it),
		// with room for one rule's result in the same allocation.
		one := new(oneResult)
		one.res[0].Results = one.rules[:0]
		e.CheckInto(ctx, reqs[0], &one.res[0])
		return one.res[:]
	}
	out := make([]Result, len(reqs))
	if e.tracer != nil {
		var span trace.Span
		ctx, span = e.tracer.Start(ctx, "ruled.check_each")
		defer endCheckSpan(span, out) // out is filled in place
	}
	start := time.Now()
	b := newBudget(ctx, start, e.timeout)
	g := e.gen.Load()
	sels := make([][]rules.Selection, len(reqs))
	for i, req := range reqs {
		buf := selections.Get().(*[]rules.Selection)
		sels[i] = g.set.AppendMatchUnreplaced((*buf)[:0], &rules.Input{Request: req.Request, Attrs: req.Attrs})
		defer func() {
			clear(sels[i]) // drop references to subjects and configs
			*buf = sels[i][:0]
			selections.Put(buf)
		}()
	}
	sels = g.set.DropReplaced(sels)
	over, allowed := false, true
	for i, req := range reqs {
		if over && req.Hits != 0 {
			peek := *req
			peek.Hits = 0
			req = &peek
		}
		res := &out[i]
		decideRules(ctx, g, b, checkMode, sels[i], req, res)
		e.observeDecisions(res)
		allowed = allowed && res.Allowed
		if res.Allowed || over {
			continue
		}
		over = true
		for j := range i {
			refundRules(ctx, g, b, sels[j], out[j].Results, 0, reqs[j], reqs[j].Attrs)
		}
		if res.BadRequest != nil {
			break
		}
	}
	e.obs.Check(time.Since(start), allowed) // one request, one check
	return out
}

// oneResult is the result of a request of one part, and its first rule's.
type oneResult struct {
	res   [1]Result
	rules [1]RuleResult
}
