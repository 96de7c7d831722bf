package rules_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
)

// TestExpressionBudget: a rule whose when runs away with the request's
// input (a reduce that concatenates a long string thousands of times: 12 s
// unbounded) ends within its budget with an error naming it, and the other
// rules of the request, loops included, are evaluated as usual.
func TestExpressionBudget(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: runaway
    when: 'len(reduce(1..int(attrs["n"]), #acc + attrs["s"], "")) > 0'
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
  - name: nested
    when: 'all(1..int(attrs["n"]), all(1..int(attrs["n"]), # > 0))'
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
  - name: loops
    when: 'all(split(attrs["tags"], ","), # != "") && any(1..int(attrs["m"]), any(1..2, # == 2) && # == 50)'
    subject: request.ip
    plugin: fixedwindow
    config: {limit: '=len(filter(1..int(attrs["m"]), # % 2 == 0))', window: 1s}
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`)
	in := func(n int) *rules.Input {
		return &rules.Input{Request: rules.Request{IP: "192.0.2.1"},
			Attrs: map[string]string{"n": strconv.Itoa(n), "s": strings.Repeat("s", 1000), "tags": "a,b,c", "m": "100"}}
	}
	start := time.Now()
	sels := s.Match(in(6000))
	took := time.Since(start)
	if len(sels) != 4 {
		t.Fatalf("got %s", summary(sels))
	}
	var ee *rules.EvalError
	if !errors.As(sels[0].Err, &ee) || !errors.Is(sels[0].Err, rules.ErrExprBudget) || ee.Field != "when" ||
		!strings.Contains(sels[0].Err.Error(), "exceeded its evaluation budget") {
		t.Fatalf("runaway rule: %v, want an EvalError of its when wrapping ErrExprBudget", sels[0].Err)
	}
	// The loop's body, #acc + attrs["s"], which expr places at its operator.
	if ee.Pos.Line != 3 || ee.Pos.Column != 48 {
		t.Errorf("budget error at %s, want rules.yaml:3:48 (the loop's body)", ee.Pos)
	}
	if took > 700*time.Millisecond {
		t.Errorf("matching took %v with a %v budget", took, rules.ExprBudget)
	}
	if !errors.Is(sels[1].Err, rules.ErrExprBudget) {
		t.Errorf("nested loops (36M iterations): %v, want ErrExprBudget", sels[1].Err)
	}
	for _, sel := range sels[2:] {
		if sel.Err != nil {
			t.Errorf("rule %s: %v", sel.Rule.Name, sel.Err)
		}
	}
	if got, ok := sels[2].Config.(fixedwindow.Config); !ok || got.Limit != 50 {
		t.Errorf("loops' dynamic config %+v, want a limit of 50", sels[2].Config)
	}
	t.Logf("two runaway rules and two others matched in %v", took)

	// Small inputs: the same loops, no error.
	if sels := s.Match(in(10)); len(sels) != 4 || sels[0].Err != nil || sels[1].Err != nil || sels[2].Err != nil || sels[3].Err != nil {
		t.Fatalf("small input: %s", summary(sels))
	}
	// ruled eval's trace has the same bound.
	if tr := s.Trace(in(6000)); !errors.Is(tr[0].Err, rules.ErrExprBudget) || tr[2].Err != nil || !tr[2].Matched {
		t.Fatalf("trace: %v / %v", tr[0].Err, tr[2].Err)
	}
}

// TestExpressionBudgetKeepsTypeChecks: metering loops does not change what
// loads: a predicate that is not a boolean is still refused at its place.
func TestExpressionBudgetKeepsTypeChecks(t *testing.T) {
	_, err := load(t, `rules:
  - name: x
    when: 'any(1..3, # + 1)'
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`)
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:3:22: rule \"x\": when: predicate should return boolean (got int)") {
		t.Fatalf("non-boolean predicate: %v", err)
	}
	t.Log(err)
}
