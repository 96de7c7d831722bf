package rules_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/rules"
)

func TestExemptRuleStopsWithoutPlugin(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: office
    when: cidr(request.ip, "10.0.0.0/8")
    exempt: true
  - name: partner
    when: attrs["partner"] != ""
    subject: attrs["partner"]
    exempt: true
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
`)
	r, _ := s.Rule("office")
	if !r.Exempt || !r.Stop || r.Plugin != "" || r.Algorithm() != nil {
		t.Errorf("office: exempt %v stop %v plugin %q: want an exempt rule that stops, without a plugin", r.Exempt, r.Stop, r.Plugin)
	}
	for _, tc := range []struct {
		in   rules.Input
		want string
	}{
		{rules.Input{Request: rules.Request{IP: "10.1.2.3"}}, "office="},
		{rules.Input{Request: rules.Request{IP: "192.0.2.1"}, Attrs: map[string]string{"partner": "acme"}}, "partner=acme"},
		{rules.Input{Request: rules.Request{IP: "192.0.2.1"}}, "per-ip=192.0.2.1"},
	} {
		if got := summary(s.Match(&tc.in)); got != tc.want {
			t.Errorf("%+v: matched %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExemptRuleRefusesCountingFields(t *testing.T) {
	_, err := load(t, `rules:
  - name: office
    exempt: true
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
    shadow: true
`)
	l := errorList(t, err)
	var got []string
	for _, e := range l {
		got = append(got, e.Error())
	}
	for _, field := range []string{"plugin", "config", "shadow"} {
		want := field + ": an exempt rule admits what it matches without a plugin"
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("errors %q: want one saying %q", got, want)
		}
	}
}

func TestReplacesInOneCheck(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
  - name: per-user
    when: request.user != ""
    subject: request.user
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
    replaces: [per-ip]
`)
	for _, tc := range []struct {
		in   rules.Input
		want string
	}{
		{rules.Input{Request: rules.Request{IP: "192.0.2.1"}}, "per-ip=192.0.2.1"},
		{rules.Input{Request: rules.Request{IP: "192.0.2.1", User: "alice"}}, "per-user=alice"},
	} {
		if got := summary(s.Match(&tc.in)); got != tc.want {
			t.Errorf("%+v: matched %q, want %q", tc.in, got, tc.want)
		}
		// Appending keeps what the caller's slice held.
		prefix := []rules.Selection{{Rule: &rules.Rule{Name: "per-ip"}, Subject: "kept"}}
		if got := summary(s.AppendMatch(prefix, &tc.in)); got != "per-ip=kept "+tc.want {
			t.Errorf("%+v: appended %q, want the caller's selection kept before %q", tc.in, got, tc.want)
		}
	}
}

func TestDropReplacedAcrossLists(t *testing.T) {
	s := mustLoad(t, `rules:
  - name: generic
    when: attrs["k"] != ""
    subject: attrs["k"]
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
  - name: special
    when: attrs["special"] == "yes"
    subject: '"s"'
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
    replaces: [generic]
  - name: broken
    when: attrs["boom"] != "" && 1 / int(attrs["boom"]) > 0
    subject: '"b"'
    plugin: fixedwindow
    config: {limit: 1, window: 1m}
    replaces: [special]
`)
	one := s.Match(&rules.Input{Attrs: map[string]string{"k": "a"}})
	two := s.Match(&rules.Input{Attrs: map[string]string{"special": "yes"}})
	lists := s.DropReplaced([][]rules.Selection{one, two})
	if got := summary(lists[0]) + "|" + summary(lists[1]); got != "|special=s" {
		t.Errorf("after replaces: %q, want generic dropped from the first descriptor and special kept", got)
	}
	// A rule whose when fails has not matched: it replaces nothing.
	three := s.Match(&rules.Input{Attrs: map[string]string{"boom": "x"}})
	four := s.Match(&rules.Input{Attrs: map[string]string{"special": "yes"}})
	lists = s.DropReplaced([][]rules.Selection{three, four})
	if len(lists[1]) != 1 || lists[1][0].Rule.Name != "special" {
		t.Errorf("a failed when replaced %q", summary(lists[1]))
	}
}

// A rule replaced in its own input still replaces rules of the others, as
// envoy ratelimit collects every replaces of a request before it drops
// any.
func TestDropReplacedChainsAcrossLists(t *testing.T) {
	s := mustLoad(t, `rules:
  - {name: a, when: 'attrs["x"] != ""', subject: '"a"', plugin: fixedwindow, config: {limit: 1, window: 1m}, replaces: [b]}
  - {name: b, when: 'attrs["x"] != ""', subject: '"b"', plugin: fixedwindow, config: {limit: 1, window: 1m}, replaces: [c]}
  - {name: c, when: 'attrs["y"] != ""', subject: '"c"', plugin: fixedwindow, config: {limit: 1, window: 1m}}
`)
	both := &rules.Input{Attrs: map[string]string{"x": "1", "y": "1"}}
	if got := summary(s.Match(both)); got != "a=a" {
		t.Errorf("one input: %q, want a alone", got)
	}
	lists := s.DropReplaced([][]rules.Selection{
		s.AppendMatchUnreplaced(nil, &rules.Input{Attrs: map[string]string{"x": "1"}}),
		s.AppendMatchUnreplaced(nil, &rules.Input{Attrs: map[string]string{"y": "1"}}),
	})
	if got := summary(lists[0]) + "|" + summary(lists[1]); got != "a=a|" {
		t.Errorf("two inputs: %q, want a alone (b replaces c though a replaces b)", got)
	}
}

func TestReplacesNamesKnownRules(t *testing.T) {
	_, err := load(t, `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
    replaces: [per-ip, per-usr]
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
`)
	l := errorList(t, err)
	all := l.Error()
	for _, want := range []string{"6:16", "replaces: a rule cannot replace itself", "6:24", `replaces: no rule named "per-usr" (did you mean "per-user"?)`} {
		if !strings.Contains(all, want) {
			t.Errorf("errors %q: want %q", all, want)
		}
	}
}

// TestReplacesCostsNoAllocation: a check in which a rule replaces another
// allocates nothing for it (AppendMatch into a reused slice).
func TestReplacesCostsNoAllocation(t *testing.T) {
	const rulesText = `rules:
  - name: per-ip
    subject: '"ip"'
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
  - name: per-user
    subject: '"user"'
    plugin: fixedwindow
    config: {limit: 100, window: 1m}
`
	with := mustLoad(t, rulesText+"    replaces: [per-ip]\n")
	without := mustLoad(t, rulesText) // the same matching, nothing replaced
	in := &rules.Input{}
	buf := make([]rules.Selection, 0, 4)
	match := func(s *rules.Set, want int) func() {
		return func() {
			if got := s.AppendMatch(buf[:0], in); len(got) != want {
				t.Fatalf("matched %d, want %d", len(got), want)
			}
		}
	}
	// Against the same matching without replaces, counted alike in the same
	// run: under the race detector sync.Pool drops what it is given at
	// random, so the evaluation state is sometimes made anew on both sides.
	const n = 20000
	var withMallocs, withoutMallocs uint64
	for range 4 {
		withoutMallocs += mallocs(n/4, match(without, 2))
		withMallocs += mallocs(n/4, match(with, 1))
	}
	if withMallocs > withoutMallocs+n/10 {
		t.Fatalf("%d allocations in %d matches with replaces, %d without: replaces allocates", withMallocs, n, withoutMallocs)
	}
}

// mallocs is the number of heap allocations of n calls of f.
func mallocs(n int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}
