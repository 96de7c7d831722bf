package ruletest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/suggest"
	"github.com/ruled-dev/ruled/rules"
)

// Checker decides checks at a time it is given, in Unix microseconds,
// which never goes back between calls.
type Checker interface {
	Check(nowUS int64, req *host.CheckRequest) host.Result
}

// FailingChecker is a Checker that can fail to decide (Redis does): after
// each check Run asks it for its first failure, and stops the case there.
type FailingChecker interface {
	Checker
	Err() error
}

// Failure is one expectation a step did not meet.
type Failure struct {
	Step   int // 1-based index of the step in its case
	Check  int // 1-based repetition of the step that failed
	Repeat int // the step's repeat
	At     time.Duration
	Pos    rules.Position // of the expected value
	Rule   string         // "" for the check as a whole
	Field  string
	Want   string
	Got    string
}

// Error formats f as `file:line:col: step 2 (at 1s): rule r: remaining: want 1, got 0`.
func (f Failure) Error() string {
	where := fmt.Sprintf("step %d (at %s", f.Step, f.At)
	if f.Repeat > 1 {
		where += fmt.Sprintf(", check %d of %d", f.Check, f.Repeat)
	}
	where += ")"
	what := f.Field
	if f.Rule != "" {
		what = fmt.Sprintf("rule %s: %s", f.Rule, f.Field)
	}
	return fmt.Sprintf("%s: %s: %s: want %s, got %s", f.Pos, where, what, f.Want, f.Got)
}

// Outcome is what running a case found.
type Outcome struct {
	Case     *Case
	Checks   int // checks sent
	Failures []Failure
	// Err is why the case stopped before its end: its checker failed to
	// decide (a FailingChecker). The checks after it were not sent.
	Err error
}

// Passed reports whether the case ran to its end and every expectation
// held.
func (o Outcome) Passed() bool { return o.Err == nil && len(o.Failures) == 0 }

// stopEvery is how many checks Run sends between looks at its context.
const stopEvery = 1024

// Run sends c's steps to ch, which must hold no state yet, and compares
// what it decides with what the steps expect. A step repeated n times
// reports the failures of its first failing check only. When ctx ends,
// Run stops within stopEvery checks, with the context's cause as the
// outcome's Err.
func (c *Case) Run(ctx context.Context, ch Checker) Outcome {
	out := Outcome{Case: c}
	fc, _ := ch.(FailingChecker)
	start := c.Start.UnixMicro()
	for i, s := range c.Steps {
		now := start + s.At.Microseconds()
		failed := false
		for rep := 1; rep <= s.Repeat; rep++ {
			if out.Checks%stopEvery == 0 && ctx.Err() != nil {
				out.Err = fmt.Errorf("%s: step %d (at %s): %w", s.Pos, i+1, s.At, context.Cause(ctx))
				return out
			}
			req := s.Request // a copy: checkers may keep nothing of it
			res := ch.Check(now, &req)
			out.Checks++
			if fc != nil {
				if err := fc.Err(); err != nil {
					where := fmt.Sprintf("step %d (at %s", i+1, s.At)
					if s.Repeat > 1 {
						where += fmt.Sprintf(", check %d of %d", rep, s.Repeat)
					}
					out.Err = fmt.Errorf("%s: %s): %w", s.Pos, where, err)
					return out
				}
			}
			if failed {
				continue
			}
			for _, e := range s.Expect {
				got, ok := e.holds(&res)
				if ok {
					continue
				}
				failed = true
				out.Failures = append(out.Failures, Failure{Step: i + 1, Check: rep, Repeat: s.Repeat, At: s.At,
					Pos: e.Pos, Rule: e.Rule, Field: e.Field, Want: e.want(), Got: got})
			}
		}
	}
	return out
}

// holds reports whether res meets e, and what res says of e's field.
func (e *Expectation) holds(res *host.Result) (got string, ok bool) {
	var actual any
	if e.Rule == "" {
		switch e.Field {
		case "allowed":
			actual = res.Allowed
		case "retry_after":
			actual = res.RetryAfter
		}
	} else {
		var rr *host.RuleResult
		for i := range res.Results {
			if res.Results[i].Rule == e.Rule {
				rr = &res.Results[i]
				break
			}
		}
		switch {
		case e.Field == "matched":
			actual = rr != nil
		case rr == nil:
			return "no match (the rule did not apply)", false
		default:
			actual = ruleField(rr, e.Field)
		}
	}
	switch want := e.Want.(type) {
	case time.Duration:
		d := actual.(time.Duration)
		return d.String(), d >= want-e.Tolerance && d <= want+e.Tolerance
	default:
		return format(actual), actual == e.Want
	}
}

func ruleField(rr *host.RuleResult, field string) any {
	switch field {
	case "allowed":
		return rr.Allowed
	case "exempt":
		return rr.Exempt
	case "subject":
		return rr.Subject
	case "limit":
		return rr.Limit
	case "remaining":
		return rr.Remaining
	case "granted":
		return rr.Granted
	case "retry_after":
		return rr.RetryAfter
	case "reset":
		return rr.Reset
	case "delay":
		return rr.Delay
	}
	panic("ruletest: unknown rule field " + field)
}

// want formats the expected value.
func (e *Expectation) want() string {
	s := format(e.Want)
	if e.Tolerance > 0 {
		s += " ± " + e.Tolerance.String()
	}
	return s
}

func format(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case time.Duration:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

// CheckRules reports the expectations of f that name a rule set does not
// have, with the closest name there is.
func CheckRules(f *File, set *rules.Set) error {
	var names []string
	for _, r := range set.Rules() {
		names = append(names, r.Name)
	}
	var errs rules.ErrorList
	seen := map[rules.Position]bool{}
	for _, c := range f.Cases {
		for _, s := range c.Steps {
			for _, e := range s.Expect {
				if e.Rule == "" || seen[e.RulePos] {
					continue
				}
				seen[e.RulePos] = true
				if _, ok := set.Rule(e.Rule); ok {
					continue
				}
				msg := fmt.Sprintf("expect.rules: no rule %q in %s", e.Rule, f.Rules)
				if s := suggest.Closest(e.Rule, names); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				errs = append(errs, &rules.Error{Pos: e.RulePos, Code: rules.CodeBadValue, Message: msg})
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
