package rules_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ruled-dev/ruled/rules"
)

// TestTraceAgreesWithMatch: the rules Trace says apply are exactly the ones
// Match selects, with the same subjects, for many inputs.
func TestTraceAgreesWithMatch(t *testing.T) {
	set, err := rules.Load("../examples/rules/cookbook", newCatalog())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	for i := 0; i < 2000; i++ {
		in := &rules.Input{
			Request: rules.Request{
				IP:      pick("10.0.0.1", "203.0.113.7", "fd00::1", "2001:db8::1", ""),
				Method:  pick("GET", "POST", "PUT"),
				Path:    pick("/login", "/api/search/x", "/api/export", "/healthz", "/", "/api/x/y"),
				User:    pick("", "alice", "bob"),
				Headers: map[string]string{"X-Tier": pick("pro", "free", "")},
			},
			Attrs: map[string]string{"tenant": pick("acme", "", "globex")},
		}
		var fromMatch, fromTrace []string
		for _, s := range set.Match(in) {
			fromMatch = append(fromMatch, fmt.Sprintf("%s=%s/%v", s.Rule.Name, s.Subject, s.Err != nil))
		}
		for _, e := range set.Trace(in) {
			if e.Matched || (e.Err != nil && !e.Skipped) {
				fromTrace = append(fromTrace, fmt.Sprintf("%s=%s/%v", e.Rule.Name, e.Subject, e.Err != nil))
			}
		}
		if !slices.Equal(fromMatch, fromTrace) {
			t.Fatalf("input %+v:\nmatch %v\ntrace %v", in, fromMatch, fromTrace)
		}
	}
}
