package ruletest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/offline/ruletest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

const rulesYAML = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 10s}
  - name: admin
    when: request.path startsWith "/admin"
    subject: request.user
    plugin: tokenbucket
    config: {rate: 1, per: 1s, burst: 2}
`

const testYAML = `tests:
  - name: three per window
    steps:
      - request: {ip: 192.0.2.1}
        repeat: 3
        expect: {allowed: true}
      - at: 4s
        request: {ip: 192.0.2.1}
        expect:
          allowed: false
          retry_after: 6s
          rules:
            per-ip: {allowed: false, remaining: 0, retry_after: {value: 6s, tolerance: 1ms}}
            admin: {matched: false}
      - at: 10s
        request: {ip: 192.0.2.1}
        expect: {allowed: true, rules: {per-ip: {remaining: 2, reset: 10s}}}
  - name: wrong on purpose
    start: 2026-03-08T09:00:00+01:00
    steps:
      - request: {ip: 192.0.2.2, path: /admin/x, user: ann}
        hits: 2
        expect:
          rules:
            admin: {allowed: true, remaining: 1, subject: ann}
            per-ip: {remaining: 1}
      - request: {ip: 192.0.2.2, path: /admin/x, user: ann}
        repeat: 4
        hits: 0
        expect: {allowed: false}
`

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunReportsEachFailureWithItsPosition(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "rules.yaml", rulesYAML)
	path := write(t, dir, "rules_test.yaml", testYAML)
	f, err := ruletest.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Rules != dir {
		t.Errorf("rules %q, want the file's directory %q", f.Rules, dir)
	}
	set, err := rules.Load(f.Rules, builtin.NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	if err := ruletest.CheckRules(f, set); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) != 2 {
		t.Fatalf("%d cases", len(f.Cases))
	}
	if want := time.Date(2026, 3, 8, 8, 0, 0, 0, time.UTC); !f.Cases[1].Start.Equal(want) {
		t.Errorf("start %s, want %s", f.Cases[1].Start, want)
	}
	var outs []ruletest.Outcome
	for _, c := range f.Cases {
		sim, err := host.NewSimulator(set)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, c.Run(context.Background(), sim))
	}
	if o := outs[0]; !o.Passed() || o.Checks != 5 {
		t.Errorf("case 1: %d checks, failures %v", o.Checks, o.Failures)
	}
	// Case 2: admin grants 2 of a burst of 2 (remaining 0, not 1); per-ip
	// counts 2 hits of 3 (remaining 1, as expected); the peeks that follow
	// are denied by the empty bucket, as expected, though 4 are sent.
	o := outs[1]
	if o.Passed() || o.Checks != 5 || len(o.Failures) != 1 {
		t.Fatalf("case 2: %d checks, failures %v", o.Checks, o.Failures)
	}
	got := o.Failures[0].Error()
	want := path + ":25:47: step 1 (at 0s): rule admin: remaining: want 1, got 0"
	if got != want {
		t.Errorf("failure\n got %s\nwant %s", got, want)
	}
}

func TestRunReportsOneFailingRepetitionAndUnmatchedRules(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "rules.yaml", rulesYAML)
	path := write(t, dir, "a_test.yaml", `tests:
  - name: n
    steps:
      - request: {ip: 192.0.2.9}
        repeat: 5
        expect: {allowed: true, rules: {admin: {allowed: true}}}
`)
	f, err := ruletest.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Load(dir, builtin.NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	sim, _ := host.NewSimulator(set)
	o := f.Cases[0].Run(context.Background(), sim)
	if o.Checks != 5 || len(o.Failures) != 1 {
		t.Fatalf("%d checks, failures %v", o.Checks, o.Failures)
	}
	if got := o.Failures[0].Error(); !strings.Contains(got, "step 1 (at 0s, check 1 of 5): rule admin: allowed: want true, got no match") {
		t.Errorf("failure %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "bad_test.yaml", `rules: nowhere.yaml
tests:
  - name: a
    steps:
      - at: 2s
        requst: {ip: x}
      - at: 1s
        hits: 1.5
        expect: {allowed: maybe, retry_after: soon, rules: {r: {remainng: 1}}}
  - name: a
    steps: []
  - steps:
      - repeat: 0
`)
	_, err := ruletest.Parse(path)
	var list rules.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err %v, want a rules.ErrorList", err)
	}
	want := []string{
		path + `:6:9: unknown key "requst" (did you mean "request"?)`,
		path + `:7:13: at: 1s is before the step before it (2s): time only moves forward`,
		path + `:8:15: hits: want a whole number, got "1.5"`,
		path + `:9:27: expect.allowed: want true or false, got "maybe"`,
		path + `:9:47: expect.retry_after: want a duration of at least 0 such as 1.5s or 250ms, got "soon"`,
		path + `:9:65: unknown key "remainng" (did you mean "remaining"?)`,
		path + `:11:12: steps: want a list of at least one step`,
		path + `:12:5: name: missing; every case needs a name`,
		path + `:13:17: repeat: want 1 to 1000000, got 0`,
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckRulesNamesUnknownRules(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "rules.yaml", rulesYAML)
	path := write(t, dir, "x_test.yaml", "tests:\n  - name: a\n    steps:\n      - expect: {rules: {per_ip: {allowed: true, remaining: 1}}}\n")
	f, err := ruletest.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Load(dir, builtin.NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	err = ruletest.CheckRules(f, set)
	want := path + `:4:26: expect.rules: no rule "per_ip" in ` + dir + ` (did you mean "per-ip"?)`
	if err == nil || err.Error() != want {
		t.Errorf("CheckRules = %v\nwant %s", err, want)
	}
}

// failAfter is a checker that fails from its nth check on.
type failAfter struct {
	ruletest.Checker
	n, checks int
}

func (f *failAfter) Check(nowUS int64, req *host.CheckRequest) host.Result {
	f.checks++
	return f.Checker.Check(nowUS, req)
}

func (f *failAfter) Err() error {
	if f.checks >= f.n {
		return errors.New("redis down")
	}
	return nil
}

// A checker that fails stops the case where it failed.
func TestRunStopsWhereTheCheckerFails(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "rules.yaml", rulesYAML)
	path := write(t, dir, "f_test.yaml", "tests:\n  - name: n\n    steps:\n      - request: {ip: 192.0.2.1}\n      - at: 1s\n        request: {ip: 192.0.2.1}\n        repeat: 10\n")
	f, err := ruletest.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := rules.Load(dir, builtin.NewCatalog())
	sim, _ := host.NewSimulator(set)
	o := f.Cases[0].Run(context.Background(), &failAfter{Checker: sim, n: 4})
	if o.Passed() || o.Checks != 4 || o.Err == nil || o.Err.Error() != path+":5:9: step 2 (at 1s, check 3 of 10): redis down" {
		t.Errorf("checks %d, err %v", o.Checks, o.Err)
	}
}

func TestParseRefusesFilesThatCannotFail(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ content, want string }{
		{"tests: []\n", ":1:8: tests: want a list of at least one case"},
		{"x-step: &s {request: {ip: a}}\ntests:\n  - {name: a, steps: [*s]}\n---\ntests: []\n", ":4:1: only one YAML document per file is supported"},
		{"tests:\n  - {name: a, steps: [{expect: {allowed: 'true'}}]}\n", `:2:42: expect.allowed: want true or false without quotes, got the string "true"`},
		{"", ": no tests: want a mapping with the key tests"},
		{"tests:\n  - {name: a, steps: [{dedup_id: " + strings.Repeat("d", 257) + "}]}\n", ":2:34: dedup_id: at most 256 bytes, got 257"},
	} {
		path := write(t, dir, "c_test.yaml", c.content)
		_, err := ruletest.Parse(path)
		if err == nil || err.Error() != path+c.want {
			t.Errorf("%q: err %v\nwant %s", c.content, err, path+c.want)
		}
	}
	// x- keys hold anchors, as in rule files.
	path := write(t, dir, "a_test.yaml", "x-ann: &ann {user: ann}\ntests:\n  - {name: a, steps: [{request: *ann}]}\n")
	if f, err := ruletest.Parse(path); err != nil || f.Cases[0].Steps[0].Request.Request.User != "ann" {
		t.Errorf("x- anchors: %v", err)
	}
}
