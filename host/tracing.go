package host

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// endCheckSpan records the decision of a check (or of each descriptor of
// an RLS call) on its span and ends it: whether it was allowed, the
// decision, the rule and plugin that decided it, and every evaluated
// rule's outcome.
func endCheckSpan(span trace.Span, results []Result) {
	attrs := make([]attribute.KeyValue, 0, 8)
	allowed := true
	var outcomes []string
	var decider *RuleResult
	for i := range results {
		res := &results[i]
		allowed = allowed && res.Allowed
		for j := range res.Results {
			rr := &res.Results[j]
			outcomes = append(outcomes, rr.Rule+"="+string(outcome(rr)))
			if decider == nil && !rr.Allowed && !rr.Shadow {
				decider = rr // the denial
			}
		}
		if p, ok := res.Policy(); ok && decider == nil && allowed {
			decider = &p
		}
	}
	decision := "allowed"
	for i := range results {
		switch {
		case results[i].BadRequest != nil:
			decision = "bad_request"
		case results[i].FailClosed:
			decision = "fail_closed"
		case !results[i].Allowed && decision == "allowed":
			decision = "denied"
		}
	}
	attrs = append(attrs, attribute.Bool("ruled.allowed", allowed), attribute.String("ruled.decision", decision),
		attribute.StringSlice("ruled.outcomes", outcomes))
	if decider != nil {
		attrs = append(attrs, attribute.String("ruled.rule", decider.Rule), attribute.String("ruled.plugin", decider.Plugin))
		if decider.Subject != "" {
			attrs = append(attrs, attribute.String("ruled.subject", decider.Subject))
		}
	}
	span.SetAttributes(attrs...)
	if decision == "fail_closed" {
		span.SetStatus(codes.Error, "denied by an on_error: deny policy")
	}
	span.End()
}
